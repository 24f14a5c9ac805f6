// SPDX-License-Identifier: Apache-2.0
//! `refined_packer` never loses to the simple local search of
//! `detail::lpt_descent` (vector LPT, then move/swap descent to a local
//! optimum), on random heavy-tailed batches, mixture batches priced like the
//! benchmark's, and batches with per-bin caps; and the descent itself: its
//! step search gives the same answer both ways, and it ends at a local optimum.
#include "pack_test_support.hpp"

#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/plan/pack/lpt_descent.hpp>
#include <dflop/workload/mixture.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <span>

using namespace dflop;
using dflop::test::check_packing;

namespace {

//! 2-D costs like a real batch: most samples small (log-normal LLM time; an
//! encoder time that is 0 for a quarter of them, text only, else 0.2-1.5x the
//! LLM time), a fraction `outliers` of them 10-40x larger in both.
cost_matrix heavy_tailed(std::size_t samples, double outliers, random_generator& random) {
  std::vector<double> values(samples * 2);
  for (std::size_t i = 0; i < samples; ++i) {
    const double scale = random.uniform() < outliers ? random.uniform(10, 40) : 1.0;
    const double llm = scale * random.lognormal(0, 0.6);
    values[2 * i] = random.uniform() < 0.25 ? 0.0 : llm * random.uniform(0.2, 1.5);
    values[2 * i + 1] = llm;
  }
  return cost_matrix(samples, 2, std::move(values));
}

//! A random shape: K log-uniform in [2, 336], N uniform in [max(K, 8), 600].
std::pair<std::size_t, std::size_t> random_shape(random_generator& random) {
  const auto bins = static_cast<std::size_t>(std::lround(std::exp(random.uniform(std::log(2.0), std::log(336.0)))));
  const std::size_t least = std::max<std::size_t>(bins, 8);
  return {least + random.below(601 - least), bins};
}

//! The descent's makespan, or nothing when its LPT start cannot meet the caps.
std::optional<double> descent_makespan(const cost_matrix& costs, std::size_t bins, const pack_options& options,
                                       pack_workspace& workspace) {
  packing reference;
  try {
    detail::lpt_descent(costs, bins, options, workspace, reference);
  } catch (const infeasible_error&) {
    return std::nullopt;
  }
  check_packing(reference, costs, bins);
  return reference.makespan;
}

//! Every bin within every cap (to the packers' own rounding allowance).
void check_caps(const packing& result, const bin_caps& caps) {
  const std::size_t capped = caps.limits.size();
  std::vector<double> loads(result.bin_count() * capped, 0.0);
  for (std::size_t i = 0; i < result.bin_of.size(); ++i)
    for (std::size_t c = 0; c < capped; ++c) loads[result.bin_of[i] * capped + c] += caps.amounts(i, c);
  for (std::size_t q = 0; q < loads.size(); ++q) REQUIRE(loads[q] <= caps.limits[q % capped] * (1 + 1e-9));
}

//! Packs with `refined_packer` and checks it against the descent; true when the
//! descent ran (its LPT start met the caps).
bool check_never_loses(const cost_matrix& costs, std::size_t bins, const pack_options& options,
                       pack_workspace& workspace) {
  packing refined;
  refined_packer{}.pack(costs, bins, options, workspace, refined);
  check_packing(refined, costs, bins);
  if (options.caps) check_caps(refined, *options.caps);
  const auto reference = descent_makespan(costs, bins, options, workspace);
  if (!reference) return false;
  REQUIRE(refined.makespan <= *reference * (1 + 1e-12));
  return true;
}

}  // namespace

TEST_CASE("refined_packer never loses to the LPT descent on heavy-tailed batches", "[pack]") {
  pack_workspace workspace;
  std::size_t instances = 0;
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    random_generator random(seed);
    const auto [samples, bins] = random_shape(random);
    const double outliers = random.uniform(0, 0.05);  // from none to 1 in 20
    const auto costs = heavy_tailed(samples, outliers, random);
    CAPTURE(seed, samples, bins, outliers);
    REQUIRE(check_never_loses(costs, bins, {.seed = seed}, workspace));
    ++instances;
  }
  CHECK(instances == 400);
}

