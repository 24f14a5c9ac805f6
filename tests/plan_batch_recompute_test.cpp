// SPDX-License-Identifier: Apache-2.0
// Data-aware recomputation (plan/batch_recompute.hpp): each stage replica of a
// scheduled batch recomputes the fewest of its first layers with which its real
// in-flight peak fits the budget. Checked against a linear scan over the count
// with the bytes counted by hand from the op lists (a memory model with a closed
// form), against the plan's count (never above it, never slower), and through
// the executor (each op is told its stage's count).
#include "exec_multimodal_support.hpp"
#include "plan_test_support.hpp"
#include "scheduler_test_support.hpp"

#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/multimodal_executor.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/plan/batch_recompute.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/pack/refined_packer.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/sampling.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

using namespace dflop;

namespace {

// Bytes with a closed form: each layer holds `weights` bytes; per token of a
// microbatch in flight, a kept layer stores `full` bytes and a recomputed one
// `input`; a stage that recomputes also needs one layer's full set for the
// microbatch being recomputed (as analytic_memory_model counts).
struct layer_memory {
  std::int64_t weights = 1000;
  std::int64_t full = 10;
  std::int64_t input = 2;

  static std::int64_t tokens(module_kind kind, std::span<const sample> microbatch) {
    std::int64_t n = 0;
    for (const sample& s : microbatch) n += kind == module_kind::encoder ? s.encoder_tokens : s.llm_tokens;
    return n;
  }
  [[nodiscard]] memory_breakdown estimate_memory(module_kind kind, int tp, stage_slice slice, int in_flight,
                                                 std::span<const sample> microbatch) const {
    return estimate_memory(kind, tp, slice, in_flight, microbatch, {});
  }
  [[nodiscard]] memory_breakdown estimate_memory(module_kind kind, int, stage_slice slice, int in_flight,
                                                 std::span<const sample> microbatch,
                                                 const memory_choices& choices) const {
    const std::int64_t n = tokens(kind, microbatch);
    const std::int64_t r = recomputed_layers(choices, slice.layers);
    memory_breakdown out;
    out.parameters = weights * slice.layers;
    out.activations = in_flight * n * ((slice.layers - r) * full + r * input) + (r > 0 && in_flight > 0 ? n * full : 0);
    return out;
  }
};
static_assert(memory_model_with_choices<layer_memory>);

// Stage replica (kind, q, s) of `out`, counted by hand: its microbatches' tokens
// by execution position and the microbatches it holds at each forward.
struct stage_holdings {
  std::vector<std::int64_t> tokens;              // by execution position
  std::vector<std::vector<std::uint32_t>> held;  // per forward of the op list
  std::int64_t layers = 0;
};

stage_holdings holdings(const plan_layout& layout, const batch_schedule& out, std::span<const sample> batch,
                        module_kind kind, int q, int s) {
  const module_plan& plan = kind == module_kind::encoder ? layout.encoder : layout.llm;
  const auto m = static_cast<std::size_t>(layout.config.microbatches);
  stage_holdings h;
  h.layers = plan.slice(s).layers;
  h.tokens.assign(m, 0);
  for (std::size_t j = 0; j < m; ++j) {
    const auto& members = kind == module_kind::encoder ? out.encoder_parts[q * m + out.slot_order[j]]
                                                       : out.llm_microbatches[q * m + out.slot_order[j]];
    for (std::uint32_t i : members)
      h.tokens[j] += kind == module_kind::encoder ? batch[i].encoder_tokens : batch[i].llm_tokens;
  }
  std::vector<std::uint32_t> held;
  for (const pipeline_op& op : layout.schedule.rank_ops[static_cast<std::size_t>(layout.position(kind, s))]) {
    if (op.kind == op_kind::forward) {
      held.push_back(op.microbatch);
      h.held.push_back(held);
    } else if (op.kind == op_kind::backward) {
      held.erase(std::find(held.begin(), held.end(), op.microbatch));
    }
  }
  return h;
}

// The stage's peak bytes with `counts[j]` layers recomputed for microbatch j
// (the closed form: no decomposition into kept and working parts).
std::int64_t peak_bytes(const layer_memory& memory, const stage_holdings& h, const std::vector<std::int64_t>& counts) {
  std::int64_t peak = memory.weights * h.layers;
  for (const auto& held : h.held) {
    std::int64_t bytes = memory.weights * h.layers, working = 0;
    for (std::uint32_t j : held) {
      bytes += h.tokens[j] * ((h.layers - counts[j]) * memory.full + counts[j] * memory.input);
      if (counts[j] > 0) working = std::max(working, h.tokens[j] * memory.full);
    }
    peak = std::max(peak, bytes + working);
  }
  return peak;
}

// Bytes the counts free against keeping every layer: what recomputation costs, in bytes.
std::int64_t freed_bytes(const layer_memory& memory, const stage_holdings& h, const std::vector<std::int64_t>& counts) {
  std::int64_t freed = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) freed += h.tokens[j] * counts[j] * (memory.full - memory.input);
  return freed;
}

