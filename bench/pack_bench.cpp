// SPDX-License-Identifier: Apache-2.0
//! Packer benchmarks: time per call of every packer for each (N samples, K bins),
//! with the gap to the lower bound as a counter, and the heuristics' true gap
//! to `exact_packer` on small instances.
//!
//! Reproduce: cmake --build build --target pack_bench && build/bench/pack_bench
//!   --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <dflop/plan/pack.hpp>
#include <dflop/util/random.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace {

//! Training FLOPs of one SigLIP-400M tile (n = 729 tokens, h = 1152, f = 4304, 27 layers).
double encoder_flops_per_tile() {
  const double n = 729, h = 1152, f = 4304, layers = 27;
  return 3 * layers * (8 * n * h * h + 4 * n * n * h + 4 * n * h * f);
}

//! Training FLOPs of one Qwen2.5-7B sample of `s` tokens (h = 3584, f = 18944,
//! 28 q heads, 4 kv heads, 28 layers, vocabulary 152064, causal attention).
double llm_flops(double s) {
  const double h = 3584, f = 18944, heads = 28, kv_heads = 4, layers = 28, vocabulary = 152064;
  const double layer = 2 * s * h * h * (2 + 2 * kv_heads / heads) + 2 * s * s * h + 6 * s * h * f;
  return 3 * (layers * layer + 2 * s * h * vocabulary);
}

//! Placeholder until dflop's workload mixtures and cost models land: 2-D costs
//! (encoder, LLM) of N samples drawn like a LLaVA-OneVision mixture. 55% AnyRes
//! images (1 base + 1..36 grid tiles; LLM tokens 730 + 729 min(grid, 8) + text),
//! 15% multi-image (2..8 images of one tile, 730 LLM tokens each), 10% video
//! (8..32 frames of one tile, 210 LLM tokens per frame), 20% text (200..4000
//! tokens); every multimodal sample also carries 50..1500 text tokens. Costs are
//! training FLOPs (SigLIP-400M encoder, Qwen2.5-7B LLM); the encoder column is
//! then scaled so both columns have the same total, as when the GPUs are split
//! between encoder and LLM to balance them, which makes both dimensions bind
//! (the hardest case for a 2-D packer).
dflop::cost_matrix synthetic_multimodal_costs(std::size_t samples, std::uint64_t seed) {
  dflop::random_generator random(seed);
  std::vector<double> values(samples * 2);
  double encoder_total = 0, llm_total = 0;
  for (std::size_t i = 0; i < samples; ++i) {
    const double kind = random.uniform();
    const double text = static_cast<double>(random.between(50, 1500));
    double tiles = 0, tokens = 0;
    if (kind < 0.55) {
      const auto grid = random.between(1, 36);
      tiles = static_cast<double>(1 + grid);
      tokens = 730 + 729 * static_cast<double>(std::min<std::int64_t>(grid, 8)) + text;
    } else if (kind < 0.70) {
      tiles = static_cast<double>(random.between(2, 8));
      tokens = 730 * tiles + text;
    } else if (kind < 0.80) {
      tiles = static_cast<double>(random.between(8, 32));
      tokens = 210 * tiles + text;
    } else {
      tokens = static_cast<double>(random.between(200, 4000));
    }
    values[2 * i] = tiles * encoder_flops_per_tile();
    values[2 * i + 1] = llm_flops(tokens);
    encoder_total += values[2 * i];
    llm_total += values[2 * i + 1];
  }
  // Both columns in "LLM FLOPs" units, same totals; then scale to ~seconds at 400 TFLOP/s.
  for (std::size_t i = 0; i < samples; ++i) {
    values[2 * i] *= llm_total / encoder_total / 4e14;
    values[2 * i + 1] /= 4e14;
  }
  return dflop::cost_matrix(samples, 2, std::move(values));
}

constexpr std::size_t instances = 8;  // distinct batches per (N, K), cycled through while timing

//! Times `Packer` on `instances` batches of N samples into K bins; counter `gap_%`
//! is the mean makespan / lower bound - 1 over those batches, in percent.
template <class Packer>
void pack_benchmark(benchmark::State& state) {
  const auto samples = static_cast<std::size_t>(state.range(0));
  const auto bins = static_cast<std::size_t>(state.range(1));
  std::vector<dflop::cost_matrix> batches;
  for (std::size_t s = 0; s < instances; ++s) batches.push_back(synthetic_multimodal_costs(samples, 1000 + s));
  dflop::pack_workspace workspace;
  dflop::packing result;
  const Packer packer{};
  double gap = 0, worst = 0;
  for (const auto& batch : batches) {
    packer.pack(batch, bins, {.seed = 1}, workspace, result);
    gap += result.gap;
    worst = std::max(worst, result.gap);
  }
  std::size_t next = 0;
  for (auto _ : state) {
    packer.pack(batches[next], bins, {.seed = 1}, workspace, result);
    benchmark::DoNotOptimize(result.makespan);
    next = (next + 1) % instances;
  }
  state.counters["gap_%"] = 100 * gap / instances;
  state.counters["worst_gap_%"] = 100 * worst;
}

void grid(benchmark::internal::Benchmark* benchmark) {
  benchmark->ArgNames({"N", "K"})->Unit(benchmark::kMicrosecond);
  for (std::int64_t n : {256, 1024, 4096, 16384})
    for (std::int64_t k : {16, 64, 256, 1024})
      if (n >= 2 * k) benchmark->Args({n, k});
}

BENCHMARK_TEMPLATE(pack_benchmark, dflop::sequential_packer)->Apply(grid);
BENCHMARK_TEMPLATE(pack_benchmark, dflop::lpt_packer)->Apply(grid);
BENCHMARK_TEMPLATE(pack_benchmark, dflop::karmarkar_karp_packer)->Apply(grid);
BENCHMARK_TEMPLATE(pack_benchmark, dflop::refined_packer)->Apply(grid);

//! Small instances (N <= 20) where `exact_packer` proves the optimum: mean
//! heuristic / optimum - 1 in percent for each heuristic, over 24 batches; the
//! time is that of the exact solver.
void exact_benchmark(benchmark::State& state) {
  const auto samples = static_cast<std::size_t>(state.range(0));
  const auto bins = static_cast<std::size_t>(state.range(1));
  constexpr std::size_t count = 24;
  std::vector<dflop::cost_matrix> batches;
  for (std::size_t s = 0; s < count; ++s) batches.push_back(synthetic_multimodal_costs(samples, 5000 + s));
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
