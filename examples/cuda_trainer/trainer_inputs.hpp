// SPDX-License-Identifier: Apache-2.0
//! \file
//! What the trainer runs, made on the host (plain C++: the planner and the batch
//! scheduler stay out of nvcc's translation units): the plan, read from a file
//! (`dflop plan --save`) or planned in-process for a small built-in model and
//! cluster, and each step's global batch scheduled for the chosen method as
//! `dflop schedule` does (one sampler; batch k packed with seed + k).
#pragma once

#include "plan_trainer.hpp"

#include <dflop/error.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/sampling.hpp>
#include <dflop/workload/trace.hpp>

#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop::cuda_trainer {

//! The pipeline plans run with: the schedule is the one the plan names.
using trainer_pipeline = pipeline<flops_cost_model, min_max_layers, refined_packer, named_schedule>;

//! Where the plan and the batches come from.
struct input_options {
  std::string plan_path;   //!< a saved plan; empty: the built-in one
  std::string workload;    //!< JSONL trace the batches are drawn from (empty: the built-in default mixture)
  std::string method = "dflop";
  int steps = 5;           //!< global batches
  //! Sampling seed (unset: the plan's), batch k is packed with seed + k.
  std::optional<std::uint64_t> seed;
  int gpus = 4;            //!< the built-in plan's GPU count
  int global_batch = 32;   //!< the built-in plan's global batch
  std::string schedule = "1f1b";  //!< the built-in plan's schedule
};

//! The built-in plan's model and GPU. On 4 GPUs its methods differ: dflop and
//! data_blind pipeline the LLM over 3 GPUs, dflop_reference runs two encoder
//! replicas and the LLM with TP 2 (planning takes milliseconds).
inline constexpr const char* builtin_model = "siglip-400m+qwen2.5-7b";
inline constexpr const char* builtin_gpu = "h100-80gb";

//! Plans the built-in model for `options.gpus` GPUs (one node) on `workload`, with the baselines.
[[nodiscard]] inline plan builtin_plan(std::span<const sample> workload, const input_options& options) {
  const cluster_spec cluster{options.gpus, options.gpus, find_gpu(builtin_gpu)};
  planner_options planning;
  planning.global_batch = options.global_batch;
  planning.batches = 2;
  planning.threads = 1;
  planning.seed = options.seed.value_or(0);
  return trainer_pipeline::make_plan(workload, find_model(builtin_model), cluster, planning,
                                     {.schedule = named_schedule(options.schedule)});
}

//! Schedules `options.steps` batches of `pool` for `chosen` and `options.method`.
[[nodiscard]] inline trainer_inputs schedule_steps(plan chosen, std::span<const sample> pool,
                                                   const input_options& options) {
  trainer_inputs out;
  out.chosen = std::move(chosen);
  (void)out.chosen.method(options.method);  // an unknown method fails before any work
  const trainer_pipeline::policies with{.schedule = named_schedule(out.chosen.schedule)};
  const std::uint64_t seed = options.seed.value_or(out.chosen.seed);
  batch_sampler sampler(pool.size(), static_cast<std::size_t>(out.chosen.global_batch), batch_mode::without_replacement,
                        seed);
  for (int k = 0; k < options.steps; ++k) {
    out.batches.push_back(gather_samples(pool, sampler.next()));
    out.scheduled.push_back(trainer_pipeline::schedule_batch(out.chosen, out.batches.back(),
                                                             seed + static_cast<std::uint64_t>(k),
                                                             parse_plan_method(options.method, "--method"), with));
  }
  return out;
}

//! Reads or makes the plan and schedules `options.steps` batches for `options.method`.
[[nodiscard]] inline trainer_inputs make_inputs(const input_options& options, std::ostream* progress = nullptr) {
  const auto pool = options.workload.empty() ? default_workload() : read_trace_file(options.workload);
  if (!options.plan_path.empty()) return schedule_steps(read_plan(options.plan_path), pool, options);
  if (progress) *progress << "planning " << builtin_model << " on " << options.gpus << " x " << builtin_gpu << "\n";
  return schedule_steps(builtin_plan(pool, options), pool, options);
}

}  // namespace dflop::cuda_trainer
