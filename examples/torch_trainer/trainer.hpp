// SPDX-License-Identifier: Apache-2.0
//! \file
//! The torch trainer's path through the library (no torch headers here): the
//! fitted cost model from a profile, a plan for the model on CPU ranks, each
//! step's batch scheduled for a method, and one rank's training loop over
//! `plan_runner` with `torch_stage`s. What every rank needs is computed the same
//! on every rank (deterministic for the seeds), so nothing but activations,
//! gradients and the step's figures travels.
#pragma once

#include "model_options.hpp"
#include "torch_stage.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/error.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/world_layout.hpp>
#include <dflop/runtime/calibrated_cost_model.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/sampling.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dflop::torch_trainer {

//! The pipeline the trainer plans and schedules with: profiled, fitted costs.
using torch_pipeline = pipeline<fitted_cost_model, min_max_layers, refined_packer, named_schedule>;

//! What a run does.
struct trainer_options {
  model_options model;                //!< the model's sizes and learning rate
  std::string mixture = "onevision";  //!< dflop mixture the samples are drawn from (scaled down)
  int pool_samples = 2048;            //!< samples in the pool batches are drawn from
  int gpus = 2;                       //!< ranks of the plan (one CPU core each)
  int global_batch = 16;              //!< samples per step
  std::string schedule = "1f1b";      //!< the plan's pipeline schedule
  //! dflop, data_blind or dflop_reference; several: each its own model and
  //! runner, their steps interleaved (step k of each, the first method rotating)
  //! so a shared machine's load hits them alike.
  std::vector<std::string> methods{"dflop"};
  int steps = 5;                      //!< steps run
  std::uint64_t seed = 0;             //!< pool, planning and batch sampling (batch k packed with seed + k)
  double watchdog = 300;              //!< seconds without progress before every rank stops
  bool json = false;                  //!< one JSON object per step and a summary
  bool check = false;                 //!< compare each step's loss with the single-process run
  double tolerance = 0;               //!< relative; 0: 1e-5 (float32) or 1e-12 (float64)
  bool op_log = false;                //!< every op's measured and predicted milliseconds on stderr
  //! Memory of each rank's "GPU" in MiB (0: `cpu_core()`'s 8 GiB). Less makes
  //! the planner and each batch recompute layers (`torch_stage` then really does).
  double memory_mib = 0;
  //! Gradient bucket size in MiB the plan is made with (0: one sum per stage
  //! after its last op): the stages say each bucket final in their last B, so
  //! its data-parallel sum overlaps the rest of it, and the predictions price that.
  double gradient_bucket_mib = 0;
  //! How fast the calibrated prices follow the machine (`calibration_options::weight`).
  double calibration_weight = 0.5;
};

//! The fitted model times per-module, per-pass factors learned from the ops of
//! the steps run so far (their CPU times): it follows the machine's speed, which
//! moves after the profile was taken.
using calibrated_costs = calibrated_cost_model<fitted_cost_model>;

//! A CPU core as the planner's "GPU": memory enough for the small model, links
//! of shared memory between processes (their time is small next to the ops).
[[nodiscard]] inline gpu_spec cpu_core(double memory_mib = 0) {
  if (!(memory_mib >= 0) || !std::isfinite(memory_mib))
    throw input_error("--memory-mib", 0, "must be finite and >= 0 (0: 8 GiB), got " + std::to_string(memory_mib));
  const std::int64_t memory = memory_mib > 0 ? static_cast<std::int64_t>(memory_mib * 1048576.0) : std::int64_t{8} << 30;
  return {"cpu-core", 5e10, memory, 5e9, 5e9, 20e-6};
}

//! The fitted model extended to TP degrees 2, 4, ... up to `gpus`: this trainer's
//! stages do not split their matrices over a TP group (every TP rank computes
//! the whole stage, as the CUDA trainer's do), so a TP degree costs what TP 1
//! costs, and that is what the planner should see. The profile stays as measured (TP 1).
[[nodiscard]] inline fitted_cost_model with_whole_stage_tp(const fitted_cost_model& measured, int gpus) {
  std::vector<fitted_curve> curves(measured.curves().begin(), measured.curves().end());
  for (const fitted_curve& curve : measured.curves()) {
    if (curve.tp != 1) continue;
    for (int tp = 2; tp <= gpus; tp *= 2) {
      bool present = false;
      for (const auto& other : measured.curves()) present = present || (other.piece == curve.piece && other.tp == tp);
      if (present) continue;
      fitted_curve copy = curve;
      copy.tp = tp;
      curves.push_back(copy);
    }
  }
  return fitted_cost_model(std::move(curves));
}

