// SPDX-License-Identifier: Apache-2.0
//! \file
//! A plan as JSON (the `dflop plan --json` format): `config` (encoder and llm
//! with tp, pp, dp and layer ranges; microbatches; schedule),
//! `iteration_seconds`, `samples_per_second`, `memory_gib` per stage,
//! `ideal_seconds`, `baselines` (data_blind, dflop_reference) and `search`.
#pragma once

#include <dflop/plan/plan.hpp>

#include <nlohmann/json.hpp>

namespace dflop {

//! One module's degrees, memory savers and layer ranges:
//! {"tp", "pp", "dp", "recompute", "distributed_optimizer", "layers": [[first, last), ...]}.
[[nodiscard]] inline nlohmann::ordered_json to_json(const module_plan& module) {
  auto layers = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s + 1 < module.first_layer.size(); ++s)
    layers.push_back({module.first_layer[s], module.first_layer[s + 1]});
  return {{"tp", module.degrees.tp},
          {"pp", module.degrees.pp},
          {"dp", module.degrees.dp},
          {"recompute", module.degrees.recompute},
          {"distributed_optimizer", module.degrees.distributed_optimizer},
          {"layers", layers}};
}

//! A method's configuration: {"encoder", "llm", "microbatches", "schedule"}.
[[nodiscard]] inline nlohmann::ordered_json config_json(const method_result& result, const std::string& schedule) {
  return {{"encoder", to_json(result.encoder)},
          {"llm", to_json(result.llm)},
          {"microbatches", result.config.microbatches},
          {"schedule", schedule}};
}

//! The whole plan.
[[nodiscard]] inline nlohmann::ordered_json to_json(const plan& result) {
  nlohmann::ordered_json out;
  out["model"] = result.model;
  out["cluster"] = {{"gpus", result.cluster.gpus},
                    {"gpus_per_node", result.cluster.gpus_per_node},
                    {"gpu", result.cluster.gpu.name}};
  out["global_batch"] = result.global_batch;
  out["batches"] = result.batches;
  out["config"] = config_json(result.chosen, result.schedule);
  out["iteration_seconds"] = result.chosen.iteration_seconds;
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
                      {"activations_gib", static_cast<double>(stage.bytes.activations) / (1 << 30)}});
  out["memory_gib"] = memory;
  out["ideal_seconds"] = result.ideal_seconds;
  out["efficiency"] = result.efficiency();
  auto baselines = nlohmann::ordered_json::object();
  for (const auto& baseline : result.baselines)
    baselines[baseline.method] = {{"config", config_json(baseline, result.schedule)},
                                  {"iteration_seconds", baseline.iteration_seconds},
                                  {"estimated_seconds", baseline.estimated_seconds},
                                  {"peak_memory_gib", baseline.peak_memory_gib},
                                  {"out_of_memory_attempts", baseline.out_of_memory_attempts},
                                  {"speedup_of_dflop", baseline.iteration_seconds / result.chosen.iteration_seconds}};
  out["baselines"] = baselines;
  out["search"] = {{"candidates", result.search.candidates},
                   {"memory_rejected", result.search.memory_rejected},
                   {"bound_pruned", result.search.bound_pruned},
                   {"over_budget", result.search.over_budget},
                   {"simulated", result.search.simulated},
                   {"seconds", result.search.seconds},
                   {"enumeration_seconds", result.search.enumeration_seconds},
                   {"scoring_seconds", result.search.scoring_seconds},
                   {"finalist_seconds", result.search.finalist_seconds},
                   {"baseline_seconds", result.search.baseline_seconds}};
  return out;
}

}  // namespace dflop