TEST_CASE("refined_packer never loses to the LPT descent at chosen shapes", "[pack]") {
  // The edges of the range and the reference system's shapes (512 into 64 and 336).
  pack_workspace workspace;
  const std::pair<std::size_t, std::size_t> shapes[] = {{8, 2},   {8, 8},    {9, 8},    {64, 2},   {65, 64},
                                                        {600, 2}, {600, 3},  {600, 336}, {336, 336}, {512, 64},
                                                        {512, 336}, {337, 336}, {256, 64}, {600, 150}};
  for (const auto& [samples, bins] : shapes)
    for (std::uint64_t seed = 0; seed < 6; ++seed) {
      random_generator random(1000 + seed);
      const auto costs = heavy_tailed(samples, seed % 3 == 0 ? 0.0 : 0.03, random);
      CAPTURE(samples, bins, seed);
      REQUIRE(check_never_loses(costs, bins, {.seed = seed}, workspace));
    }
}

TEST_CASE("refined_packer never loses to the LPT descent on mixture batches", "[pack]") {
  // Priced as bench/pack_bench.cpp prices them: the onevision mixture on
  // siglip-400m+qwen2.5-7b, H100; encoder column scaled to the LLM's total.
  const multimodal_spec model = find_model("siglip-400m+qwen2.5-7b");
  const flops_cost_model cost(model, find_gpu("h100-80gb"));
  pack_workspace workspace;
  for (const std::size_t bins : {64, 336})
    for (std::uint64_t seed = 1000; seed < 1012; ++seed) {
      const auto batch = generate_mixture("onevision", 512, seed);
      std::vector<double> values(batch.size() * 2);
      double encoder_total = 0, llm_total = 0;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const std::span<const sample> one(&batch[i], 1);
        values[2 * i] = cost.estimate_time(module_kind::encoder, 1, one).whole(model.encoder.layers).total();
        values[2 * i + 1] = cost.estimate_time(module_kind::llm, 1, one).whole(model.llm.layers).total();
        encoder_total += values[2 * i];
        llm_total += values[2 * i + 1];
      }
      for (std::size_t i = 0; i < batch.size(); ++i) values[2 * i] *= llm_total / encoder_total;
      const cost_matrix costs(batch.size(), 2, std::move(values));
      CAPTURE(bins, seed);
      REQUIRE(check_never_loses(costs, bins, {.seed = 1}, workspace));
    }
}

TEST_CASE("refined_packer never loses to the LPT descent under caps", "[pack]") {
  pack_workspace workspace;
  std::size_t compared = 0;
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    random_generator random(5000 + seed);
    const auto [samples, bins] = random_shape(random);
    const auto costs = heavy_tailed(samples, 0.02, random);
    // A token-like capped quantity: the LLM cost with noise; the limit between
    // the largest sample and a few percent to half again over the average bin.
    std::vector<double> amounts(samples);
    double total = 0, largest = 0;
    for (std::size_t i = 0; i < samples; ++i) {
      amounts[i] = costs(i, 1) * random.uniform(0.5, 1.5);
      total += amounts[i];
      largest = std::max(largest, amounts[i]);
    }
    const double limit = std::max(largest, total / static_cast<double>(bins) * random.uniform(1.05, 1.5));
    const bin_caps caps{cost_matrix(samples, 1, std::move(amounts)), {limit}};
    CAPTURE(seed, samples, bins, limit);
    try {
      compared += check_never_loses(costs, bins, {.seed = seed, .caps = &caps}, workspace) ? 1 : 0;
    } catch (const infeasible_error&) {
      // refined found no packing within the caps: then neither may the descent.
      CHECK_FALSE(descent_makespan(costs, bins, {.seed = seed, .caps = &caps}, workspace));
    }
  }
  CHECK(compared >= 40);  // most instances exercise the comparison, not only validity
}

TEST_CASE("refined_packer with the descent: same seed, same packing", "[pack]") {
  random_generator random(77);
  const auto costs = heavy_tailed(512, 0.02, random);
  pack_workspace workspace;
  const auto first = pack(refined_packer{}, costs, 64, {.seed = 3}, workspace);
  (void)pack(refined_packer{}, heavy_tailed(300, 0.0, random), 100, {.seed = 4}, workspace);
  CHECK(first == pack(refined_packer{}, costs, 64, {.seed = 3}, workspace));
  CHECK(first == pack(refined_packer{}, costs, 64, {.seed = 3}));
}

