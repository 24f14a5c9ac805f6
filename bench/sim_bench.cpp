// SPDX-License-Identifier: Apache-2.0
// Simulator speed (target: 1F1B with S = 16, m = 256 in <= 1 ms) and what the
// microbatch ordering policies gain on heterogeneous random costs.
#include <dflop/schedule.hpp>
#include <dflop/sim.hpp>
#include <dflop/util/random.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

dflop::pipeline_costs random_costs(std::uint64_t seed, std::uint32_t m, std::uint32_t stages) {
  dflop::random_generator random(seed);
  dflop::pipeline_costs costs{m, stages, {}, {}, {}, {}};
  for (std::uint32_t j = 0; j < m; ++j) {
    const double size = random.lognormal(0, 0.6);  // a microbatch is heavy on every stage
    for (std::uint32_t s = 0; s < stages; ++s) {
      const double f = size * random.lognormal(0, 0.3);
      costs.forward.push_back(f);
      costs.backward.push_back(1.2 * f);
      costs.weight.push_back(0.8 * f);
      costs.transfer.push_back(0.01);
    }
  }
  return costs;
}

// A 64-GPU-like multimodal iteration: encoder 2 stages x DP 4, LLM 8 stages x DP 6,
// m slots. LLM replica r's samples sit on encoder replica r % 4. Per (replica, slot)
// encoder work is heavy-tailed (images, videos, text-only zeros), LLM work grows
// with sequence length.
dflop::multimodal_costs multimodal_case(std::uint64_t seed, std::uint32_t m) {
  dflop::random_generator random(seed);
  dflop::multimodal_costs c;
  c.microbatches = m;
  c.encoder.stages = 2;
  c.encoder.replicas = 4;
  c.llm.stages = 8;
  c.llm.replicas = 6;
  std::vector<double> encoder_work(static_cast<std::size_t>(c.encoder.replicas) * m, 0.0);
  c.handoffs.assign(static_cast<std::size_t>(c.encoder.replicas) * m * c.llm.replicas, dflop::handoff{});
  c.llm.forward.resize(static_cast<std::size_t>(c.llm.replicas) * m * c.llm.stages);
  c.llm.backward.resize(c.llm.forward.size());
  for (std::uint32_t r = 0; r < c.llm.replicas; ++r)
    for (std::uint32_t k = 0; k < m; ++k) {
      const double vision = random.uniform() < 0.3 ? 0.0 : random.lognormal(-1.0, 1.0);
      const double text = random.lognormal(-1.5, 0.7);
      const std::uint32_t e = r % c.encoder.replicas;
      encoder_work[static_cast<std::size_t>(e) * m + k] += vision;
      c.handoffs[c.handoff_at(e, k, r)] = {true, 0.002};
      for (std::uint32_t s = 0; s < c.llm.stages; ++s) {
        c.llm.forward[c.llm.at(r, k, s, m)] = (text + 0.3 * vision) / c.llm.stages;
        c.llm.backward[c.llm.at(r, k, s, m)] = 2 * (text + 0.3 * vision) / c.llm.stages;
      }
    }
  for (std::uint32_t e = 0; e < c.encoder.replicas; ++e)
    for (std::uint32_t k = 0; k < m; ++k)
      for (std::uint32_t s = 0; s < c.encoder.stages; ++s) {
        const double work = encoder_work[static_cast<std::size_t>(e) * m + k] / c.encoder.stages;
        c.encoder.forward.push_back(work);
        c.encoder.backward.push_back(2 * work);
      }
  c.encoder.gradient_bytes.assign(c.encoder.stages, 0.4e9);
  c.encoder.gradient_link = {100e9, 20e-6};
  c.llm.gradient_bytes.assign(c.llm.stages, 1.9e9);
  c.llm.gradient_link = {100e9, 20e-6};
  return c;
}

