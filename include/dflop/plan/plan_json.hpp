// SPDX-License-Identifier: Apache-2.0
//! \file
//! A plan as JSON: the `dflop plan --json` output and the plan file that
//! `dflop plan --save` writes and `read_plan` (plan_file.hpp) reads back.
//! `plan_version`; `model` and `model_spec` (its shapes, model-file format);
//! `cluster` (with `gpu_spec`, GPU-file format); `global_batch`, `batches`,
//! `seed`; `batch` (per-batch options); `config` (encoder and llm with tp, pp,
//! dp, memory savers and layer ranges; microbatches; schedule);
//! `iteration_seconds`, `estimated_seconds`, `peak_memory_gib`,
//! `samples_per_second`, `memory_gib` per stage, `ideal_seconds`,
//! `efficiency`, `excluded_samples` (ids of the samples planned without because
//! no configuration holds them), `baselines` (data_blind, dflop_reference) and `search`.
//! Field by field: docs/plan-files.md.
#pragma once

#include <dflop/model/gpu_json.hpp>
#include <dflop/model/model_json.hpp>
#include <dflop/plan/batch_options.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/sim/order.hpp>

#include <nlohmann/json.hpp>

namespace dflop {

//! The plan-file format this dflop writes and reads (`plan_version`); bumped
//! when a field changes meaning, so an old reader rejects a newer file.
inline constexpr int plan_file_version = 1;

//! One module's degrees, memory savers and layer ranges:
//! {"tp", "pp", "dp", "recompute", "recompute_layers" (partial recomputation
//! only: each stage's first this many layers), "distributed_optimizer", "layers":
//! [[first, last), ...]}.
[[nodiscard]] inline nlohmann::ordered_json to_json(const module_plan& module) {
  auto layers = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s + 1 < module.first_layer.size(); ++s)
    layers.push_back({module.first_layer[s], module.first_layer[s + 1]});
  nlohmann::ordered_json out = {{"tp", module.degrees.tp},
                                {"pp", module.degrees.pp},
                                {"dp", module.degrees.dp},
                                {"recompute", module.degrees.recompute}};
  // Written only for partial recomputation, so plans without it read as before.
  if (module.degrees.recompute && module.degrees.recompute_layers > 0)
    out["recompute_layers"] = module.degrees.recompute_layers;
  out["distributed_optimizer"] = module.degrees.distributed_optimizer;
  out["layers"] = layers;
  return out;
}

//! A method's configuration: {"encoder", "llm", "microbatches", "schedule"},
//! and "encoder_run_ahead" where the encoder runs ahead (written only then, so
//! plans without it read as before).
[[nodiscard]] inline nlohmann::ordered_json config_json(const method_result& result, const std::string& schedule) {
  nlohmann::ordered_json out{{"encoder", to_json(result.encoder)},
                             {"llm", to_json(result.llm)},
                             {"microbatches", result.config.microbatches},
                             {"schedule", schedule}};
  if (result.config.encoder_run_ahead > 0) out["encoder_run_ahead"] = result.config.encoder_run_ahead;
  return out;
}

//! Per-batch options: {"assignment", "order", "order_budget", "seed",
//! "weight_gradient_share", "memory_budget_bytes", "gradient_bucket_bytes"}
//! (plan files without the last read as 0, what they meant when written), and
//! "recompute_per_batch" / "recompute_per_microbatch": false when off.
[[nodiscard]] inline nlohmann::ordered_json to_json(const batch_options& options) {
  nlohmann::ordered_json out{{"assignment", std::string(to_string(options.assignment))},
                             {"order", std::string(to_string(options.order))},
                             {"order_budget", options.order_budget},
                             {"seed", options.seed},
                             {"weight_gradient_share", options.weight_gradient_share},
                             {"memory_budget_bytes", options.memory_budget_bytes},
                             {"gradient_bucket_bytes", options.gradient_bucket_bytes}};
  if (!options.recompute_per_batch) out["recompute_per_batch"] = false;
  if (!options.recompute_per_microbatch) out["recompute_per_microbatch"] = false;
  return out;
}

