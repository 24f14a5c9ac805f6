// SPDX-License-Identifier: Apache-2.0
//! `dflop schedule`: runs a saved plan's per-batch scheduling on global batches
//! drawn from a workload, as a trainer would each iteration: which samples each
//! LLM replica's microbatches and each encoder replica's parts hold, in
//! execution order, the predicted seconds and the memory per stage. `--json`
//! prints one JSON object per batch (JSON Lines) for a trainer that precomputes
//! its schedules.
#include "command.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/error.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/stage_memories.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/sampling.hpp>
#include <dflop/workload/trace.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace {

//! What the user asked `schedule` for.
struct schedule_options {
  std::string plan;
  std::string workload;  // empty: the built-in default mixture
  int batches = 0;       // 0: the plan's `batches`
  std::uint64_t seed = 0;
  bool seed_given = false;  // else the plan's `seed`
  std::string method = "dflop";  // or a baseline: data_blind, dflop_reference
  bool json = false;
};

//! One global batch: drawn, scheduled and priced.
struct scheduled_batch {
  std::vector<dflop::sample> samples;     // in draw order; the schedule's sample numbers index it
  std::uint64_t seed = 0;                 // the packing seed
  dflop::plan_method method{};            // whose configuration it was scheduled for
  dflop::batch_schedule schedule;         // microbatches, slot order, prediction
  std::vector<dflop::stage_memory> memory;  // per stage, heaviest microbatch
};

//! The policies `dflop plan` plans with: FLOPs costs, analytic memory, min-max
//! layer split, refined packing, the schedule named at run time.
using plan_pipeline =
    dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer, dflop::named_schedule>;

//! Schedules `batch` for `method`'s configuration of the plan as a trainer would
//! each iteration, with the plan's schedule, and prices its stages with the heaviest microbatch.
void schedule_batch(const dflop::plan& plan, dflop::plan_method method, scheduled_batch& batch) {
  const plan_pipeline::policies with{.schedule = dflop::named_schedule(plan.schedule)};
  batch.schedule = plan_pipeline::schedule_batch(plan, batch.samples, batch.seed, method, with);
  const dflop::plan_layout layout = dflop::make_plan_layout(plan, method, with.schedule);
  batch.memory = dflop::heaviest_stage_memories(plan_pipeline::memory_model_type(plan.model_spec), layout,
                                                batch.schedule, batch.samples);
}

//! Ids of `group`'s samples.
nlohmann::json ids_of(const scheduled_batch& batch, const std::vector<std::uint32_t>& group) {
  auto ids = nlohmann::json::array();
  for (std::uint32_t i : group) ids.push_back(batch.samples[i].id);
  return ids;
}

//! `[replica][position]`: the ids of each replica's groups in execution order.
nlohmann::json groups_in_order(const scheduled_batch& batch, const std::vector<std::vector<std::uint32_t>>& groups,
                               int replicas) {
  const auto m = static_cast<std::size_t>(batch.schedule.config.microbatches);
  auto result = nlohmann::json::array();
  for (std::size_t r = 0; r < static_cast<std::size_t>(replicas); ++r) {
    auto replica = nlohmann::json::array();
    for (std::uint32_t slot : batch.schedule.slot_order) replica.push_back(ids_of(batch, groups[r * m + slot]));
    result.push_back(std::move(replica));
  }
  return result;
}

//! `[replica][position][stage]`: layers each stage replica recomputes for each
//! microbatch in execution order (`batch_schedule::encoder_recomputed` /
//! `llm_recomputed`, flat by slot there).
nlohmann::json recomputed_in_order(const scheduled_batch& batch, const std::vector<std::uint32_t>& counts,
                                   int replicas, int stages) {
  const auto m = static_cast<std::size_t>(batch.schedule.config.microbatches);
  const auto per_stage = static_cast<std::size_t>(stages);
  auto result = nlohmann::json::array();
  for (std::size_t r = 0; r < static_cast<std::size_t>(replicas); ++r) {
    auto replica = nlohmann::json::array();
    for (std::uint32_t slot : batch.schedule.slot_order) {
      const auto first = counts.begin() + static_cast<std::ptrdiff_t>((r * m + slot) * per_stage);
      replica.push_back(std::vector<std::uint32_t>(first, first + static_cast<std::ptrdiff_t>(per_stage)));
    }
    result.push_back(std::move(replica));
  }
  return result;
}

