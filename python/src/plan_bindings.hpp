// SPDX-License-Identifier: Apache-2.0
//! \file
//! Planning from Python: `dflop.plan(...)` runs the planner exactly as `dflop
//! plan` does (same policies, options and defaults), so its `Plan` is the plan
//! the CLI prints for the same inputs; `Plan.to_json()` is the `dflop plan
//! --json` text and the `--save` file. `Plan.schedule_batch` is the call
//! `dflop schedule` makes for every batch. Both release the GIL.
#pragma once

#include "common.hpp"
#include "models.hpp"
#include "samples.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/error.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/schedule/by_name.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace dflop::python {

//! The policies `dflop plan` plans with and `dflop schedule` schedules with:
//! FLOPs costs, analytic memory, min-max layer split, refined packing, the
//! plan's schedule by name (tools/cli/command_schedule.cpp uses the same type).
using plan_pipeline = pipeline<flops_cost_model, min_max_layers, refined_packer, named_schedule>;

namespace detail {

//! Plans as `dflop plan` does (tools/cli/command_plan.cpp), without progress output.
inline plan make_plan(std::span<const sample> workload, const multimodal_spec& model, const cluster_spec& cluster,
                      int global_batch, int batches, std::uint64_t seed, const std::string& schedule,
                      unsigned threads, bool exclude_unfittable, double gradient_bucket_mb,
                      bool whole_stage_recompute, bool planned_recompute, bool encoder_run_ahead) {
  if (!(gradient_bucket_mb >= 0) || !std::isfinite(gradient_bucket_mb))
    throw input_error("gradient_bucket_mb", 0,
                      "must be a finite number of MiB >= 0 (0: one all-reduce per stage after its last op), got " +
                          std::to_string(gradient_bucket_mb));
  planner_options settings;
  settings.exclude_unfittable = exclude_unfittable;
  settings.batch.gradient_bucket_bytes = gradient_bucket_mb * 1024.0 * 1024.0;
  settings.partial_recompute = !whole_stage_recompute;
  settings.batch.recompute_per_batch = !planned_recompute;
  settings.encoder_run_ahead = encoder_run_ahead;
  settings.global_batch = global_batch;
  settings.batches = batches;
  settings.seed = seed;
  settings.threads = threads;
  planner<flops_cost_model, analytic_memory_model> search(model, cluster, flops_cost_model(model, cluster.gpu),
                                                          analytic_memory_model(model), settings, {}, {},
                                                          plannable_schedule(schedule, "schedule"));
  return search.make_plan(workload);
}

//! One batch scheduled as `dflop schedule` does it: the plan's schedule, per-batch options and `seed`.
inline batch_schedule schedule_batch(const plan& chosen, std::span<const sample> samples, std::uint64_t seed,
                                     const std::string& method) {
  const plan_pipeline::policies with{.schedule = named_schedule(chosen.schedule)};
  return plan_pipeline::schedule_batch(chosen, samples, seed, chosen.method(method).method, with);
}

//! `groups[replica * m + slot]` as `[replica][position]` in execution order (the CLI's JSON layout, indices not ids).
inline std::vector<std::vector<std::vector<std::uint32_t>>> in_execution_order(
    const batch_schedule& batch, const std::vector<std::vector<std::uint32_t>>& groups, int replicas) {
  const auto m = static_cast<std::size_t>(batch.config.microbatches);
  std::vector<std::vector<std::vector<std::uint32_t>>> result(static_cast<std::size_t>(replicas));
  for (std::size_t r = 0; r < result.size(); ++r)
    for (std::uint32_t slot : batch.slot_order) result[r].push_back(groups[r * m + slot]);
  return result;
}

inline py::object to_python(const nlohmann::ordered_json& value) {
  return py::module_::import("json").attr("loads")(value.dump());
}

}  // namespace detail