TEST_CASE("the descent's step search: every pair and sorted windows agree", "[pack]") {
  // Costs from a few values, so ties between steps are common; bins from tiny to 300 samples.
  pack_workspace workspace;
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    random_generator random(seed);
    const std::size_t bins = 2 + random.below(6);
    const std::size_t samples = bins + random.below(600);
    const std::size_t dimensions = 1 + random.below(3);
    std::vector<double> values(samples * dimensions);
    for (double& value : values) value = static_cast<double>(random.below(seed % 2 ? 5 : 1000));
    const cost_matrix costs(samples, dimensions, std::move(values));
    std::optional<bin_caps> caps;
    if (seed % 3 == 0) caps = bin_caps::on_dimension(costs, 0, std::numeric_limits<double>::max());
    if (seed % 6 == 0) caps->limits[0] = 5.0 * static_cast<double>(samples) / static_cast<double>(bins);
    detail::bin_state state(costs, bins, caps ? &*caps : nullptr, workspace);
    for (std::size_t i = 0; i < samples; ++i) state.assign(i, i < bins ? i : random.below(bins));
    std::vector<std::pair<double, std::uint32_t>> scratch;
    for (std::size_t from = 0; from < bins; ++from)
      for (std::size_t to = 0; to < bins; ++to) {
        if (to == from) continue;
        for (const double cut : {state.makespan(), state.peak(from), 0.5 * (state.peak(from) + state.peak(to))}) {
          CAPTURE(seed, samples, bins, dimensions, from, to, cut);
          const auto every = detail::descent_step_search<0>(state, from, to, cut).all();
          const auto windowed = detail::descent_step_search<0>(state, from, to, cut).windowed(scratch);
          CHECK(every.out == windowed.out);
          CHECK(every.in == windowed.in);
          CHECK(every.peak == windowed.peak);
          if (dimensions == 2) {
            const auto fixed = detail::descent_step_search<2>(state, from, to, cut).windowed(scratch);
            CHECK(fixed.out == every.out);
            CHECK(fixed.in == every.in);
          }
        }
      }
  }
}

TEST_CASE("lpt_descent ends at a local optimum of its neighbourhood", "[pack]") {
  // Checked by brute force: no move or swap out of the bottleneck leaves both
  // bins strictly below the makespan, unless the makespan is the lower bound.
  pack_workspace workspace;
  packing result;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    random_generator random(300 + seed);
    const auto [samples, bins] = random_shape(random);
    const auto costs = heavy_tailed(samples, 0.02, random);
    detail::lpt_descent(costs, bins, {}, workspace, result);
    check_packing(result, costs, bins);
    if (result.makespan <= result.lower_bound * (1 + 1e-12)) continue;
    std::vector<double> loads(bins * 2, 0.0);
    for (std::size_t i = 0; i < samples; ++i)
      for (std::size_t d = 0; d < 2; ++d) loads[result.bin_of[i] * 2 + d] += costs(i, d);
    auto peak = [&](std::size_t k) { return std::max(loads[2 * k], loads[2 * k + 1]); };
    std::size_t bottleneck = 0;
    for (std::size_t k = 1; k < bins; ++k)
      if (peak(k) > peak(bottleneck)) bottleneck = k;
    const double cut = peak(bottleneck) * (1 - 1e-9);  // a clear improvement, not rounding
    const auto mine = result.bin(bottleneck);
    CAPTURE(seed, samples, bins);
    for (std::size_t to = 0; to < bins; ++to) {
      if (to == bottleneck) continue;
      for (const std::size_t x : mine) {
        for (const std::size_t y : result.bin(to)) {
          double after = 0;
          for (std::size_t d = 0; d < 2; ++d) {
            after = std::max(after, loads[2 * bottleneck + d] - costs(x, d) + costs(y, d));
            after = std::max(after, loads[2 * to + d] - costs(y, d) + costs(x, d));
          }
          REQUIRE(after >= cut);
        }
        if (mine.size() < 2) continue;
        double after = 0;
        for (std::size_t d = 0; d < 2; ++d)
          after = std::max({after, loads[2 * bottleneck + d] - costs(x, d), loads[2 * to + d] + costs(x, d)});
        REQUIRE(after >= cut);
      }
    }
  }
}
