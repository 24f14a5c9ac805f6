// SPDX-License-Identifier: Apache-2.0
//! Packer benchmarks: time per call of every packer for each (N samples, K bins),
//! with the gap to the lower bound as a counter, the heuristics' true gap
//! to `exact_packer` on small instances, and the default packer against the
//! simple local search it must never lose to (`detail::lpt_descent`).
//!
//! Reproduce: cmake --build build --target pack_bench && build/bench/pack_bench
//!   --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/plan/pack.hpp>
#include <dflop/plan/pack/lpt_descent.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/mixture.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

//! 2-D costs (encoder, LLM seconds) of `samples` samples of the built-in
//! onevision mixture priced by the FLOPs cost model for siglip-400m+qwen2.5-7b on
//! an H100. The encoder column is scaled so both columns have the same total:
//! that is the planner's situation when the encoder's GPUs are sized to its
//! share of the work, and it keeps both dimensions binding (raw, the LLM
//! dominates about 10x and the problem is nearly one-dimensional).
dflop::cost_matrix mixture_costs(std::size_t samples, std::uint64_t seed) {
  static const dflop::multimodal_spec model = dflop::find_model("siglip-400m+qwen2.5-7b");
  static const dflop::flops_cost_model cost(model, dflop::find_gpu("h100-80gb"));
  const auto batch = dflop::generate_mixture("onevision", samples, seed);
  std::vector<double> values(samples * 2);
  double encoder_total = 0, llm_total = 0;
  for (std::size_t i = 0; i < samples; ++i) {
    const std::span<const dflop::sample> one(&batch[i], 1);
    values[2 * i] = cost.estimate_time(dflop::module_kind::encoder, 1, one).whole(model.encoder.layers).total();
    values[2 * i + 1] = cost.estimate_time(dflop::module_kind::llm, 1, one).whole(model.llm.layers).total();
    encoder_total += values[2 * i];
    llm_total += values[2 * i + 1];
  }
  for (std::size_t i = 0; i < samples; ++i) values[2 * i] *= llm_total / encoder_total;
  return dflop::cost_matrix(samples, 2, std::move(values));
}

//! 2-D heavy-tailed costs: per sample an LLM time, log-normal (sigma 0.6), and an
//! encoder time, 0 for a quarter of the samples (text only) and 0.2-1.5x the LLM
//! time otherwise; 3% of the samples are 10-40x larger in both. The encoder
//! column is scaled to the LLM column's total, as in `mixture_costs`.
dflop::cost_matrix heavy_tailed_costs(std::size_t samples, std::uint64_t seed) {
  dflop::random_generator random(seed);
  std::vector<double> values(samples * 2);
  double encoder_total = 0, llm_total = 0;
  for (std::size_t i = 0; i < samples; ++i) {
    const double scale = random.uniform() < 0.03 ? random.uniform(10, 40) : 1.0;
    const double llm = scale * random.lognormal(0, 0.6);
    values[2 * i] = random.uniform() < 0.25 ? 0.0 : llm * random.uniform(0.2, 1.5);
    values[2 * i + 1] = llm;
    encoder_total += values[2 * i];
    llm_total += values[2 * i + 1];
  }
  for (std::size_t i = 0; i < samples; ++i) values[2 * i] *= llm_total / encoder_total;
  return dflop::cost_matrix(samples, 2, std::move(values));
}

//! The reference local search as a packer, so it is timed like the others:
//! the LPT start of `refined_packer`, then move/swap descent to a local optimum.
struct lpt_descent_packer {
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "lpt_descent"; }
  void pack(const dflop::cost_matrix& costs, std::size_t bins, const dflop::pack_options& options,
            dflop::pack_workspace& workspace, dflop::packing& result) const {
    dflop::detail::lpt_descent(costs, bins, options, workspace, result);
  }
};

constexpr std::size_t instances = 8;  // distinct batches per (N, K), cycled through while timing

//! Times `Packer` on `instances` batches of N samples into K bins; counter `gap_%`
//! is the mean makespan / lower bound - 1 over those batches, in percent. A third
//! argument 1 draws `heavy_tailed_costs` instead of the mixture. Where N <=
//! `descent_sample_limit`, `over_descent_%` is the mean makespan / `lpt_descent`'s
//! - 1 (negative: better than the descent) and `lost_to_descent` counts the
//! batches where the packer is worse than the descent by more than rounding.
template <class Packer>
void pack_benchmark(benchmark::State& state) {
  const auto samples = static_cast<std::size_t>(state.range(0));
  const auto bins = static_cast<std::size_t>(state.range(1));
  const bool heavy = state.range(2) != 0;
  std::vector<dflop::cost_matrix> batches;
  for (std::size_t s = 0; s < instances; ++s)
    batches.push_back(heavy ? heavy_tailed_costs(samples, 1000 + s) : mixture_costs(samples, 1000 + s));
  dflop::pack_workspace workspace;
  dflop::packing result, reference;
  const Packer packer{};
  double gap = 0, worst = 0, over_descent = 0, lost = 0;
  const bool compare = samples <= dflop::detail::descent_sample_limit;
  for (const auto& batch : batches) {
    packer.pack(batch, bins, {.seed = 1}, workspace, result);
    gap += result.gap;
    worst = std::max(worst, result.gap);
    if (!compare) continue;
    dflop::detail::lpt_descent(batch, bins, {.seed = 1}, workspace, reference);
    over_descent += result.makespan / reference.makespan - 1;
    if (result.makespan > reference.makespan * (1 + 1e-12)) ++lost;
  }
  std::size_t next = 0;
  for (auto _ : state) {
    packer.pack(batches[next], bins, {.seed = 1}, workspace, result);
    benchmark::DoNotOptimize(result.makespan);
    next = (next + 1) % instances;
  }
  state.counters["gap_%"] = 100 * gap / instances;
  state.counters["worst_gap_%"] = 100 * worst;
  if (compare) {
    state.counters["over_descent_%"] = 100 * over_descent / instances;
    state.counters["lost_to_descent"] = lost;
  }
}