//! The whole plan: what `dflop plan --json` prints and a plan file holds.
[[nodiscard]] inline nlohmann::ordered_json to_json(const plan& result) {
  nlohmann::ordered_json out;
  out["plan_version"] = plan_file_version;
  out["model"] = result.model;
  out["model_spec"] = to_json(result.model_spec);
  out["cluster"] = {{"gpus", result.cluster.gpus},
                    {"gpus_per_node", result.cluster.gpus_per_node},
                    {"gpu", result.cluster.gpu.name},
                    {"gpu_spec", to_json(result.cluster.gpu)}};
  out["global_batch"] = result.global_batch;
  out["batches"] = result.batches;
  out["seed"] = result.seed;
  out["batch"] = to_json(result.batch);
  out["config"] = config_json(result.chosen, result.schedule);
  out["iteration_seconds"] = result.chosen.iteration_seconds;
  out["estimated_seconds"] = result.chosen.estimated_seconds;
  out["peak_memory_gib"] = result.chosen.peak_memory_gib;
  out["samples_per_second"] = result.samples_per_second();
  auto memory = nlohmann::ordered_json::array();
  for (const auto& stage : result.memory)
    memory.push_back({{"module", std::string(to_string(stage.module))},
                      {"stage", stage.stage},
                      {"in_flight", stage.in_flight},
                      {"gib", static_cast<double>(stage.bytes.total()) / (1 << 30)},
                      {"parameters_gib", static_cast<double>(stage.bytes.parameters) / (1 << 30)},
                      {"gradients_gib", static_cast<double>(stage.bytes.gradients) / (1 << 30)},
                      {"optimizer_states_gib", static_cast<double>(stage.bytes.optimizer_states) / (1 << 30)},
                      {"activations_gib", static_cast<double>(stage.bytes.activations) / (1 << 30)},
                      {"bytes",
                       {{"parameters", stage.bytes.parameters},
                        {"gradients", stage.bytes.gradients},
                        {"optimizer_states", stage.bytes.optimizer_states},
                        {"activations", stage.bytes.activations}}}});
  out["memory_gib"] = memory;
  out["memory_cap"] = {{"batches", result.memory_cap.batches},
                       {"capped", result.memory_cap.capped},
                       {"infeasible", result.memory_cap.infeasible},
                       {"capped_probability", result.memory_cap.capped_probability()},
                       {"infeasible_probability", result.memory_cap.infeasible_probability()}};
  out["ideal_seconds"] = result.ideal_seconds;
  out["efficiency"] = result.efficiency();
  out["excluded_samples"] = result.excluded_samples;
  auto baselines = nlohmann::ordered_json::object();
  for (const auto& baseline : result.baselines)
    baselines[std::string(name_of(baseline.method))] = {{"config", config_json(baseline, result.schedule)},
                                  {"iteration_seconds", baseline.iteration_seconds},
                                  {"estimated_seconds", baseline.estimated_seconds},
                                  {"peak_memory_gib", baseline.peak_memory_gib},
                                  {"fits_memory", baseline.fits_memory},
                                  {"out_of_memory_attempts", baseline.out_of_memory_attempts},
                                  {"speedup_of_dflop", baseline.iteration_seconds / result.chosen.iteration_seconds}};
  out["baselines"] = baselines;
  out["search"] = {{"candidates", result.search.candidates},
                   {"memory_rejected", result.search.memory_rejected},
                   {"bound_pruned", result.search.bound_pruned},
                   {"over_budget", result.search.over_budget},
                   {"simulated", result.search.simulated},
                   {"given_up", result.search.given_up},
                   {"seconds", result.search.seconds},
                   {"enumeration_seconds", result.search.enumeration_seconds},
                   {"scoring_seconds", result.search.scoring_seconds},
                   {"finalist_seconds", result.search.finalist_seconds},
                   {"baseline_seconds", result.search.baseline_seconds}};
  if (!result.search.schedules.empty()) {
    auto schedules = nlohmann::ordered_json::array();
    for (const auto& trial : result.search.schedules)
      schedules.push_back({{"schedule", trial.schedule}, {"iteration_seconds", trial.seconds}});
    out["search"]["schedules"] = schedules;
  }
  return out;
}

}  // namespace dflop