// A layout of the small model: both modules recompute, random depths and replicas.
plan_layout random_layout(random_generator& random, const std::string& schedule) {
  const multimodal_spec model = test::small_model();
  const int encoder_pp = 1 + static_cast<int>(random.below(2));
  const int llm_pp = 1 + static_cast<int>(random.below(3));
  const int encoder_dp = 1 + static_cast<int>(random.below(2));
  const int llm_dp = 1 + static_cast<int>(random.below(2));
  const int m = 2 + static_cast<int>(random.below(5));
  module_parallelism encoder{1, encoder_pp, encoder_dp};
  module_parallelism llm{1, llm_pp, llm_dp};
  encoder.recompute = llm.recompute = true;
  // Sometimes the plan's count is part of the layers (the block method), sometimes all.
  if (random.below(2) == 0) encoder.recompute_layers = 1 + static_cast<int>(random.below(3));
  if (random.below(2) == 0) llm.recompute_layers = 1 + static_cast<int>(random.below(3));
  module_plan encoder_plan{encoder, {0}}, llm_plan{llm, {0}};
  for (int s = 1; s <= encoder_pp; ++s) encoder_plan.first_layer.push_back(model.encoder.layers * s / encoder_pp);
  for (int s = 1; s <= llm_pp; ++s) llm_plan.first_layer.push_back(model.llm.layers * s / llm_pp);
  return make_plan_layout(parallel_config{encoder, llm, m}, encoder_plan, llm_plan, named_schedule(schedule));
}

// What each case schedules with: the small model, FLOPs costs, `layer_memory`.
using recompute_fixture = test::small_scheduler<layer_memory>;

// Three samples per LLM microbatch of `layout`, drawn from `workload` with `seed`.
std::vector<sample> batch_for(const std::vector<sample>& workload, const plan_layout& layout, std::uint64_t seed) {
  return sample_batch(workload, static_cast<std::size_t>(layout.config.bins()) * 3, batch_mode::without_replacement,
                      seed);
}

// Balanced slots in arrival order within `budget`: the same packing, split and
// order whatever the recompute counts, so batches compare side by side.
batch_options fixed_order(std::int64_t budget) {
  batch_options options;
  options.assignment = slot_assignment::balanced;
  options.order = order_policy::identity;
  options.memory_budget_bytes = budget;
  return options;
}

// `batch` scheduled into `out`; false when it cannot fit the budget at the plan's count.
bool scheduled(recompute_fixture& fixture, const plan_layout& layout, std::span<const sample> batch,
               const batch_options& options, batch_schedule& out) {
  try {
    fixture.scheduler.schedule(layout, batch, options, out);
    return true;
  } catch (const memory_cap_error&) {
    return false;
  }
}

}  // namespace

