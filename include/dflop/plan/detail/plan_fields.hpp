// SPDX-License-Identifier: Apache-2.0
//! \file
//! The pieces of a plan file read one at a time, each checked against what it
//! must agree with (the model's layers and heads, the cluster, the global
//! batch), so a hand-edited plan is rejected with the field's JSON path
//! (`config.llm.layers[1]`) and the reason instead of failing at run time.
#pragma once

#include <dflop/error.hpp>
#include <dflop/model/detail/json_fields.hpp>
#include <dflop/model/gpu_json.hpp>
#include <dflop/model/model_json.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/batch_options.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/sim/order.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

// `dflop::stage_memory` is written qualified: the executors' `detail::stage_memory` would hide it here.
namespace dflop::detail {

//! Largest degree, count or batch a plan file may hold (they are `int` in a plan).
inline constexpr std::int64_t plan_int_limit = std::numeric_limits<int>::max();

//! A required `int` field >= `minimum`.
[[nodiscard]] inline int plan_int(const json_fields& fields, std::string_view key, int minimum) {
  return static_cast<int>(fields.integer_in(key, minimum, plan_int_limit));
}

//! Reads an embedded spec with `read`, reporting its errors under `key`:
//! "field 'model_spec.llm.hidden': ...".
template <class Read>
[[nodiscard]] auto read_embedded(const json_fields& parent, std::string_view key, Read read) {
  const std::string path = parent.path(key);
  [[maybe_unused]] const json_fields object(parent.at(key), parent.source(), path);  // an object, or the error says so
  try {
    return read(parent.at(key));
  } catch (const input_error& e) {
    const std::string& reason = e.reason();
    constexpr std::string_view field = "field '";
    if (reason.starts_with(field))
      throw input_error(parent.source(), e.line(),
                        std::string(field).append(path).append(".").append(reason.substr(field.size())));
    throw input_error(parent.source(), e.line(), std::string(field).append(path).append("': ").append(reason));
  }
}

//! The model: `model_spec` in the model-file format; `model` must be its name.
[[nodiscard]] inline multimodal_spec plan_model_from_json(const json_fields& fields) {
  multimodal_spec model = read_embedded(
      fields, "model_spec", [&](const nlohmann::json& value) { return model_from_json(value, fields.source()); });
  if (const std::string name = fields.text("model"); name != model.name)
    fields.fail("model", "'" + name + "' is not the name in model_spec ('" + model.name + "')");
  return model;
}

//! `cluster`: {"gpus", "gpus_per_node", "gpu" (the name), "gpu_spec" (GPU-file format)}.
[[nodiscard]] inline cluster_spec plan_cluster_from_json(const json_fields& parent) {
  const json_fields fields(parent.at("cluster"), parent.source(), parent.path("cluster"));
  fields.only({"gpus", "gpus_per_node", "gpu", "gpu_spec"});
  cluster_spec cluster;
  cluster.gpus = plan_int(fields, "gpus", 2);
  cluster.gpus_per_node = plan_int(fields, "gpus_per_node", 1);
  if (cluster.gpus > cluster.gpus_per_node && cluster.gpus % cluster.gpus_per_node != 0)
    fields.fail(fields.path("gpus"), std::to_string(cluster.gpus) + " GPUs do not fill whole nodes of " +
                                         std::to_string(cluster.gpus_per_node) + " (gpus_per_node)");
  cluster.gpu = read_embedded(fields, "gpu_spec",
                              [&](const nlohmann::json& value) { return gpu_from_json(value, fields.source()); });
  if (const std::string name = fields.text("gpu"); name != cluster.gpu.name)
    fields.fail(fields.path("gpu"), "'" + name + "' is not the name in gpu_spec ('" + cluster.gpu.name + "')");
  return cluster;
}

//! `batch`: the per-batch options.
[[nodiscard]] inline batch_options plan_batch_options_from_json(const json_fields& parent) {
  const json_fields fields(parent.at("batch"), parent.source(), parent.path("batch"));
  fields.only({"assignment", "order", "order_budget", "seed", "weight_gradient_share", "memory_budget_bytes",
               "gradient_bucket_bytes", "recompute_per_batch", "recompute_per_microbatch"});
  batch_options options;
  const std::string assignment = fields.text("assignment");
  const auto parsed_assignment = parse_slot_assignment(assignment);
  if (!parsed_assignment)
    fields.fail(fields.path("assignment"),
                "unknown slot assignment '" + assignment + "' (known: round_robin, balanced, best_simulated)");
  options.assignment = *parsed_assignment;
  const std::string order = fields.text("order");
  const auto parsed_order = parse_order_policy(order);
  if (!parsed_order)
    fields.fail(fields.path("order"), "unknown order policy '" + order + "' (known: identity, johnson, neh)");
  options.order = *parsed_order;
  options.order_budget = static_cast<std::size_t>(fields.integer_in("order_budget", 0));
  options.seed = fields.unsigned_integer("seed");
  options.weight_gradient_share = fields.number_at_least("weight_gradient_share", 0);
  if (options.weight_gradient_share > 1)
    fields.fail(fields.path("weight_gradient_share"),
                "is a fraction of the backward, so at most 1, got " + json_number_text(options.weight_gradient_share));
  // Optional: plan files written before the memory cap have none (no cap).
  if (fields.has("memory_budget_bytes")) options.memory_budget_bytes = fields.integer_in("memory_budget_bytes", 0);
  // Optional: plan files written before buckets had a default have none, which
  // meant one reduction after the last op.
  options.gradient_bucket_bytes =
      fields.has("gradient_bucket_bytes") ? fields.number_at_least("gradient_bucket_bytes", 0) : 0.0;
  // Optional: absent means on (the default); a plan file says it only when off.
  if (fields.has("recompute_per_batch")) options.recompute_per_batch = fields.boolean("recompute_per_batch");
  if (fields.has("recompute_per_microbatch"))
    options.recompute_per_microbatch = fields.boolean("recompute_per_microbatch");
  return options;
}

//! What a configuration is checked against.
struct plan_context {
  const multimodal_spec* model = nullptr;  //!< layers and heads of each module
  const cluster_spec* cluster = nullptr;   //!< GPUs and node size
  int global_batch = 0;                    //!< samples per iteration
};

//! One module's {"tp", "pp", "dp", "recompute", "recompute_layers" (optional, 0:
//! all), "distributed_optimizer", "layers"}:
//! tp divides the node size and the heads the planner splits (encoder heads, LLM
//! key/value heads); one range [first, end) per stage, from 0 to the module's
//! layers with no gap, overlap or empty stage.
[[nodiscard]] inline module_plan plan_module_from_json(const json_fields& parent, module_kind kind,
                                                       const plan_context& context) {
  const std::string_view key = kind == module_kind::encoder ? "encoder" : "llm";
  const json_fields fields(parent.at(key), parent.source(), parent.path(key));
  fields.only({"tp", "pp", "dp", "recompute", "recompute_layers", "distributed_optimizer", "layers"});
  module_plan plan;
  plan.degrees.tp = plan_int(fields, "tp", 1);
  plan.degrees.pp = plan_int(fields, "pp", 1);
  plan.degrees.dp = plan_int(fields, "dp", 1);
  plan.degrees.recompute = fields.boolean("recompute");
  if (fields.has("recompute_layers")) {
    plan.degrees.recompute_layers = plan_int(fields, "recompute_layers", 0);
    if (plan.degrees.recompute_layers > 0 && !plan.degrees.recompute)
      fields.fail(fields.path("recompute_layers"), std::to_string(plan.degrees.recompute_layers) +
                                                       " layers per stage to recompute, but recompute is false");
  }
  plan.degrees.distributed_optimizer = fields.boolean("distributed_optimizer");

  const multimodal_spec& model = *context.model;
  const int tp = plan.degrees.tp;
  if (context.cluster->gpus_per_node % tp != 0)
    fields.fail(fields.path("tp"), std::to_string(tp) + " does not divide cluster.gpus_per_node (" +
                                       std::to_string(context.cluster->gpus_per_node) +
                                       "): a tensor-parallel group stays inside one node");
  const bool encoder = kind == module_kind::encoder;
  const std::int64_t heads = encoder ? model.encoder.heads : model.llm.kv_heads;
  if (heads % tp != 0)
    fields.fail(fields.path("tp"), std::to_string(tp) + " does not divide the " + std::to_string(heads) +
                                       (encoder ? " attention heads (model_spec.encoder.heads)"
                                                : " key/value heads (model_spec.llm.kv_heads)") +
                                       " that tensor parallelism splits");

  const std::int64_t layers = encoder ? model.encoder.layers : model.llm.layers;
  const std::string module_path = "model_spec." + std::string(key);
  const nlohmann::json& ranges = fields.array("layers");
  const std::string ranges_path = fields.path("layers");
  if (ranges.size() != static_cast<std::size_t>(plan.degrees.pp))
    fields.fail(ranges_path, "holds " + std::to_string(ranges.size()) + " layer ranges but pp is " +
                                 std::to_string(plan.degrees.pp) + ": one range [first, end) per pipeline stage");
  plan.first_layer.push_back(0);
  for (std::size_t s = 0; s < ranges.size(); ++s) {
    const std::string at = ranges_path + "[" + std::to_string(s) + "]";
    const nlohmann::json& range = ranges[s];
    const auto is_layer = [&](const nlohmann::json& v) {
      return v.is_number_integer() && (v.is_number_unsigned() || v.get<std::int64_t>() >= 0) &&
             v.get<std::uint64_t>() <= static_cast<std::uint64_t>(plan_int_limit);
    };
    if (!range.is_array() || range.size() != 2 || !is_layer(range[0]) || !is_layer(range[1]))
      fields.fail(at, "expected a layer range [first, end) of two integers >= 0, got " + range.dump());
    const auto first = range[0].get<std::int64_t>();
    const auto end = range[1].get<std::int64_t>();
    const std::int64_t previous_end = plan.first_layer.back();
    const std::string stage = "stage " + std::to_string(s);
    if (s == 0 && first != 0)
      fields.fail(at, "stage 0 starts at layer " + std::to_string(first) + "; the first stage must start at layer 0");
    if (first > previous_end)
      fields.fail(at, stage + " starts at layer " + std::to_string(first) + " but stage " + std::to_string(s - 1) +
                          " ends at " + std::to_string(previous_end) + ": a gap (layers " +
                          std::to_string(previous_end) + " to " + std::to_string(first - 1) + " are on no stage)");
    if (first < previous_end)
      fields.fail(at, stage + " starts at layer " + std::to_string(first) + " but stage " + std::to_string(s - 1) +
                          " ends at " + std::to_string(previous_end) + ": an overlap (layers " + std::to_string(first) +
                          " to " + std::to_string(previous_end - 1) + " are on two stages)");
    if (end <= first)
      fields.fail(at, stage + " is empty ([" + std::to_string(first) + ", " + std::to_string(end) +
                          ")): every stage holds at least one layer");
    plan.first_layer.push_back(end);
  }
  if (plan.first_layer.back() != layers)
    fields.fail(ranges_path + "[" + std::to_string(ranges.size() - 1) + "]",
                "the last stage ends at layer " + std::to_string(plan.first_layer.back()) + " but " + module_path +
                    " has " + std::to_string(layers) + " layers: the stages must cover them all");
  return plan;
}

//! A configuration read from a plan file: degrees, layer splits, schedule name.
struct plan_config {
  parallel_config config;  //!< degrees and microbatches
  module_plan encoder;     //!< encoder split
  module_plan llm;         //!< LLM split
  std::string schedule;    //!< a one-chunk schedule's name
};

//! `{"encoder", "llm", "microbatches", "schedule"}` (and optionally
//! "encoder_run_ahead", 0 when absent) at `parent.key`, checked: both modules
//! (see above), the two modules' GPUs add up to the cluster's, every microbatch
//! can get a sample, the schedule is a known one-chunk one, and a run-ahead is
//! not negative and has an encoder to run.
[[nodiscard]] inline plan_config plan_config_from_json(const json_fields& parent, std::string_view key,
                                                       const plan_context& context) {
  const json_fields fields(parent.at(key), parent.source(), parent.path(key));
  fields.only({"encoder", "llm", "microbatches", "schedule", "encoder_run_ahead"});
  plan_config result;
  result.encoder = plan_module_from_json(fields, module_kind::encoder, context);
  result.llm = plan_module_from_json(fields, module_kind::llm, context);
  result.config = {result.encoder.degrees, result.llm.degrees, plan_int(fields, "microbatches", 1)};
  if (fields.has("encoder_run_ahead")) {
    result.config.encoder_run_ahead = plan_int(fields, "encoder_run_ahead", 0);
    if (!result.config.has_encoder() && result.config.encoder_run_ahead > 0)
      fields.fail(fields.path("encoder_run_ahead"), std::to_string(result.config.encoder_run_ahead) +
                                                        " forwards ahead, but the plan has no encoder (encoder pp 0)");
  }
  result.schedule = fields.text("schedule");
  if (!is_one_chunk_schedule(result.schedule))
    fields.fail(fields.path("schedule"),
                "unknown schedule '" + result.schedule + "' (a plan runs a one-chunk schedule: gpipe, 1f1b, zb-h1)");

  const auto gpus_of = [](const module_parallelism& d) {
    return static_cast<std::int64_t>(d.tp) * d.pp * d.dp;
  };
  const auto product = [&](const module_parallelism& d) {
    return std::to_string(d.tp) + " x " + std::to_string(d.pp) + " x " + std::to_string(d.dp) + " = " +
           std::to_string(gpus_of(d));
  };
  const std::int64_t gpus = gpus_of(result.config.encoder) + gpus_of(result.config.llm);
  if (gpus != context.cluster->gpus)
    fields.fail(parent.path(key), "encoder tp x pp x dp (" + product(result.config.encoder) + ") plus llm (" +
                                      product(result.config.llm) + ") is " + std::to_string(gpus) +
                                      " GPUs, but cluster.gpus is " + std::to_string(context.cluster->gpus));
  const std::int64_t bins = static_cast<std::int64_t>(result.config.llm.dp) * result.config.microbatches;
  if (bins > context.global_batch)
    fields.fail(fields.path("microbatches"),
                "llm dp (" + std::to_string(result.config.llm.dp) + ") x microbatches (" +
                    std::to_string(result.config.microbatches) + ") = " + std::to_string(bins) +
                    " microbatches, more than global_batch (" + std::to_string(context.global_batch) +
                    "): every microbatch needs a sample");
  return result;
}

//! `memory_gib`: one entry per stage, encoder stages first, with exact `bytes`
//! (the GiB figures beside them are derived and not read).
[[nodiscard]] inline std::vector<dflop::stage_memory> plan_memory_from_json(const json_fields& parent,
                                                                    const parallel_config& config) {
  const nlohmann::json& entries = parent.array("memory_gib");
  const std::size_t stages = static_cast<std::size_t>(config.stages());
  if (entries.size() != stages)
    parent.fail(parent.path("memory_gib"), "holds " + std::to_string(entries.size()) +
                                               " stages but config has " + std::to_string(stages) +
                                               " (encoder pp + llm pp)");
  std::vector<dflop::stage_memory> memory;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const json_fields fields(entries[i], parent.source(), parent.path("memory_gib") + "[" + std::to_string(i) + "]");
    fields.only({"module", "stage", "in_flight", "gib", "parameters_gib", "gradients_gib", "optimizer_states_gib",
                 "activations_gib", "bytes"});
    const bool encoder = i < static_cast<std::size_t>(config.encoder.pp);
    dflop::stage_memory stage;
    stage.module = encoder ? module_kind::encoder : module_kind::llm;
    stage.stage = static_cast<int>(encoder ? i : i - static_cast<std::size_t>(config.encoder.pp));
    if (const std::string name = fields.text("module"); name != to_string(stage.module))
      fields.fail(fields.path("module"), "expected '" + std::string(to_string(stage.module)) +
                                             "' (encoder stages come first), got '" + name + "'");
    if (fields.integer_in("stage", 0) != stage.stage)
      fields.fail(fields.path("stage"), "expected " + std::to_string(stage.stage) + " (stages in order)");
    stage.in_flight = plan_int(fields, "in_flight", 0);
    const json_fields bytes(fields.at("bytes"), parent.source(), fields.path("bytes"));
    bytes.only({"parameters", "gradients", "optimizer_states", "activations"});
    stage.bytes = {bytes.integer_in("parameters", 0), bytes.integer_in("gradients", 0),
                   bytes.integer_in("optimizer_states", 0), bytes.integer_in("activations", 0)};
    memory.push_back(stage);
  }
  return memory;
}

