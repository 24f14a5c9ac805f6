// SPDX-License-Identifier: Apache-2.0
//! \file
//! One rank's training loop over a plan: a `plan_runner` builds the rank's
//! `model_stage` from its assignment and runs each scheduled global batch with
//! the multimodal executor; after each step the stage's loss and gradient norm
//! are read once and summed over the world, and a normalized gradient step
//! (w -= learning_rate x g / |g|: the same step length whatever the batch size
//! or the loss's scale) updates the weights.
//! Backend- and communicator-generic: CUDA stages over `stream_communicator` or
//! `nccl_communicator` (device_runs.cu), host stages over `inproc_communicator` (the CPU check).
#pragma once

#include "model_stage.hpp"

#include <dflop/exec/plan_runner.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/sample.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace dflop::cuda_trainer {

//! What every rank runs: the plan, and each step's samples and schedule (the
//! same on every rank; trainer_inputs.hpp makes them).
struct trainer_inputs {
  plan chosen;                                //!< the plan (read from a file, or the built-in one)
  std::vector<std::vector<sample>> batches;   //!< each step's global batch
  std::vector<batch_schedule> scheduled;      //!< each step's schedule for the method run
};

//! How the ranks train.
struct run_options {
  std::string method = "dflop";  //!< dflop, data_blind or dflop_reference
  model_options model;           //!< row width and tokens per row
  double learning_rate = 0.05;   //!< length of each step in parameter space (w -= rate g / |g|)
  double watchdog = 60;          //!< seconds without progress before every rank stops
};

//! One step as a rank saw it (loss and norm are world sums: the same on every rank).
struct step_report {
  double loss = 0;           //!< the batch's loss
  double gradient_norm = 0;  //!< |gradients| over the whole model
  double seconds = 0;        //!< the executor's step (wall time on this rank)
  std::size_t messages = 0;  //!< messages this rank sent
  std::size_t overlapped_sums = 0;  //!< gradient buckets this rank's last B started summing (`step_result`)
  //! Members this rank's optimizer shares its stage's parameters with (the
  //! distributed optimizer: its data-parallel group; 1: it updates all of them).
  int optimizer_members = 1;
};

//! The runner type: the plan's named schedule, one stage type for both modules.
template <class Backend, class Communicator>
using trainer_runner = plan_runner<named_schedule, Communicator, model_stage<Backend>>;

//! Trains `inputs` on this rank of `world` (whose size must be the plan's GPU
//! count); every rank calls it together. Returns this rank's step reports.
template <class Backend, class Communicator>
std::vector<step_report> train_rank(Communicator& world, const trainer_inputs& inputs, const run_options& options) {
  const plan& chosen = inputs.chosen;
  trainer_runner<Backend, Communicator> run(
      chosen, world,
      [&](const stage_assignment& a) {
        return model_stage<Backend>(a, options.model, Backend{}, chosen.batch.gradient_bucket_bytes);
      },
      {.watchdog_seconds = options.watchdog}, parse_plan_method(options.method, "--method"),
      named_schedule(chosen.schedule));
  std::vector<step_report> reports;
  for (std::size_t k = 0; k < inputs.scheduled.size(); ++k) {
    const step_result result = run.step(inputs.scheduled[k], inputs.batches[k]);
    const optimizer_shard shard = run.optimizer_shard_of_stage();
    const stage_figures figures = run.stage().finish_step(world.resource(), shard);
    step_report report;
    report.loss = world.all_reduce_value(figures.loss);
    report.gradient_norm = std::sqrt(world.all_reduce_value(figures.gradient_squares));
    report.seconds = result.seconds;
    report.messages = result.messages_sent;
    report.overlapped_sums = result.gradient_sums_overlapped;
    report.optimizer_members = shard.members;
    const double norm = report.gradient_norm;  // the same on every rank: every stage takes the same step
    run.stage().update(world.resource(), norm > 0 ? options.learning_rate / norm : 0.0, shard);
    reports.push_back(report);
  }
  return reports;
}

}  // namespace dflop::cuda_trainer