TEST_CASE("per-microbatch counts fit, stay within the plan's, cannot drop one by one, beat one count for all; "
          "one count per stage replica is the fewest that fits",
          "[plan][memory][property]") {
  recompute_fixture fixture;
  random_generator random(20261206);
  const auto workload = test::small_workload(600, 3);
  std::size_t checked = 0, lowered = 0, partly = 0, kept = 0, mixed = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const std::string schedule = random.below(2) == 0 ? "1f1b" : "zb-h1";
    const plan_layout layout = random_layout(random, schedule);
    INFO("trial " << trial << ": " << layout.config << ", " << schedule);
    const auto batch = batch_for(workload, layout, static_cast<std::uint64_t>(trial));
    const batch_options options = fixed_order(40'000 + static_cast<std::int64_t>(random.below(30)) * 40'000);
    batch_schedule on, off;
    if (!scheduled(fixture, layout, batch, options, on)) continue;  // too small a budget at the plan's count
    batch_options planned = options;
    planned.recompute_per_batch = false;
    fixture.scheduler.schedule(layout, batch, planned, off);
    batch_options one_count = options;
    one_count.recompute_per_microbatch = false;
    batch_schedule per_stage;
    fixture.scheduler.schedule(layout, batch, one_count, per_stage);
    REQUIRE(on.llm_microbatches == off.llm_microbatches);  // the same packing, split and order
    REQUIRE(on.llm_microbatches == per_stage.llm_microbatches);
    REQUIRE(on.encoder_parts == off.encoder_parts);
    REQUIRE(on.slot_order == off.slot_order);
    const int m = layout.config.microbatches;
    const std::int64_t budget = options.memory_budget_bytes;
    for (module_kind kind : all_module_kinds) {
      const module_plan& plan = kind == module_kind::encoder ? layout.encoder : layout.llm;
      REQUIRE((kind == module_kind::encoder ? on.encoder_recomputed : on.llm_recomputed).size() ==
              static_cast<std::size_t>(plan.degrees.dp * m * plan.degrees.pp));
      for (int q = 0; q < plan.degrees.dp; ++q)
        for (int s = 0; s < plan.degrees.pp; ++s) {
          const stage_holdings h = holdings(layout, on, batch, kind, q, s);
          const std::int64_t most = recomputed_layers(plan.degrees, h.layers);
          std::vector<std::int64_t> counts(static_cast<std::size_t>(m));
          for (int j = 0; j < m; ++j) {
            const int slot = static_cast<int>(on.slot_order[static_cast<std::size_t>(j)]);
            counts[static_cast<std::size_t>(j)] = on.recomputed(kind, q, slot, s);
            CHECK(off.recomputed(kind, q, slot, s) == most);
          }
          std::vector<std::int64_t> per_stage_counts(counts.size());
          for (int j = 0; j < m; ++j)
            per_stage_counts[static_cast<std::size_t>(j)] =
                per_stage.recomputed(kind, q, static_cast<int>(on.slot_order[static_cast<std::size_t>(j)]), s);
          // The fewest count for all microbatches, by a linear scan.
          std::int64_t uniform = most;
          for (std::int64_t r = 0; r < most; ++r)
            if (peak_bytes(fixture.memory, h, std::vector<std::int64_t>(counts.size(), r)) <= budget) {
              uniform = r;
              break;
            }
          INFO(to_string(kind) << " replica " << q << " stage " << s << " of " << h.layers << " layers, the plan's count "
                               << most << ", one count for all " << uniform);
          CHECK(peak_bytes(fixture.memory, h, counts) <= budget);
          // One count per stage replica: the fewest for all.
          CHECK(per_stage_counts == std::vector<std::int64_t>(counts.size(), uniform));
          CHECK(*std::max_element(counts.begin(), counts.end()) <= most);
          CHECK(freed_bytes(fixture.memory, h, counts) <=
                freed_bytes(fixture.memory, h, std::vector<std::int64_t>(counts.size(), uniform)));
          const bool one_for_all = std::all_of(counts.begin(), counts.end(), [&](std::int64_t c) { return c == uniform; });
          if (!one_for_all) {
            // Chosen per microbatch: lowering any one count breaks the budget.
            for (std::size_t j = 0; j < counts.size(); ++j) {
              if (counts[j] == 0) continue;
              auto lower = counts;
              --lower[j];
              CHECK(peak_bytes(fixture.memory, h, lower) > budget);
            }
            ++mixed;
          }
          ++checked;
          const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
          if (total < most * m) ++lowered;
          if (total > 0 && total < most * m) ++partly;
          if (*std::max_element(counts.begin(), counts.end()) == most) ++kept;
        }
    }
    // Fewer recomputed layers only shorten backward ops: never slower.
    CHECK(on.predicted_seconds <= off.predicted_seconds * (1 + 1e-12));
    CHECK(per_stage.predicted_seconds <= off.predicted_seconds * (1 + 1e-12));
    // Repricing keeps the batch's counts.
    batch_schedule again = on;
    fixture.scheduler.reprice(layout, batch, options, again);
    CHECK(again.encoder_recomputed == on.encoder_recomputed);
    CHECK(again.llm_recomputed == on.llm_recomputed);
    CHECK(again.predicted_seconds == Approx(on.predicted_seconds).epsilon(1e-12));
  }
  INFO(checked << " stage replicas: " << lowered << " lowered (" << partly << " keeping some layers, " << mixed
               << " per microbatch), " << kept << " with some microbatch at the plan's count");
  CHECK(lowered > 20);  // the cases cover every outcome
  CHECK(partly > 5);
  CHECK(mixed > 5);
  CHECK(kept > 5);
}

