// SPDX-License-Identifier: Apache-2.0
// batch_scheduler on LLM-only layouts (encoder pp 0): random layouts, schedules,
// cost models and batches, each checked against invariants (every sample in
// exactly one LLM microbatch, no encoder parts, costs or hand-offs, a slot order
// that is a permutation) and against the single-module pipeline simulator run on
// the same per-op costs replica by replica; and reprice, which re-prices a
// scheduled batch under another model or links without changing its assignment.
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/pack/refined_packer.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/sampling.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace dflop;

namespace {

// A memory model with no gradients to sum: the simulated iteration is then the
// slowest replica's pipeline, which the single-module simulator computes too.
struct no_gradient_memory {
  [[nodiscard]] memory_breakdown estimate_memory(module_kind, int, stage_slice, int, std::span<const sample>) const {
    return {};
  }
};
static_assert(memory_model<no_gradient_memory>);

// An LLM layer curve only: pricing any encoder part throws, so a scheduler that
// asked it about the encoder would fail the test.
fitted_cost_model llm_only_model(double scale = 1) {
  return fitted_cost_model({{{module_kind::llm, module_part::layer},
                             1,
                             profile_size::tokens,
                             {2e-4 * scale, 3e-7 * scale, 1e-11 * scale, 1, 0, 0},
                             {4e-4 * scale, 6e-7 * scale, 2e-11 * scale, 1, 0, 0}}});
}

// The LLM-only layout of `llm` degrees over `layers` layers split evenly, `m` microbatches.
plan_layout llm_only_layout(module_parallelism llm, int m, std::int64_t layers, const std::string& schedule) {
  module_plan encoder{{1, 0, 1}, {0}};
  module_plan decoder{llm, {0}};
  for (int s = 1; s <= llm.pp; ++s) decoder.first_layer.push_back(layers * s / llm.pp);
  return make_plan_layout(parallel_config{{1, 0, 1}, llm, m}, encoder, decoder, named_schedule(schedule));
}

// The slowest replica's makespan by the single-module simulator, over the LLM costs of `out`.
double single_module_makespan(const plan_layout& layout, const batch_schedule& out) {
  const module_costs& llm = out.costs.llm;
  const auto m = out.costs.microbatches;
  const std::size_t per_replica = static_cast<std::size_t>(m) * llm.stages;
  const auto slice = [&](const std::vector<double>& table, std::uint32_t q) {
    if (table.empty()) return std::vector<double>{};
    const auto first = table.begin() + static_cast<std::ptrdiff_t>(q * per_replica);
    return std::vector<double>(first, first + static_cast<std::ptrdiff_t>(per_replica));
  };
  pipeline_simulator simulator;
  double slowest = 0;
  for (std::uint32_t q = 0; q < llm.replicas; ++q) {
    const pipeline_costs costs{m, llm.stages, slice(llm.forward, q), slice(llm.backward, q), slice(llm.weight, q),
                               slice(llm.transfer, q)};
    slowest = std::max(slowest, simulator.simulate(layout.schedule, costs, out.slot_order).makespan);
  }
  return slowest;
}

}  // namespace

