// SPDX-License-Identifier: Apache-2.0
// Executor overhead per op with empty stage functors, ranks as threads
// (inproc_communicator). Reported time is the steps' own wall time (thread start
// excluded; an iteration is 50 steps); `us_per_op` = step time / ops per rank. MPI figures come from
// dflop-train-toy with near-empty stages (docs/benchmarks-exec.md).
#include <dflop/exec/executor.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace {

// Does nothing; moves a 64-byte activation per microbatch.
struct empty_stage {
  std::uint32_t stage = 0;
  std::uint32_t stages = 1;
  std::size_t input_bytes(const dflop::microbatch_view&) const { return stage == 0 ? 0 : 64; }
  std::size_t output_bytes(const dflop::microbatch_view&) const { return stage + 1 == stages ? 0 : 64; }
  void forward(dflop::stage_context&) {}
  void backward(dflop::stage_context&) {}
  std::span<double> gradients() { return {}; }
};

void executor_overhead(benchmark::State& state, const char* name, std::uint32_t ranks, std::uint32_t m,
                       std::uint32_t replicas) {
  const std::uint32_t chunks = std::string(name) == "interleaved" ? 2 : 1;
  const auto schedule = dflop::make_schedule(name, {ranks, m}, chunks);
  const auto samples = dflop::generate_mixture("onevision", static_cast<std::size_t>(m) * replicas, 1);
  const auto lists = dflop::contiguous_microbatches(samples.size(), m * replicas);
  const dflop::step_batch batch{samples, lists};
  const int steps = 50;  // per benchmark iteration (one thread start)
  double total = 0;
  for (auto _ : state) {
    std::vector<double> slowest(steps, 0.0);
    std::mutex mutex;
    dflop::run_inproc(static_cast<int>(ranks * replicas), [&](dflop::inproc_communicator& comm) {
      const auto rank = static_cast<std::uint32_t>(comm.rank()) % ranks;
      std::vector<empty_stage> stages;
      for (std::uint32_t c = 0; c < chunks; ++c) stages.push_back({c * ranks + rank, schedule.stages()});
      dflop::executor<dflop::inproc_communicator, empty_stage> run(comm, ranks, std::move(stages));
      for (int step = 0; step < steps; ++step) {
        const double seconds = run.step(schedule, batch).seconds;
        std::lock_guard lock(mutex);
        slowest[static_cast<std::size_t>(step)] = std::max(slowest[static_cast<std::size_t>(step)], seconds);
      }
    });
    double sum = 0;
    for (double s : slowest) sum += s;
    state.SetIterationTime(sum);
    total += sum / steps;
  }
  const double ops_per_rank = static_cast<double>(schedule.rank_ops[0].size());
  state.counters["us_per_op"] = benchmark::Counter(total / static_cast<double>(state.iterations()) / ops_per_rank * 1e6);
  state.counters["us_per_step"] = benchmark::Counter(total / static_cast<double>(state.iterations()) * 1e6);
  state.counters["ops_per_rank"] = ops_per_rank;
}

}  // namespace

BENCHMARK_CAPTURE(executor_overhead, 1f1b_S1_m8, "1f1b", 1, 8, 1)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(executor_overhead, 1f1b_S2_m8, "1f1b", 2, 8, 1)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(executor_overhead, 1f1b_S4_m16, "1f1b", 4, 16, 1)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(executor_overhead, zb_h1_S4_m16, "zb-h1", 4, 16, 1)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(executor_overhead, interleaved_S4_m16, "interleaved", 4, 16, 1)
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(executor_overhead, 1f1b_S2_m8_dp2, "1f1b", 2, 8, 2)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
