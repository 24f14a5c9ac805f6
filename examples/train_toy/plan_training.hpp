// SPDX-License-Identifier: Apache-2.0
//! \file
//! `dflop-train-toy --plan PLAN.json --emulate`: runs every rank of a saved plan
//! (threads, or one rank per process under mpirun) through the library's path:
//! read_plan -> schedule_batch (the plan's method: dflop, data_blind or
//! dflop_reference) -> plan_runner::step over emulated devices, and reports
//! each step's measured and predicted seconds. Nothing here plans: the batches
//! are the library's.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/emulated_stage.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/sampling.hpp>
#include <dflop/workload/trace.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace dflop::toy {

//! What `--plan` runs.
struct plan_run_options {
  std::string plan_path;           //!< the plan file (`dflop plan --save`)
  std::string method = "dflop";    //!< dflop, data_blind or dflop_reference
  std::string workload;            //!< JSONL trace batches are drawn from (empty: the built-in default mixture)
  bool emulate = false;            //!< emulated devices (the only stages `--plan` has)
  emulation_options emulation;     //!< time and byte scales
  int steps = 5;                   //!< global batches run
  //! Sampling seed; batch k is packed with seed + k, as `dflop schedule` does
  //! (unset: the plan's seed; on the workload the plan was made from, the batches
  //! are then the ones the planner scored first).
  std::optional<std::uint64_t> seed;
  double watchdog = 60;            //!< seconds without progress before every rank stops
  bool json = false;               //!< one JSON object per step and a summary
};

//! The pipeline a saved plan runs with: the schedule is named in the file.
using plan_pipeline = pipeline<flops_cost_model, min_max_layers, refined_packer, named_schedule>;

//! Everything every rank needs, read once: the plan, and each step's batch and schedule.
struct plan_run_inputs {
  plan chosen;
  std::vector<std::vector<sample>> batches;
  std::vector<batch_schedule> scheduled;

  //! Reads the plan and schedules `options.steps` batches with the library (`progress`: one line per batch).
  explicit plan_run_inputs(const plan_run_options& options, std::ostream* progress = nullptr)
      : chosen(read_plan(options.plan_path)) {
    if (!options.emulate)
      throw input_error("--emulate", 0,
                        "--plan runs emulated devices only (the toy model has no stages of a real model's shapes); "
                        "add --emulate");
    (void)chosen.method(options.method);  // an unknown method fails before any work
    const auto pool = options.workload.empty() ? default_workload() : read_trace_file(options.workload);
    const plan_pipeline::policies with{.schedule = named_schedule(chosen.schedule)};
    // As the planner and `dflop schedule` draw batches: one sampler, batch k packed with seed + k.
    const std::uint64_t seed = options.seed.value_or(chosen.seed);
    batch_sampler sampler(pool.size(), static_cast<std::size_t>(chosen.global_batch), batch_mode::without_replacement,
                          seed);
    for (int k = 0; k < options.steps; ++k) {
      batches.push_back(gather_samples(pool, sampler.next()));
      scheduled.push_back(plan_pipeline::schedule_batch(chosen, batches.back(), seed + static_cast<std::uint64_t>(k),
                                                        parse_plan_method(options.method, "--method"), with));
      if (progress)
        *progress << "scheduled batch " << k + 1 << "/" << options.steps << " (" << options.method << ", predicted "
                  << scheduled.back().predicted_seconds << " s)\n";
    }
  }
};

//! One rank's run of the plan; rank 0 reports. The world must have the plan's GPU count.
template <class Communicator>
void train_plan(Communicator& comm, const plan_run_inputs& inputs, const plan_run_options& options) {
  using runner = plan_pipeline::runner<Communicator, emulated_stage>;
  const auto& chosen = inputs.chosen;
  runner run(
      chosen, comm, [&](const stage_assignment& a) { return emulated_stage(a, chosen.model_spec, options.emulation); },
      {.watchdog_seconds = options.watchdog}, parse_plan_method(options.method, "--method"),
      named_schedule(chosen.schedule));
  std::vector<double> measured, predicted;
  for (std::size_t k = 0; k < inputs.scheduled.size(); ++k) {
    const auto& batch = inputs.scheduled[k];
    run.stage().begin_step(batch);
    const step_result result = run.step(batch, inputs.batches[k]);
    if (comm.rank() != 0) continue;
    const double expected = batch.predicted_seconds * options.emulation.time_scale;
    measured.push_back(result.seconds);
    predicted.push_back(expected);
    if (options.json) {
      std::cout << nlohmann::json{{"step", k},
                                  {"method", options.method},
                                  {"measured_seconds", result.seconds},
                                  {"predicted_seconds", expected},
                                  {"loss", result.loss},
                                  {"samples", inputs.batches[k].size()},
                                  {"ranks", comm.size()},
                                  {"microbatches", batch.config.microbatches}}
                       .dump()
                << std::endl;
    } else {
      std::cout << "step " << k << "  " << options.method << "  measured " << result.seconds * 1e3
                << " ms, predicted " << expected * 1e3 << " ms (" << comm.size() << " ranks)" << std::endl;
    }
  }
  if (comm.rank() != 0 || measured.empty()) return;
  const auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  };
  const double m = median(measured), p = median(predicted);
  if (options.json)
    std::cout << nlohmann::json{{"summary", true},
                                {"method", options.method},
                                {"steps", measured.size()},
                                {"median_measured_seconds", m},
                                {"median_predicted_seconds", p},
                                {"measured_over_predicted", p > 0 ? m / p : 0.0},
                                {"time_scale", options.emulation.time_scale}}
                     .dump()
              << std::endl;
  else
    std::cout << options.method << ": median measured " << m * 1e3 << " ms, predicted " << p * 1e3
              << " ms (measured/predicted " << (p > 0 ? m / p : 0.0) << ")" << std::endl;
}

}  // namespace dflop::toy