TEST_CASE("a lowered count prices the stage's backward with that many recomputed layers", "[plan][cost]") {
  recompute_fixture fixture;
  random_generator random(7);
  const auto workload = test::small_workload(600, 5);
  std::size_t seen = 0;
  for (int trial = 0; trial < 200 && seen < 10; ++trial) {
    const plan_layout layout = random_layout(random, "1f1b");
    const auto batch = batch_for(workload, layout, static_cast<std::uint64_t>(trial));
    const batch_options options = fixed_order(200'000 + static_cast<std::int64_t>(random.below(20)) * 50'000);
    batch_schedule out;
    if (!scheduled(fixture, layout, batch, options, out)) continue;
    const auto m = static_cast<std::uint32_t>(layout.config.microbatches);
    for (int q = 0; q < layout.llm.degrees.dp; ++q)
      for (std::uint32_t k = 0; k < m; ++k) {
        const auto& members = out.llm_microbatches[static_cast<std::size_t>(q) * m + k];
        std::vector<sample> gathered;
        for (std::uint32_t i : members) gathered.push_back(batch[i]);
        const module_cost unit = fixture.cost.estimate_time(module_kind::llm, 1, gathered);
        for (int s = 0; s < layout.llm.degrees.pp; ++s) {
          const pass_time time =
              unit.stage_recomputing(layout.llm.slice(s), out.recomputed(module_kind::llm, q, static_cast<int>(k), s));
          const std::size_t at = out.costs.llm.at(static_cast<std::uint32_t>(q), k, static_cast<std::uint32_t>(s), m);
          CHECK(out.costs.llm.backward[at] == Approx(time.backward).epsilon(1e-12));
          CHECK(out.costs.llm.forward[at] == Approx(time.forward).epsilon(1e-12));
        }
      }
    ++seen;
  }
  CHECK(seen >= 10);
}

namespace {

// Records the count each op is told, per (module, replica, stage, schedule
// microbatch); moves the bytes `sleep_module_stage` moves and sleeps for none of its costs.
class recording_stage : public test::sleep_module_stage {
public:
  using seen_map =
      std::map<std::tuple<bool, std::uint32_t, std::uint32_t, std::uint32_t>, std::vector<std::uint32_t>>;
  recording_stage(const multimodal_costs* costs, bool encoder, std::uint32_t stage, seen_map* seen, std::mutex* mutex)
      : sleep_module_stage(costs, encoder, stage), encoder_(encoder), stage_(stage), seen_(seen), mutex_(mutex) {}
  void forward(stage_context& ctx) { record(ctx); }
  void backward(stage_context& ctx) { record(ctx); }
  void weight(stage_context& ctx) { record(ctx); }

private:
  void record(const stage_context& ctx) {
    std::lock_guard lock(*mutex_);
    (*seen_)[{encoder_, ctx.replica, stage_, ctx.microbatch}].push_back(ctx.recomputed_layers);
  }
  bool encoder_;
  std::uint32_t stage_;
  seen_map* seen_;
  std::mutex* mutex_;
};

}  // namespace

TEST_CASE("the executor tells every op its microbatch's count on its stage replica", "[exec][plan]") {
  recompute_fixture fixture;
  random_generator random(11);
  const auto workload = test::small_workload(600, 9);
  std::size_t runs = 0;
  for (int trial = 0; trial < 40 && runs < 4; ++trial) {
    const plan_layout layout = random_layout(random, random.below(2) == 0 ? "1f1b" : "zb-h1");
    const auto batch = batch_for(workload, layout, static_cast<std::uint64_t>(trial));
    batch_options options;  // the default rules: best simulated assignment, NEH order
    options.memory_budget_bytes = 200'000 + static_cast<std::int64_t>(random.below(20)) * 50'000;
    batch_schedule out;
    if (!scheduled(fixture, layout, batch, options, out)) continue;
    INFO(layout.config);
    multimodal_costs idle = out.costs;  // the recording stages move bytes only
    for (module_costs* module : {&idle.encoder, &idle.llm}) {
      std::fill(module->forward.begin(), module->forward.end(), 0.0);
      std::fill(module->backward.begin(), module->backward.end(), 0.0);
      std::fill(module->weight.begin(), module->weight.end(), 0.0);
    }
    const world_layout world(layout.config);
    std::set<std::uint32_t> distinct;  // counts told (the cases must see more than one)
    recording_stage::seen_map seen;
    std::mutex mutex;
    run_inproc(world.world_size(), [&](inproc_communicator& comm) {
      const auto role = world.role(comm.rank());
      multimodal_executor<inproc_communicator, recording_stage> run(
          comm, world, recording_stage(&idle, role.encoder(), role.stage, &seen, &mutex), {.watchdog_seconds = 10});
      (void)run.step(layout.schedule, executable_batch(out, batch));
    });
    for (module_kind kind : all_module_kinds) {
      const module_plan& plan = kind == module_kind::encoder ? layout.encoder : layout.llm;
      for (int q = 0; q < plan.degrees.dp; ++q)
        for (int s = 0; s < plan.degrees.pp; ++s)
          for (std::uint32_t j = 0; j < static_cast<std::uint32_t>(layout.config.microbatches); ++j) {
            const auto& told = seen[{kind == module_kind::encoder, static_cast<std::uint32_t>(q),
                                     static_cast<std::uint32_t>(s), j}];
            REQUIRE_FALSE(told.empty());
            const int slot = static_cast<int>(out.slot_order[j]);
            for (std::uint32_t count : told) CHECK(count == out.recomputed(kind, q, slot, s));
            distinct.insert(out.recomputed(kind, q, slot, s));
          }
    }
    if (distinct.size() > 1) ++runs;
  }
  CHECK(runs >= 4);
}