//! `value` with `digits` decimals.
std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

//! Bytes in GiB.
double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

//! The largest stage memory of `batch`, GiB.
double peak_gib(const scheduled_batch& batch) {
  std::int64_t peak = 0;
  for (const auto& stage : batch.memory) peak = std::max(peak, stage.bytes.total());
  return gib(peak);
}

//! One JSON Lines record: everything a trainer needs to run batch `index`.
nlohmann::ordered_json batch_json(std::size_t index, const scheduled_batch& batch) {
  const dflop::parallel_config& config = batch.schedule.config;
  nlohmann::ordered_json out;
  out["batch"] = index;
  out["method"] = std::string(dflop::name_of(batch.method));
  out["seed"] = batch.seed;
  out["predicted_seconds"] = batch.schedule.predicted_seconds;
  auto samples = nlohmann::json::array();
  for (const auto& s : batch.samples) samples.push_back(s.id);
  out["samples"] = std::move(samples);
  out["slot_order"] = batch.schedule.slot_order;
  out["llm_microbatches"] = groups_in_order(batch, batch.schedule.llm_microbatches, config.llm.dp);
  out["encoder_parts"] = groups_in_order(batch, batch.schedule.encoder_parts, config.encoder.dp);
  // Where a module recomputes: how many of its first layers each stage recomputes per microbatch.
  if (config.encoder.recompute && config.encoder.pp > 0)
    out["encoder_recomputed"] =
        recomputed_in_order(batch, batch.schedule.encoder_recomputed, config.encoder.dp, config.encoder.pp);
  if (config.llm.recompute)
    out["llm_recomputed"] = recomputed_in_order(batch, batch.schedule.llm_recomputed, config.llm.dp, config.llm.pp);
  auto memory = nlohmann::ordered_json::array();
  for (const auto& stage : batch.memory)
    memory.push_back({{"module", std::string(dflop::to_string(stage.module))},
                      {"stage", stage.stage},
                      {"in_flight", stage.in_flight},
                      {"gib", gib(stage.bytes.total())},
                      {"activations_gib", gib(stage.bytes.activations)}});
  out["memory_gib"] = std::move(memory);
  out["peak_memory_gib"] = peak_gib(batch);
  return out;
}

//! `[a b] [c] []`: groups of ids, in execution order.
std::string groups_text(const scheduled_batch& batch, const std::vector<std::vector<std::uint32_t>>& groups,
                        std::size_t replica) {
  const auto m = static_cast<std::size_t>(batch.schedule.config.microbatches);
  std::string text;
  for (std::uint32_t slot : batch.schedule.slot_order) {
    text.append(text.empty() ? "[" : " [");
    bool first = true;
    for (std::uint32_t i : groups[replica * m + slot]) {
      text.append(first ? "" : " ").append(batch.samples[i].id);
      first = false;
    }
    text.append("]");
  }
  return text;
}

//! The readable summary of batch `index`.
void print_batch(std::size_t index, const scheduled_batch& batch) {
  const dflop::parallel_config& config = batch.schedule.config;
  std::cout << "\nbatch " << index << " (packing seed " << batch.seed << "): predicted "
            << fixed(batch.schedule.predicted_seconds, 3) << " s\n";
  std::cout << "  slot order:";
  for (std::uint32_t slot : batch.schedule.slot_order) std::cout << ' ' << slot;
  std::cout << "\n";
  for (int r = 0; r < config.llm.dp; ++r)
    std::cout << "  llm replica " << r << ":     "
              << groups_text(batch, batch.schedule.llm_microbatches, static_cast<std::size_t>(r)) << "\n";
  for (int r = 0; r < config.encoder.dp; ++r)
    std::cout << "  encoder replica " << r << ": "
              << groups_text(batch, batch.schedule.encoder_parts, static_cast<std::size_t>(r)) << "\n";
  std::cout << "  memory per GPU (heaviest microbatch, in-flight activations):";
  for (const auto& stage : batch.memory)
    std::cout << "\n    " << dflop::to_string(stage.module) << " stage " << stage.stage << ": "
              << fixed(gib(stage.bytes.total()), 1) << " GiB (" << stage.in_flight
              << " in flight)";
  std::cout << "\n";
}