void grid(benchmark::internal::Benchmark* benchmark) {
  benchmark->ArgNames({"N", "K", "heavy"})->Unit(benchmark::kMicrosecond);
  for (std::int64_t n : {256, 1024, 4096, 16384})
    for (std::int64_t k : {16, 64, 256, 1024})
      if (n >= 2 * k) benchmark->Args({n, k, 0});
}

//! The grid's shapes where `refined_packer` runs the descent (N <= `descent_sample_limit`).
void descent_grid(benchmark::internal::Benchmark* benchmark) {
  benchmark->ArgNames({"N", "K", "heavy"})->Unit(benchmark::kMicrosecond);
  for (std::int64_t n : {256, 1024})
    for (std::int64_t k : {16, 64, 256})
      if (n >= 2 * k && static_cast<std::size_t>(n) <= dflop::detail::descent_sample_limit) benchmark->Args({n, k, 0});
}

//! The reference system's shapes (a global batch of 512 into 64 or 336
//! microbatches), priced from the mixture and heavy-tailed.
void held_out(benchmark::internal::Benchmark* benchmark) {
  benchmark->ArgNames({"N", "K", "heavy"})->Unit(benchmark::kMicrosecond);
  for (std::int64_t heavy : {0, 1})
    for (std::int64_t k : {64, 336}) benchmark->Args({512, k, heavy});
}

BENCHMARK_TEMPLATE(pack_benchmark, dflop::sequential_packer)->Apply(grid);
BENCHMARK_TEMPLATE(pack_benchmark, dflop::lpt_packer)->Apply(grid);
BENCHMARK_TEMPLATE(pack_benchmark, dflop::karmarkar_karp_packer)->Apply(grid);
BENCHMARK_TEMPLATE(pack_benchmark, dflop::refined_packer)->Apply(grid)->Apply(held_out);
BENCHMARK_TEMPLATE(pack_benchmark, lpt_descent_packer)->Apply(descent_grid)->Apply(held_out);

//! Small instances (N <= 20) where `exact_packer` proves the optimum: mean
//! heuristic / optimum - 1 in percent for each heuristic, over 24 batches; the
//! time is that of the exact solver.
void exact_benchmark(benchmark::State& state) {
  const auto samples = static_cast<std::size_t>(state.range(0));
  const auto bins = static_cast<std::size_t>(state.range(1));
  constexpr std::size_t count = 24;
  std::vector<dflop::cost_matrix> batches;
  for (std::size_t s = 0; s < count; ++s) batches.push_back(mixture_costs(samples, 5000 + s));
  dflop::pack_workspace workspace;
  dflop::packing optimum, heuristic;
  double over_lpt = 0, over_kk = 0, over_refined = 0, over_bound = 0;
  std::size_t solved = 0;
  for (const auto& batch : batches) {
    try {
      dflop::exact_packer{}.pack(batch, bins, {}, workspace, optimum);
    } catch (const dflop::search_limit_error&) {
      continue;
    }
    ++solved;
    over_bound += optimum.gap;
    dflop::lpt_packer{}.pack(batch, bins, {}, workspace, heuristic);
    over_lpt += heuristic.makespan / optimum.makespan - 1;
    dflop::karmarkar_karp_packer{}.pack(batch, bins, {}, workspace, heuristic);
    over_kk += heuristic.makespan / optimum.makespan - 1;
    dflop::refined_packer{}.pack(batch, bins, {}, workspace, heuristic);
    over_refined += heuristic.makespan / optimum.makespan - 1;
  }
  std::size_t next = 0;
  for (auto _ : state) {
    try {
      dflop::exact_packer{}.pack(batches[next], bins, {}, workspace, optimum);
    } catch (const dflop::search_limit_error&) {
    }
    next = (next + 1) % count;
  }
  const double solved_count = std::max<double>(1.0, static_cast<double>(solved));
  state.counters["solved"] = static_cast<double>(solved);
  state.counters["optimum_over_bound_%"] = 100 * over_bound / solved_count;
  state.counters["lpt_over_optimum_%"] = 100 * over_lpt / solved_count;
  state.counters["kk_over_optimum_%"] = 100 * over_kk / solved_count;
  state.counters["refined_over_optimum_%"] = 100 * over_refined / solved_count;
}

BENCHMARK(exact_benchmark)
    ->ArgNames({"N", "K"})
    ->Unit(benchmark::kMillisecond)
    ->Args({8, 2})
    ->Args({12, 3})
    ->Args({16, 4})
    ->Args({20, 4})
    ->Args({20, 5});

}  // namespace