void simulate_pipeline(benchmark::State& state, const char* name) {
  const auto stages = static_cast<std::uint32_t>(state.range(0));
  const auto m = static_cast<std::uint32_t>(state.range(1));
  const auto schedule = dflop::make_schedule(name, {stages, m}, std::string(name) == "interleaved" ? 2 : 1);
  auto costs = random_costs(1, m, schedule.ranks);
  costs = dflop::spread_over_chunks(costs, schedule.chunks);
  dflop::pipeline_simulator simulator;
  dflop::simulation_result result;
  simulator.simulate(schedule, costs, result);  // warm the buffers
  for (auto _ : state) {
    simulator.simulate(schedule, costs, result);
    benchmark::DoNotOptimize(result.makespan);
  }
  state.counters["ops"] = static_cast<double>(schedule.op_count());
  state.counters["ops_per_second"] =
      benchmark::Counter(static_cast<double>(schedule.op_count()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(simulate_pipeline, one_f_one_b, "1f1b")->Args({16, 256})->Args({8, 64})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(simulate_pipeline, gpipe, "gpipe")->Args({16, 256})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(simulate_pipeline, zero_bubble_h1, "zb-h1")->Args({16, 256})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(simulate_pipeline, interleaved_v2, "interleaved")->Args({16, 256})->Unit(benchmark::kMicrosecond);

void simulate_multimodal(benchmark::State& state) {
  const auto m = static_cast<std::uint32_t>(state.range(0));
  const auto costs = multimodal_case(3, m);
  const auto schedule = dflop::one_f_one_b{}.make({costs.positions(), m});
  dflop::multimodal_simulator simulator;
  dflop::simulation_result result;
  simulator.simulate(schedule, costs, result);
  for (auto _ : state) {
    simulator.simulate(schedule, costs, result);
    benchmark::DoNotOptimize(result.makespan);
  }
  state.counters["ops"] = static_cast<double>(result.timings.size());
  state.counters["ops_per_second"] =
      benchmark::Counter(static_cast<double>(result.timings.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(simulate_multimodal)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);

// What an order search pays per candidate: the schedule and costs bound once,
// then one whole run per slot order (here the reversed order, no cutoff).
void simulate_multimodal_bound(benchmark::State& state) {
  const auto m = static_cast<std::uint32_t>(state.range(0));
  const auto costs = multimodal_case(3, m);
  const auto schedule = dflop::one_f_one_b{}.make({costs.positions(), m});
  std::vector<std::uint32_t> order(m);
  for (std::uint32_t j = 0; j < m; ++j) order[j] = m - 1 - j;
  dflop::multimodal_simulator simulator;
  const auto ops = static_cast<double>(simulator.simulate(schedule, costs).timings.size());
  simulator.bind(schedule, costs);
  for (auto _ : state) benchmark::DoNotOptimize(simulator.bound_makespan_below(order, std::numeric_limits<double>::infinity()));
  state.counters["ops"] = ops;
  state.counters["ops_per_second"] = benchmark::Counter(ops, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(simulate_multimodal_bound)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);

// Mean makespan reduction of each ordering policy vs identity, in percent, over 20
// random batches (1F1B, S = 8, m = 32; and the multimodal case with m = 16).
void order_gains(benchmark::State& state) {
  const std::uint32_t batches = 20;
  double johnson_gain = 0;
  double neh_gain = 0;
  double multimodal_johnson_gain = 0;
  double multimodal_neh_gain = 0;
  for (auto _ : state) {
    johnson_gain = neh_gain = multimodal_johnson_gain = multimodal_neh_gain = 0;
    dflop::pipeline_simulator simulator;
    dflop::multimodal_simulator multimodal;
    for (std::uint32_t batch = 0; batch < batches; ++batch) {
      const auto schedule = dflop::one_f_one_b{}.make({8, 32});
      const auto costs = random_costs(100 + batch, 32, 8);
      const auto identity = dflop::order_microbatches(dflop::order_policy::identity, schedule, costs, simulator);
      const auto johnson = dflop::order_microbatches(dflop::order_policy::johnson, schedule, costs, simulator);
      const auto neh = dflop::order_microbatches(dflop::order_policy::neh, schedule, costs, simulator, 1000);
      johnson_gain += 100.0 * (1.0 - johnson.makespan / identity.makespan) / batches;
      neh_gain += 100.0 * (1.0 - neh.makespan / identity.makespan) / batches;

      const auto mm = multimodal_case(200 + batch, 16);
      const auto mm_schedule = dflop::one_f_one_b{}.make({mm.positions(), 16});
      const auto mm_identity = dflop::order_slots(dflop::order_policy::identity, mm_schedule, mm, multimodal);
      const auto mm_johnson = dflop::order_slots(dflop::order_policy::johnson, mm_schedule, mm, multimodal);
      const auto mm_neh = dflop::order_slots(dflop::order_policy::neh, mm_schedule, mm, multimodal, 300);
      multimodal_johnson_gain += 100.0 * (1.0 - mm_johnson.makespan / mm_identity.makespan) / batches;
      multimodal_neh_gain += 100.0 * (1.0 - mm_neh.makespan / mm_identity.makespan) / batches;
    }
  }
  state.counters["1f1b_johnson_gain_pct"] = johnson_gain;
  state.counters["1f1b_neh_gain_pct"] = neh_gain;
  state.counters["multimodal_johnson_gain_pct"] = multimodal_johnson_gain;
  state.counters["multimodal_neh_gain_pct"] = multimodal_neh_gain;
}
BENCHMARK(order_gains)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