//! Draws, schedules and prints the batches.
void run_schedule(const schedule_options& options) {
  const dflop::plan plan = dflop::read_plan(options.plan);
  const dflop::method_result& run = plan.method(options.method);  // an unknown method fails first
  const auto workload = options.workload.empty() ? dflop::default_workload() : dflop::read_trace_file(options.workload);
  const int batches = options.batches != 0 ? options.batches : plan.batches;
  if (batches < 1) throw dflop::input_error("--batches", 0, "must be at least 1, got " + std::to_string(batches));
  const std::uint64_t seed = options.seed_given ? options.seed : plan.seed;
  const std::string workload_name = options.workload.empty() ? std::string("built-in workload") : options.workload;
  if (workload.size() < static_cast<std::size_t>(plan.global_batch))
    throw dflop::input_error(workload_name, 0,
                             std::to_string(workload.size()) + " samples cannot fill the plan's global batch of " +
                                 std::to_string(plan.global_batch));

  if (!options.json) {
    std::cout << "plan:     " << options.plan << ": " << plan.model << " on " << plan.cluster.gpus << " x "
              << plan.cluster.gpu.name << ", method " << run.method << ": encoder " << run.config.encoder << ", llm "
              << run.config.llm << ", " << run.config.microbatches << " microbatches per replica, schedule "
              << plan.schedule << "\n";
    std::cout << "workload: "
              << (options.workload.empty()
                      ? "built-in mixture '" + std::string(dflop::default_mixture_name) + "' (" +
                            std::to_string(dflop::default_workload_samples) + " samples)"
                      : options.workload)
              << ", " << batches << " global batches of " << plan.global_batch << " samples, seed " << seed << "\n";
  }
  // As the planner draws its batches: one sampler seeded `seed`, batch k packed with seed + k.
  dflop::batch_sampler sampler(workload.size(), static_cast<std::size_t>(plan.global_batch),
                               dflop::batch_mode::without_replacement, seed);
  double total = 0;
  for (std::size_t k = 0; k < static_cast<std::size_t>(batches); ++k) {
    scheduled_batch batch;
    batch.samples = dflop::gather_samples(workload, sampler.next());
    batch.seed = seed + k;
    batch.method = run.method;
    schedule_batch(plan, run.method, batch);
    total += batch.schedule.predicted_seconds;
    if (options.json)
      std::cout << batch_json(k, batch).dump() << "\n";
    else
      print_batch(k, batch);
  }
  if (!options.json)
    std::cout << "\nmean predicted iteration: " << fixed(total / batches, 3) << " s over "
              << batches << " batches (the plan predicted "
              << fixed(run.iteration_seconds, 3) << " s over its " << plan.batches
              << " scored batches)\n";
}

void install_schedule_command(CLI::App& app) {
  auto options = std::make_shared<schedule_options>();
  auto* command = app.add_subcommand(
      "schedule", "pack and order global batches for a saved plan (`dflop plan --save`), as a trainer would");
  command->add_option("--plan", options->plan, "plan file written by `dflop plan --save`")->required();
  command->add_option("--workload", options->workload, "JSONL trace (default: the built-in onevision mixture)");
  command->add_option("--batches", options->batches, "global batches to schedule (default: the plan's `batches`)")
      ->check(CLI::PositiveNumber);
  auto* seed = command->add_option(
      "--seed", options->seed,
      "sampling seed; batch k is packed with seed + k (default: the plan's `seed`, which with the planned "
      "workload gives the batches the planner scored)");
  command->add_option("--method", options->method,
                      "whose configuration: dflop (the plan's choice), data_blind or dflop_reference (the baselines, "
                      "scheduled as those methods run: sequential or refined packing, slots in arrival order)");
  command->add_flag("--json", options->json, "print one JSON object per batch (JSON Lines)");
  command->callback([options, seed] {
    options->seed_given = seed->count() > 0;
    run_schedule(*options);
  });
}

}  // namespace

DFLOP_REGISTER_COMMAND("schedule", install_schedule_command);