TEST_CASE("LLM-only layouts: every sample once, no encoder parts, the single-module simulator's makespan",
          "[plan][scheduler]") {
  const auto model = test::small_model();
  const auto workload = test::small_workload(600, 3);
  const flops_cost_model flops(model, find_gpu("h100-80gb"));
  const fitted_cost_model fitted = llm_only_model();
  const no_gradient_memory memory;
  const std::array<std::string, 3> schedules{"gpipe", "1f1b", "zb-h1"};
  const std::array<slot_assignment, 3> assignments{slot_assignment::round_robin, slot_assignment::balanced,
                                                   slot_assignment::best_simulated};
  const std::array<order_policy, 3> orders{order_policy::identity, order_policy::johnson, order_policy::neh};
  random_generator rng(11);
  for (int round = 0; round < 60; ++round) {
    const module_parallelism llm{1, 1 + static_cast<int>(rng.below(4)), 1 + static_cast<int>(rng.below(3))};
    const int m = 1 + static_cast<int>(rng.below(6));
    const auto layout = llm_only_layout(llm, m, model.llm.layers, schedules[rng.below(3)]);
    const auto bins = static_cast<std::size_t>(layout.config.bins());
    const std::size_t count = bins + rng.below(3 * bins + 1);
    const auto batch = sample_batch(workload, count, batch_mode::without_replacement, 100 + round);
    const auto cluster = test::small_cluster(layout.config.gpus(), 8);
    batch_options options;
    options.assignment = assignments[rng.below(3)];
    options.order = orders[rng.below(3)];
    options.order_budget = 16;
    options.seed = static_cast<std::uint64_t>(round);
    const bool use_fitted = round % 2 == 0;
    INFO("round " << round << ": " << layout.config << ", " << layout.schedule.name << ", " << count << " samples, "
                  << to_string(options.assignment) << ", " << to_string(options.order) << ", "
                  << (use_fitted ? "fitted" : "flops"));

    batch_schedule out;
    if (use_fitted)
      batch_scheduler<fitted_cost_model, no_gradient_memory, refined_packer>(model, cluster, fitted, memory)
          .schedule(layout, batch, options, out);
    else
      batch_scheduler<flops_cost_model, no_gradient_memory, refined_packer>(model, cluster, flops, memory)
          .schedule(layout, batch, options, out);

    CHECK(out.config == layout.config);
    CHECK(out.encoder_parts.empty());
    CHECK(out.costs.encoder.stages == 0);
    CHECK(out.costs.encoder.forward.empty());
    CHECK(out.costs.handoffs.empty());
    REQUIRE(out.llm_microbatches.size() == bins);
    std::vector<int> seen(count, 0);
    for (const auto& members : out.llm_microbatches) {
      CHECK_FALSE(members.empty());
      for (auto i : members) {
        REQUIRE(i < count);
        ++seen[i];
      }
    }
    CHECK(std::ranges::all_of(seen, [](int times) { return times == 1; }));
    std::vector<std::uint32_t> order = out.slot_order;
    std::ranges::sort(order);
    CHECK(order == identity_order(static_cast<std::uint32_t>(m)));

    REQUIRE(out.predicted_seconds > 0);
    const double single = single_module_makespan(layout, out);
    CHECK(std::abs(out.predicted_seconds - single) <= 1e-12 * single);
  }
}

TEST_CASE("LLM-only layouts with gradients to sum predict at least the slowest replica's pipeline",
          "[plan][scheduler]") {
  const auto model = test::small_model();
  const flops_cost_model flops(model, find_gpu("h100-80gb"));
  const analytic_memory_model memory(model);
  const auto layout = llm_only_layout({1, 2, 2}, 4, model.llm.layers, "1f1b");
  const auto cluster = test::small_cluster(layout.config.gpus(), 8);
  const auto batch = sample_batch(test::small_workload(), 32, batch_mode::without_replacement, 5);
  batch_scheduler<flops_cost_model, analytic_memory_model, refined_packer> scheduler(model, cluster, flops, memory);
  const auto out = scheduler.schedule(layout, batch, {});
  CHECK(out.encoder_parts.empty());
  CHECK(out.costs.llm.gradient_bytes.size() == 2);
  CHECK(out.costs.llm.gradient_bytes[0] > 0);
  CHECK(out.predicted_seconds > single_module_makespan(layout, out));  // plus the gradient all-reduce
}

TEST_CASE("assign_only on an LLM-only layout: bins filled, no encoder parts", "[plan][scheduler]") {
  const auto model = test::small_model();
  const fitted_cost_model fitted = llm_only_model();
  const no_gradient_memory memory;
  const auto layout = llm_only_layout({1, 3, 2}, 5, model.llm.layers, "1f1b");
  const auto cluster = test::small_cluster(layout.config.gpus(), 8);
  const auto batch = sample_batch(test::small_workload(), 40, batch_mode::without_replacement, 9);
  batch_scheduler<fitted_cost_model, no_gradient_memory, refined_packer> scheduler(model, cluster, fitted, memory);
  batch_schedule out;
  scheduler.assign_only(layout, batch, {.assignment = slot_assignment::balanced}, out);
  CHECK(out.encoder_parts.empty());
  REQUIRE(out.llm_microbatches.size() == 10);
  std::size_t total = 0;
  for (const auto& members : out.llm_microbatches) total += members.size();
  CHECK(total == batch.size());
}