//! Adds plan(), Plan, MethodResult, BatchSchedule and the C++ timing loop the benchmark compares with.
inline void add_plan_bindings(py::module_& module) {
  py::class_<method_result>(module, "MethodResult", "One method's choice and how it scores in the common simulator.")
      .def_property_readonly(
          "method", [](const method_result& r) { return std::string(name_of(r.method)); },
          "'dflop', 'data_blind' or 'dflop_reference'.")
      .def_readonly("iteration_seconds", &method_result::iteration_seconds,
                    "Mean simulated iteration time over the sampled batches.")
      .def_readonly("estimated_seconds", &method_result::estimated_seconds, "The method's own estimate when choosing.")
      .def_readonly("fits_memory", &method_result::fits_memory, "Whether its tail microbatches fit in GPU memory.")
      .def_readonly("peak_memory_gib", &method_result::peak_memory_gib, "Largest stage memory, GiB.")
      .def_readonly("out_of_memory_attempts", &method_result::out_of_memory_attempts,
                    "Earlier choices of the method that ran out of memory.")
      .def_property_readonly(
          "microbatches", [](const method_result& r) { return r.config.microbatches; },
          "Microbatches per LLM replica (= encoder slots) per iteration.")
      .def_property_readonly(
          "encoder_run_ahead", [](const method_result& r) { return r.config.encoder_run_ahead; },
          "Forwards each encoder stage runs beyond the schedule's warm-up (0: none).")
      .def_property_readonly("llm_replicas", [](const method_result& r) { return r.config.llm.dp; },
                             "LLM data-parallel replicas.")
      .def_property_readonly("encoder_replicas", [](const method_result& r) { return r.config.encoder.dp; },
                             "Encoder data-parallel replicas.")
      .def("__repr__", [](const method_result& r) {
        return "<dflop.MethodResult " + std::string(name_of(r.method)) + ": " + std::to_string(r.iteration_seconds) + " s>";
      });

  py::class_<plan>(module, "Plan",
                   "A plan: the chosen configuration with layer splits, predicted iteration time, memory per stage, "
                   "the ideal bound and the baselines. to_json() is the `dflop plan --json` text and the `dflop plan "
                   "--save` file.")
      .def_property_readonly("iteration_seconds", [](const plan& p) { return p.chosen.iteration_seconds; },
                             "Mean simulated iteration time of the chosen configuration over the scored batches.")
      .def_property_readonly("estimated_seconds", [](const plan& p) { return p.chosen.estimated_seconds; },
                             "The search's analytic estimate for it.")
      .def_property_readonly("peak_memory_gib", [](const plan& p) { return p.chosen.peak_memory_gib; },
                             "Largest stage memory, GiB.")
      .def_property_readonly("samples_per_second", &plan::samples_per_second, "global_batch / iteration_seconds.")
      .def_property_readonly("efficiency", &plan::efficiency, "ideal_seconds / iteration_seconds.")
      .def_readonly("ideal_seconds", &plan::ideal_seconds, "The bound no plan beats.")
      .def_readonly("model", &plan::model, "The model's name.")
      .def_readonly("model_spec", &plan::model_spec, "The model's shapes.")
      .def_readonly("cluster", &plan::cluster, "Where it runs.")
      .def_readonly("global_batch", &plan::global_batch, "Samples per iteration.")
      .def_readonly("batches", &plan::batches, "Sampled global batches it was scored on.")
      .def_readonly("seed", &plan::seed, "Sampling seed of those batches.")
      .def_readonly("schedule", &plan::schedule, "Pipeline schedule: gpipe, 1f1b or zb-h1.")
      .def_readonly("chosen", &plan::chosen, "dflop's choice (a MethodResult).")
      .def_readonly("excluded_samples", &plan::excluded_samples,
                    "Ids of the workload's samples the plan was made without (exclude_unfittable=True): no "
                    "configuration holds them in memory even alone in a microbatch.")
      .def_property_readonly(
          "memory_budget_bytes", [](const plan& p) { return p.batch.memory_budget_bytes; },
          "Bytes one GPU may hold: no microbatch schedule_batch returns needs more on any stage (0: no cap).")
      .def_property_readonly(
          "memory_cap",
          [](const plan& p) {
            py::dict estimate;
            estimate["batches"] = p.memory_cap.batches;
            estimate["capped"] = p.memory_cap.capped;
            estimate["infeasible"] = p.memory_cap.infeasible;
            estimate["capped_probability"] = p.memory_cap.capped_probability();
            estimate["infeasible_probability"] = p.memory_cap.infeasible_probability();
            return estimate;
          },
          "How often the memory budget acted on fresh batches: batches, capped (packed again within it), "
          "infeasible (schedule_batch raises InfeasibleError), and the two probabilities.")
      .def_property_readonly(
          "config", [](const plan& p) { return detail::to_python(config_json(p.chosen, p.schedule)); },
          "The chosen configuration as in the plan file: encoder and llm (tp, pp, dp, recompute, recompute_layers "
          "where only some layers recompute, "
          "distributed_optimizer, layers), microbatches, schedule.")
      .def_property_readonly(
          "baselines",
          [](const plan& p) {
            py::dict result;
            for (const auto& baseline : p.baselines) result[py::str(std::string(name_of(baseline.method)))] = baseline;
            return result;
          },
          "data_blind and dflop_reference, when computed: method name -> MethodResult.")
      .def_property_readonly("llm_replicas", [](const plan& p) { return p.chosen.config.llm.dp; },
                             "LLM data-parallel replicas: the ranks a DflopBatchSampler serves.")
      .def_property_readonly("encoder_replicas", [](const plan& p) { return p.chosen.config.encoder.dp; },
                             "Encoder data-parallel replicas.")
      .def_property_readonly("microbatches", [](const plan& p) { return p.chosen.config.microbatches; },
                             "Microbatches per LLM replica per iteration.")
      .def(
          "method", [](const plan& p, const std::string& name) { return p.method(name); }, py::arg("name"),
          "The MethodResult of 'dflop' (the plan's choice) or a baseline; InputError naming the methods the plan "
          "has otherwise.")
      .def(
          "to_json", [](const plan& p, int indent) { return to_json(p).dump(indent); }, py::arg("indent") = 2,
          "The plan as JSON text: what `dflop plan --json` prints and `dflop plan --save` writes.")
      .def(
          "to_dict", [](const plan& p) { return detail::to_python(to_json(p)); }, "The plan's JSON as Python objects.")
      .def(
          "save", [](const plan& p, py::object path) { write_plan(detail::name_or_path(path), p); }, py::arg("path"),
          "Writes the plan file (as `dflop plan --save`); `dflop schedule --plan` and Plan.load read it.")
      .def_static(
          "from_json", [](const std::string& text, const std::string& source) { return parse_plan_json(text, source); },
          py::arg("text"), py::arg("source") = "<text>",
          "A plan from plan-file JSON text; every problem is an InputError naming `source`, the field and why.")
      .def_static(
          "load", [](py::object path) { return read_plan(detail::name_or_path(path)); }, py::arg("path"),
          "Reads a plan file (`dflop plan --save`).")
      .def(
          "schedule_batch",
          [](const plan& p, py::handle samples, std::uint64_t seed, const std::string& method) {
            sample_list storage;
            const sample_list& batch = as_samples(samples, storage, "samples");
            py::gil_scoped_release unlocked;
            return detail::schedule_batch(p, batch, seed, method);
          },
          py::arg("samples"), py::arg("seed") = 0, py::arg("method") = "dflop",
          "Packs, orders and prices one global batch (every iteration), as `dflop schedule` does: the plan's "
          "schedule and per-batch options, packing seed `seed`. `samples`: a Samples (not copied), a list of "
          "dicts or Samples, or a trace path. method: 'dflop' or a baseline run as that method runs it. The GIL is "
          "released while scheduling.")
      .def("__repr__", [](const plan& p) {
        return "<dflop.Plan " + p.model + " on " + std::to_string(p.cluster.gpus) + " x " + p.cluster.gpu.name + ": " +
               std::to_string(p.chosen.iteration_seconds) + " s per iteration>";
      });

  py::class_<batch_schedule>(module, "BatchSchedule",
                             "One global batch made ready to run. Sample numbers index the batch as given to "
                             "schedule_batch; lists are built when a property is read.")
      .def_property_readonly(
          "llm_microbatches",
          [](const batch_schedule& b) { return detail::in_execution_order(b, b.llm_microbatches, b.config.llm.dp); },
          "[replica][position]: sample indices of LLM replica `replica`'s microbatch at execution position "
          "`position` (slot slot_order[position]); every sample appears exactly once.")
      .def_property_readonly(
          "encoder_parts",
          [](const batch_schedule& b) { return detail::in_execution_order(b, b.encoder_parts, b.config.encoder.dp); },
          "[replica][position]: sample indices encoder replica `replica` encodes for that position (samples with "
          "encoder work only).")
      .def(
          "replica_microbatches",
          [](const batch_schedule& b, int replica) {
            if (replica < 0 || replica >= b.config.llm.dp)
              throw py::index_error("replica " + std::to_string(replica) + " out of range: the plan has " +
                                    std::to_string(b.config.llm.dp) + " LLM replicas");
            const auto m = static_cast<std::size_t>(b.config.microbatches);
            std::vector<std::vector<std::uint32_t>> result;
            for (std::uint32_t slot : b.slot_order) result.push_back(b.llm_microbatches[replica * m + slot]);
            return result;
          },
          py::arg("replica"), "LLM replica `replica`'s microbatches (sample indices) in execution order.")
      .def_readonly("slot_order", &batch_schedule::slot_order, "Execution position -> slot.")
      .def_readonly("predicted_seconds", &batch_schedule::predicted_seconds, "Simulated iteration time of this batch.")
      .def_readonly("packing_makespan", &batch_schedule::packing_makespan, "The packer's objective (max bin load).")
      .def_readonly("packing_lower_bound", &batch_schedule::packing_lower_bound, "Its certified lower bound.")
      .def_readonly("memory_capped", &batch_schedule::memory_capped,
                    "Whether the plan's memory budget changed this batch (packed or split again within it).")
      .def_readonly("encoder_recomputed", &batch_schedule::encoder_recomputed,
                    "Layers each encoder stage replica recomputes for each microbatch of this batch, "
                    "[(replica * microbatches + slot) * encoder stages + stage]: the plan's count, or fewer where "
                    "what the stage holds at once allows.")
      .def_readonly("llm_recomputed", &batch_schedule::llm_recomputed,
                    "The same for the LLM's stages, [(replica * microbatches + slot) * llm stages + stage].")
      .def_property_readonly("microbatches", [](const batch_schedule& b) { return b.config.microbatches; },
                             "Microbatches (slots) per replica.")
      .def_property_readonly("llm_replicas", [](const batch_schedule& b) { return b.config.llm.dp; },
                             "LLM data-parallel replicas.")
      .def_property_readonly("encoder_replicas", [](const batch_schedule& b) { return b.config.encoder.dp; },
                             "Encoder data-parallel replicas.")
      .def("__repr__", [](const batch_schedule& b) {
        return "<dflop.BatchSchedule " + std::to_string(b.config.llm.dp) + " replicas x " +
               std::to_string(b.config.microbatches) + " microbatches, predicted " +
               std::to_string(b.predicted_seconds) + " s>";
      });

  module.def(
      "plan",
      [](py::handle workload, py::handle model, const cluster_spec& cluster, int global_batch, int batches,
         std::uint64_t seed, const std::string& schedule, unsigned threads, bool exclude_unfittable,
         double gradient_bucket_mb, bool whole_stage_recompute, bool planned_recompute, bool encoder_run_ahead) {
        sample_list storage;
        const sample_list& samples = as_samples(workload, storage, "workload");
        const multimodal_spec spec = detail::model_of(model);
        py::gil_scoped_release unlocked;
        return detail::make_plan(samples, spec, cluster, global_batch, batches, seed, schedule, threads,
                                 exclude_unfittable, gradient_bucket_mb, whole_stage_recompute, planned_recompute,
                                 encoder_run_ahead);
      },
      py::arg("workload"), py::arg("model"), py::arg("cluster"), py::kw_only(), py::arg("global_batch") = 512,
      py::arg("batches") = 4, py::arg("seed") = 0, py::arg("schedule") = "auto", py::arg("threads") = 0,
      py::arg("exclude_unfittable") = false, py::arg("gradient_bucket_mb") = batch_options{}.gradient_bucket_bytes / (1024.0 * 1024.0),
      py::arg("whole_stage_recompute") = false, py::arg("planned_recompute") = false,
      py::arg("encoder_run_ahead") = true,
      "Chooses the 3D parallel configuration for a workload, model and cluster, as `dflop plan` does with the "
      "same --global-batch, --batches, --seed, --schedule, --gradient-bucket-mb (gradient_bucket_mb > 0: "
      "each stage's gradient all-reduce predicted in buckets of that many MiB, overlapped with its last "
      "backward, as the executors run it for stages that call gradients_ready; 0: one all-reduce after the "
      "last op) and --whole-stage-recompute (True: a stage that recomputes activations recomputes all its "
      "layers; False: the fewest with which the plan fits, config's recompute_layers) and --planned-recompute "
      "(True: every batch recomputes the plan's count; False: each batch only as many layers as its real "
      "in-flight microbatches need, at most the plan's count) and --no-encoder-run-ahead (encoder_run_ahead=False: "
      "the encoder keeps the schedule's own warm-up; True: the chosen plan's encoder runs further ahead where that "
      "is faster and fits) (the plan does not "
      "depend on `threads`; 0: all cores). workload: Samples, a trace path or a list of dicts; model: a preset 'ENCODER+LLM', a model JSON "
      "file or a Model. Raises InputError for bad input (also for samples no configuration holds in memory even "
      "alone, naming them; exclude_unfittable=True plans without them and lists them in Plan.excluded_samples, "
      "as --exclude-unfittable does), InfeasibleError when no configuration fits in memory. "
      "The GIL is released while planning.");

  module.def(
      "_time_schedule_batch",
      [](const plan& p, const sample_list& samples, std::uint64_t seed, std::size_t repeats) {
        std::vector<double> seconds;
        seconds.reserve(repeats);
        py::gil_scoped_release unlocked;
        for (std::size_t k = 0; k < repeats; ++k) {
          const auto start = std::chrono::steady_clock::now();
          const batch_schedule batch = detail::schedule_batch(p, samples, seed, "dflop");
          seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          if (batch.predicted_seconds < 0) seconds.back() = -1;  // keeps the result used
        }
        return seconds;
      },
      py::arg("plan"), py::arg("samples"), py::arg("seed"), py::arg("repeats"),
      "For the benchmark: seconds of each of `repeats` C++ calls of the scheduling Plan.schedule_batch makes, "
      "timed in C++ (no Python in the loop).");
}

}  // namespace dflop::python