//! Everything every rank needs, made the same on every rank.
struct trainer_inputs {
  fitted_cost_model cost{{}};                //!< fitted from the profile
  plan chosen;                               //!< the plan (made here or read)
  std::vector<std::vector<sample>> batches;  //!< each step's global batch
  std::vector<std::vector<batch_schedule>> scheduled;  //!< per method (of the options), each step's schedule
};

//! Plans the model (`options.gpus` CPU ranks on one node) with `cost`, or takes
//! `saved` (a plan file, which must be of this model), and schedules the steps' batches.
[[nodiscard]] inline trainer_inputs make_inputs(const trainer_options& options, fitted_cost_model cost,
                                                std::optional<plan> saved, std::ostream* progress) {
  trainer_inputs out;
  out.cost = with_whole_stage_tp(cost, options.gpus);
  const multimodal_spec spec = spec_of(options.model);
  const auto pool = scaled_mixture(options.mixture, static_cast<std::size_t>(options.pool_samples), options.seed,
                                   options.model);
  if (saved) {
    out.chosen = std::move(*saved);
    if (!(out.chosen.model_spec == spec))
      throw input_error("--plan", 0, "the plan is for model '" + out.chosen.model_spec.name +
                                         "' of other sizes than this trainer's model (plan it with the same flags)");
  } else {
    const cluster_spec cluster{options.gpus, options.gpus, cpu_core(options.memory_mib)};
    planner_options planning;
    planning.global_batch = options.global_batch;
    planning.batches = 2;
    planning.threads = 1;
    planning.seed = options.seed;
    if (!(options.gradient_bucket_mib >= 0) || !std::isfinite(options.gradient_bucket_mib))
      throw input_error("--gradient-bucket-mib", 0,
                        "must be finite and >= 0 (0: no buckets), got " + std::to_string(options.gradient_bucket_mib));
    planning.batch.gradient_bucket_bytes = options.gradient_bucket_mib * 1048576.0;
    if (progress) *progress << "planning " << spec.name << " on " << options.gpus << " CPU ranks\n";
    out.chosen = torch_pipeline::make_plan(pool, spec, cluster, out.cost, analytic_memory_model(spec), planning,
                                           {.schedule = named_schedule(options.schedule)});
  }
  if (options.methods.empty()) throw input_error("--method", 0, "no method to run");
  for (const auto& method : options.methods) (void)out.chosen.method(method);  // unknown ones fail before any work
  out.scheduled.resize(options.methods.size());
  const torch_pipeline::policies with{.schedule = named_schedule(out.chosen.schedule)};
  const analytic_memory_model memory(out.chosen.model_spec);
  batch_sampler sampler(pool.size(), static_cast<std::size_t>(out.chosen.global_batch),
                        batch_mode::without_replacement, options.seed);
  for (int k = 0; k < options.steps; ++k) {
    out.batches.push_back(gather_samples(pool, sampler.next()));
    for (std::size_t i = 0; i < options.methods.size(); ++i)
      out.scheduled[i].push_back(torch_pipeline::schedule_batch(out.chosen, out.batches.back(), out.cost, memory,
                                                                options.seed + static_cast<std::uint64_t>(k),
                                                                parse_plan_method(options.methods[i], "--method"), with));
  }
  return out;
}

//! The median of `values` (0 for none).
[[nodiscard]] inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

//! What a rank's run reports (rank 0 prints it).
struct run_report {
  std::vector<double> losses;     //!< per step (the same on every rank)
  std::vector<double> measured;   //!< per step: rank 0's wall seconds of the step
  std::vector<double> predicted;  //!< per step: the simulator's seconds for the batch
  //! Relative errors (predicted - measured) / measured of the fitted model for
  //! every F and B op of every rank: [encoder F, encoder B, LLM F, LLM B].
  std::array<std::vector<double>, 4> op_errors;
  //! The same against each op's CPU time on its thread.
  std::array<std::vector<double>, 4> op_cpu_errors;
  //! The calibrated model's errors against CPU time, each op priced before its step ran.
  std::array<std::vector<double>, 4> op_cpu_calibrated_errors;
};