TEST_CASE("reprice keeps the assignment and order and prices them under another model or links",
          "[plan][scheduler]") {
  const auto model = test::small_model();
  const no_gradient_memory memory;
  const auto layout = llm_only_layout({1, 4, 2}, 6, model.llm.layers, "zb-h1");
  const auto batch = sample_batch(test::small_workload(), 48, batch_mode::without_replacement, 21);
  const batch_options options{.seed = 4};
  const auto cluster = test::small_cluster(layout.config.gpus(), 8);
  const fitted_cost_model once = llm_only_model(1), twice = llm_only_model(2);
  using scheduler = batch_scheduler<fitted_cost_model, no_gradient_memory, refined_packer>;

  const batch_schedule scheduled = scheduler(model, cluster, once, memory).schedule(layout, batch, options);
  batch_schedule same = scheduled;
  scheduler(model, cluster, once, memory).reprice(layout, batch, options, same);
  CHECK(same.costs == scheduled.costs);
  CHECK(same.predicted_seconds == scheduled.predicted_seconds);

  // Free links: every op twice as long makes the same order exactly twice as long.
  auto free_links = cluster;
  free_links.gpu.intra_node_bandwidth = free_links.gpu.inter_node_bandwidth = std::numeric_limits<double>::infinity();
  free_links.gpu.latency = 0;
  batch_schedule base = scheduled, doubled = scheduled;
  scheduler(model, free_links, once, memory).reprice(layout, batch, options, base);
  scheduler(model, free_links, twice, memory).reprice(layout, batch, options, doubled);
  CHECK(doubled.llm_microbatches == scheduled.llm_microbatches);
  CHECK(doubled.slot_order == scheduled.slot_order);
  CHECK(base.predicted_seconds < scheduled.predicted_seconds);  // the links cost something
  CHECK(doubled.predicted_seconds == 2 * base.predicted_seconds);

  // A latency per hop lengthens the iteration.
  auto slow_links = free_links;
  slow_links.gpu.latency = 1e-3;
  batch_schedule slow = scheduled;
  scheduler(model, slow_links, once, memory).reprice(layout, batch, options, slow);
  CHECK(slow.predicted_seconds > base.predicted_seconds + 1e-3);

  const auto other = llm_only_layout({1, 2, 4}, 6, model.llm.layers, "zb-h1");
  batch_schedule wrong = scheduled;
  CHECK_THROWS_AS(scheduler(model, cluster, once, memory).reprice(other, batch, options, wrong), input_error);
}

namespace {
// `no_gradient_memory` storing activations in fp32 (4 bytes an element).
struct fp32_activation_memory : no_gradient_memory {
  [[nodiscard]] std::int64_t activation_element_bytes() const { return 4; }
};
}  // namespace