TEST_CASE("a batch whose counts do not match the configuration is refused by the executor", "[exec]") {
  recompute_fixture fixture;
  random_generator random(3);
  const plan_layout layout = random_layout(random, "1f1b");
  const auto workload = test::small_workload(600, 9);
  const auto batch = batch_for(workload, layout, 1);
  batch_schedule out = fixture.scheduler.schedule(layout, batch, batch_options{});
  out.llm_recomputed.push_back(0);
  const world_layout world(layout.config);
  // Every rank refuses it before running an op; the world's first failure is rethrown.
  CHECK_THROWS_WITH(run_inproc(world.world_size(),
                               [&](inproc_communicator& comm) {
                                 const auto role = world.role(comm.rank());
                                 recording_stage::seen_map seen;
                                 std::mutex mutex;
                                 multimodal_executor<inproc_communicator, recording_stage> run(
                                     comm, world, recording_stage(&out.costs, role.encoder(), role.stage, &seen, &mutex),
                                     {.watchdog_seconds = 10});
                                 (void)run.step(layout.schedule, executable_batch(out, batch));
                               }),
                    Catch::Contains("llm_recomputed has") && Catch::Contains("or none"));
}

TEST_CASE("a plan says when every batch keeps the plan's count; schedule_batch follows it", "[plan][file]") {
  const auto model = test::small_model();
  const auto workload = test::small_workload();
  const auto cluster = test::small_cluster(8, 4, 3);  // small enough that the plan recomputes
  for (const bool per_batch : {true, false}) {
    planner_options options;
    options.global_batch = 48;
    options.batches = 2;
    options.batch.recompute_per_batch = per_batch;
    planner<flops_cost_model, analytic_memory_model> search(model, cluster, flops_cost_model(model, cluster.gpu),
                                                            analytic_memory_model(model), options);
    const plan result = search.make_plan(workload);
    INFO("per batch " << per_batch << ": " << result.chosen.config);
    REQUIRE((result.chosen.config.encoder.recompute || result.chosen.config.llm.recompute));
    const auto json = to_json(result);
    CHECK(json["batch"].contains("recompute_per_batch") == !per_batch);
    const plan back = parse_plan_json(json.dump());
    CHECK(back.batch.recompute_per_batch == per_batch);
    // Batches of the plan: at most the plan's count everywhere; exactly it when per-batch counts are off.
    const plan_layout layout = make_plan_layout(result, plan_method::dflop, named_schedule(result.schedule));
    const flops_cost_model cost(model, cluster.gpu);
    const analytic_memory_model memory(model);
    std::size_t below = 0;
    for (std::uint64_t step = 0; step < 4; ++step) {
      const auto samples = sample_batch(workload, 48, batch_mode::without_replacement, 50 + step);
      const batch_schedule batch = pipeline<>::schedule_batch(back, samples, cost, memory, step);
      for (module_kind kind : all_module_kinds) {
        const module_plan& plan = kind == module_kind::encoder ? layout.encoder : layout.llm;
        for (int q = 0; q < plan.degrees.dp; ++q)
          for (int k = 0; k < layout.config.microbatches; ++k)
            for (int s = 0; s < plan.degrees.pp; ++s) {
              const auto most = static_cast<std::uint32_t>(recomputed_layers(plan.degrees, plan.slice(s).layers));
              CHECK(batch.recomputed(kind, q, k, s) <= most);
              if (!per_batch) CHECK(batch.recomputed(kind, q, k, s) == most);
              below += batch.recomputed(kind, q, k, s) < most ? 1 : 0;
            }
      }
    }
    if (per_batch) CHECK(below > 0);  // the small cluster's batches need less than the plan's tails
  }
}