//! Step `k` of method `i` on this rank (see `train_rank`): runs it, updates the
//! weights, prices every op with the fitted and the calibrated model, teaches the
//! calibrated model this step's ops and, on rank 0, prints the step.
template <class Communicator, class Runner>
void run_step(Communicator& world, Runner& run, const trainer_inputs& inputs, const trainer_options& options,
              std::size_t k, std::size_t i, calibrated_costs& calibrated, run_report& report) {
  const auto& batch = inputs.batches[k];
  const auto& scheduled = inputs.scheduled[i][k];
  const std::string& method = options.methods[i];
  const stage_assignment& mine = run.assignment();
  const world_layout layout(run.layout().config);
  run.stage().begin_step(static_cast<double>(predicted_tokens(batch, options.model)));
  const step_result result = run.step(scheduled, batch);
  const optimizer_shard shard = run.optimizer_shard_of_stage();
  run.stage().update(shard);

  // Layers recomputed in this step's backward ops by the first TP rank of every
  // stage replica (each op once): what the batch's data-aware counts asked for.
  // And the gradient sums every rank started inside its last B (overlapped), and
  // the ranks whose optimizer updated a shard (the distributed optimizer).
  std::array<double, 3> counts{0, static_cast<double>(result.gradient_sums_overlapped), shard.members > 1 ? 1.0 : 0.0};
  if (mine.role.tp_rank == 0)
    for (const op_record& op : run.stage().records())
      if (!op.forward) counts[0] += op.recomputed_layers;
  world.all_reduce_sum(gradient_buffer::of(std::span<double>(counts)), world.resource());
  const double recomputed = counts[0];

  // Both models' prices of every op this rank ran, against its wall and CPU time;
  // all ranks' figures reach every rank in one sum (each rank fills its own slots:
  // a count, then per op whether it was a B, the fitted model's errors against
  // wall and CPU time, the calibrated model's against CPU time, the fitted price
  // and the CPU time), so every rank calibrates alike.
  constexpr std::size_t per_op = 6;
  const std::size_t most = 2 * static_cast<std::size_t>(scheduled.config.microbatches) + 2;
  const std::size_t slots = 1 + per_op * most;
  std::vector<double> figures(slots * static_cast<std::size_t>(world.size()), 0.0);
  double* my = figures.data() + slots * static_cast<std::size_t>(world.rank());
  std::size_t used = 0;
  for (const op_record& op : run.stage().records()) {
    if (used == most || op.samples.empty() || !(op.seconds > 0) || !(op.cpu_seconds > 0)) continue;
    std::vector<sample> samples;
    for (auto index : op.samples) samples.push_back(batch[index]);
    const auto tp = static_cast<int>(mine.tp_size);
    const pass_time price =
        inputs.cost.estimate_time(mine.role.module, tp, samples).stage_recomputing(mine.slice, op.recomputed_layers);
    const pass_time now =
        calibrated.estimate_time(mine.role.module, tp, samples).stage_recomputing(mine.slice, op.recomputed_layers);
    const double predicted = op.forward ? price.forward : price.backward;
    const double calibrated_price = op.forward ? now.forward : now.backward;
    if (options.op_log)
      std::cerr << method << " step " << k << " rank " << world.rank() << (op.forward ? " F " : " B ") << op.microbatch
                << ": " << samples.size() << " samples, " << shape_of(mine.role.module, samples).tokens
                << " tokens, measured " << op.seconds * 1e3 << " ms (CPU " << op.cpu_seconds * 1e3
                << " ms), predicted " << predicted * 1e3 << " ms (calibrated " << calibrated_price * 1e3 << " ms)\n";
    double* slot = my + 1 + per_op * used;
    slot[0] = op.forward ? 0 : 1;
    slot[1] = (predicted - op.seconds) / op.seconds;
    slot[2] = (predicted - op.cpu_seconds) / op.cpu_seconds;
    slot[3] = (calibrated_price - op.cpu_seconds) / op.cpu_seconds;
    slot[4] = predicted;
    slot[5] = op.cpu_seconds;
    ++used;
  }
  my[0] = static_cast<double>(used);
  world.all_reduce_sum(gradient_buffer::of(std::span<double>(figures)), world.resource());
  for (int r = 0; r < world.size(); ++r) {
    const double* theirs = figures.data() + slots * static_cast<std::size_t>(r);
    const module_kind kind = layout.role(r).encoder() ? module_kind::encoder : module_kind::llm;
    const std::size_t base = kind == module_kind::encoder ? 0 : 2;
    for (std::size_t j = 0; j < static_cast<std::size_t>(theirs[0]); ++j) {
      const double* slot = theirs + 1 + per_op * j;
      const bool backward = slot[0] != 0;
      const auto which = base + (backward ? 1 : 0);
      report.op_errors[which].push_back(slot[1]);
      report.op_cpu_errors[which].push_back(slot[2]);
      report.op_cpu_calibrated_errors[which].push_back(slot[3]);
      if (slot[4] > 0) calibrated.observe(kind, backward ? cost_pass::backward : cost_pass::forward, slot[4], slot[5]);
    }
  }
  calibrated.end_round();
  report.losses.push_back(result.loss);
  report.measured.push_back(result.seconds);
  report.predicted.push_back(scheduled.predicted_seconds);
  if (world.rank() != 0) return;
  if (options.json) {
    std::cout << nlohmann::json{{"step", k},
                                {"method", method},
                                {"loss", result.loss},
                                {"measured_seconds", result.seconds},
                                {"predicted_seconds", scheduled.predicted_seconds},
                                {"samples", batch.size()},
                                {"microbatches", scheduled.config.microbatches},
                                {"recomputed_layers", static_cast<std::int64_t>(recomputed)},
                                {"gradient_sums_overlapped", static_cast<std::int64_t>(counts[1])},
                                {"sharded_optimizer_ranks", static_cast<std::int64_t>(counts[2])},
                                {"ranks", world.size()},
                                {"calibration",
                                 {{"encoder_forward", calibrated.factor(module_kind::encoder, cost_pass::forward)},
                                  {"encoder_backward", calibrated.factor(module_kind::encoder, cost_pass::backward)},
                                  {"llm_forward", calibrated.factor(module_kind::llm, cost_pass::forward)},
                                  {"llm_backward", calibrated.factor(module_kind::llm, cost_pass::backward)}}}}
                     .dump()
              << std::endl;
  } else {
    std::cout << "step " << k << "  " << method << "  loss " << result.loss << "  measured " << result.seconds * 1e3
              << " ms, predicted " << scheduled.predicted_seconds * 1e3 << " ms" << std::endl;
  }
}