TEST_CASE("stage-to-stage sends are priced in the memory model's activation precision", "[plan][scheduler]") {
  const auto model = test::small_model();
  CHECK(activation_element_bytes(no_gradient_memory{}) == 2);  // bf16 unless the model says
  CHECK(activation_element_bytes(fp32_activation_memory{}) == 4);
  memory_options fp32_options;
  fp32_options.precision.activation_bytes = 4;
  CHECK(activation_element_bytes(analytic_memory_model(model)) == 2);
  CHECK(activation_element_bytes(analytic_memory_model(model, fp32_options)) == 4);

  const auto layout = llm_only_layout({1, 4, 2}, 6, model.llm.layers, "1f1b");
  const auto batch = sample_batch(test::small_workload(), 48, batch_mode::without_replacement, 5);
  const batch_options options{.seed = 2};
  auto no_latency = test::small_cluster(layout.config.gpus(), 8);
  no_latency.gpu.latency = 0;  // transfer time is then bytes / bandwidth: exactly twice for twice the bytes
  const fitted_cost_model cost = llm_only_model();
  const no_gradient_memory bf16_memory;
  const fp32_activation_memory fp32_memory;
  const batch_schedule bf16 =
      batch_scheduler<fitted_cost_model, no_gradient_memory, refined_packer>(model, no_latency, cost, bf16_memory)
          .schedule(layout, batch, options);
  batch_schedule fp32 = bf16;
  batch_scheduler<fitted_cost_model, fp32_activation_memory, refined_packer>(model, no_latency, cost, fp32_memory)
      .reprice(layout, batch, options, fp32);
  const auto& sends = bf16.costs.llm.transfer;
  REQUIRE(sends.size() == fp32.costs.llm.transfer.size());
  REQUIRE(std::any_of(sends.begin(), sends.end(), [](double t) { return t > 0; }));
  for (std::size_t i = 0; i < sends.size(); ++i) CHECK(fp32.costs.llm.transfer[i] == 2 * sends[i]);
  CHECK(fp32.predicted_seconds > bf16.predicted_seconds);
}

TEST_CASE("an NEH order whose budget is below the slot count still searches a small batch, not a large one",
          "[plan][scheduler]") {
  using scheduler_type = batch_scheduler<flops_cost_model, no_gradient_memory, refined_packer>;
  const auto model = test::small_model();
  const auto workload = test::small_workload(600, 3);
  const flops_cost_model flops(model, find_gpu("h100-80gb"));
  const no_gradient_memory memory;
  const auto johnson_and_short_search = [&](const plan_layout& layout, std::uint64_t seed) {
    const auto bins = static_cast<std::size_t>(layout.config.bins());
    const auto batch = sample_batch(workload, 2 * bins, batch_mode::with_replacement, seed);
    const auto cluster = test::small_cluster(layout.config.gpus(), 8);
    scheduler_type scheduler(model, cluster, flops, memory);
    batch_options johnson;
    johnson.order = order_policy::johnson;
    johnson.seed = seed;
    batch_options short_search = johnson;
    short_search.order = order_policy::neh;
    short_search.order_budget = static_cast<std::size_t>(layout.config.microbatches) - 1;  // not one slot everywhere
    return std::pair{scheduler.schedule(layout, batch, johnson), scheduler.schedule(layout, batch, short_search)};
  };

  // Small batches: the search runs, never slower than Johnson's order, and sometimes faster.
  random_generator rng(23);
  int faster = 0;
  for (int round = 0; round < 30; ++round) {
    const module_parallelism llm{1, 2 + static_cast<int>(rng.below(3)), 1 + static_cast<int>(rng.below(3))};
    const int m = 3 + static_cast<int>(rng.below(10));
    const auto layout = llm_only_layout(llm, m, model.llm.layers, round % 2 == 0 ? "1f1b" : "zb-h1");
    REQUIRE(scheduler_type::order_search_size(layout.config) <= scheduler_type::large_order_search);
    const auto [by_johnson, searched] = johnson_and_short_search(layout, 300 + static_cast<std::uint64_t>(round));
    INFO("round " << round << ": " << layout.config << ", " << layout.schedule.name);
    CHECK(searched.predicted_seconds <= by_johnson.predicted_seconds);
    faster += searched.predicted_seconds < by_johnson.predicted_seconds ? 1 : 0;
  }
  CHECK(faster > 0);

  // A batch just over the size: Johnson's order, exactly.
  const auto large = llm_only_layout({1, 4, 157}, 65, model.llm.layers, "1f1b");
  REQUIRE(scheduler_type::order_search_size(large.config) == 65 * 4 * 157);
  REQUIRE(scheduler_type::order_search_size(large.config) > scheduler_type::large_order_search);
  const auto [by_johnson, short_searched] = johnson_and_short_search(large, 7);
  CHECK(short_searched.slot_order == by_johnson.slot_order);
  CHECK(short_searched.predicted_seconds == by_johnson.predicted_seconds);
}