//! `search`: what the search did (informational).
[[nodiscard]] inline search_statistics plan_search_from_json(const json_fields& parent) {
  const json_fields fields(parent.at("search"), parent.source(), parent.path("search"));
  fields.only({"candidates", "memory_rejected", "bound_pruned", "over_budget", "simulated", "given_up", "seconds",
               "enumeration_seconds", "scoring_seconds", "finalist_seconds", "baseline_seconds", "schedules"});
  const auto count = [&](std::string_view key) { return static_cast<std::size_t>(fields.integer_in(key, 0)); };
  const auto seconds = [&](std::string_view key) { return fields.number_at_least(key, 0); };
  search_statistics statistics{count("candidates"),         count("memory_rejected"),     count("bound_pruned"),
                               count("over_budget"),        count("simulated"),
                               fields.has("given_up") ? count("given_up") : 0,  // plan files before it lack it
                               seconds("seconds"),
                               seconds("enumeration_seconds"), seconds("scoring_seconds"), seconds("finalist_seconds"),
                               seconds("baseline_seconds"), {}};
  if (fields.has("schedules")) {
    const nlohmann::json& trials = fields.array("schedules");
    for (std::size_t i = 0; i < trials.size(); ++i) {
      const std::string at = "schedules[" + std::to_string(i) + "]";
      const json_fields trial(trials[i], parent.source(), fields.path(at));
      trial.only({"schedule", "iteration_seconds"});
      statistics.schedules.push_back({trial.text("schedule"), trial.number_at_least("iteration_seconds", 0)});
    }
  }
  return statistics;
}

//! `memory_cap`: how often the memory budget acted on fresh batches (the
//! probabilities are derived from the counts, so they are read back unchecked).
[[nodiscard]] inline memory_cap_estimate plan_memory_cap_from_json(const json_fields& parent) {
  const json_fields fields(parent.at("memory_cap"), parent.source(), parent.path("memory_cap"));
  fields.only({"batches", "capped", "infeasible", "capped_probability", "infeasible_probability"});
  memory_cap_estimate estimate;
  estimate.batches = static_cast<std::size_t>(fields.integer_in("batches", 0));
  estimate.capped = static_cast<std::size_t>(fields.integer_in("capped", 0));
  estimate.infeasible = static_cast<std::size_t>(fields.integer_in("infeasible", 0));
  if (estimate.capped > estimate.batches)
    fields.fail(fields.path("capped"), "counts batches, so at most batches (" + std::to_string(estimate.batches) + ")");
  if (estimate.infeasible > estimate.capped)
    fields.fail(fields.path("infeasible"),
                "counts capped batches that did not fit, so at most capped (" + std::to_string(estimate.capped) + ")");
  return estimate;
}

}  // namespace dflop::detail