//! One rank's training loop, one report per method of `options.methods`: every
//! rank of `world` calls it together.
template <class Communicator>
std::vector<run_report> train_rank(Communicator& world, const trainer_inputs& inputs, const trainer_options& options) {
  using runner_type = torch_pipeline::runner<Communicator, torch_stage>;
  const plan& chosen = inputs.chosen;
  const std::size_t methods = options.methods.size();
  std::vector<std::unique_ptr<runner_type>> runs;
  for (const auto& method : options.methods)
    runs.push_back(std::make_unique<runner_type>(
        chosen, world,
        [&](const stage_assignment& a) { return torch_stage(a, options.model, chosen.batch.gradient_bucket_bytes); },
        executor_options{.watchdog_seconds = options.watchdog}, parse_plan_method(method, "--method"),
        named_schedule(chosen.schedule)));
  std::vector<run_report> reports(methods);
  // One calibration for every method: they share the machine whose speed it follows.
  calibrated_costs calibrated(inputs.cost, {.weight = options.calibration_weight});
  for (std::size_t k = 0; k < inputs.batches.size(); ++k) {
    for (std::size_t turn = 0; turn < methods; ++turn) {
      const std::size_t i = (k + turn) % methods;
      run_step(world, *runs[i], inputs, options, k, i, calibrated, reports[i]);
    }
  }
  return reports;
}

}  // namespace dflop::torch_trainer
