// SPDX-License-Identifier: Apache-2.0
//! \file
//! Runs a plan: the planner's output made the executor's input. A `plan_runner`
//! is built on every rank from the plan, the world communicator and a stage
//! factory; it works out which stage of which module the rank holds
//! (`world_layout`: world rank = the plan's GPU number), asks the factory for
//! that stage with its layer range and TP rank, and runs each scheduled global
//! batch with the multimodal executor: direct encoder -> LLM hand-off, TP groups,
//! data-parallel gradient sums, the batch's slot order and the plan's schedule.
//!
//!     auto chosen = my_pipeline::make_plan(workload, model, cluster);     // or dflop::read_plan(file)
//!     my_pipeline::runner<dflop::mpi_communicator, vision_stage, llm_stage> run(chosen, world, make_stage);
//!     for (auto& samples : loader) {
//!       auto batch = my_pipeline::schedule_batch(chosen, samples, step);   // same on every rank
//!       auto result = run.step(batch, samples);                            // loss, op times
//!     }
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/multimodal_executor.hpp>
#include <dflop/exec/plan_runner_fwd.hpp>
#include <dflop/exec/step_result.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/plan_method.hpp>
#include <dflop/plan/world_layout.hpp>
#include <dflop/schedule/concept.hpp>
#include <dflop/workload/sample.hpp>

#include <concepts>
#include <cstdint>
#include <exception>
#include <sstream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace dflop {

//! What a stage factory is asked for: the stage one rank holds.
struct stage_assignment {
  rank_role role;                  //!< module, stage, replica, TP rank and pipeline position
  std::uint32_t positions = 1;     //!< positions of the combined pipeline (encoder + LLM stages)
  std::uint32_t tp_size = 1;       //!< ranks of the stage's tensor-parallel group
  std::int64_t first_layer = 0;    //!< the module's layers [first_layer, end_layer) live on this stage
  std::int64_t end_layer = 0;      //!< one past its last layer
  stage_slice slice;               //!< layers, and whether it holds the embedding / head
  module_parallelism degrees;      //!< its module's degrees and memory savers (recompute, distributed optimizer)
  //! Recompute the activations of this stage's first this many layers in the
  //! backward (what the plan priced: `module_parallelism::recompute_layers`, or
  //! all with full recomputation); 0: keep every layer's activations. The most
  //! any batch asks: each op's `stage_context::recomputed_layers` says what its
  //! batch needs (with data-aware recomputation, often fewer).
  std::int64_t recompute_first_layers = 0;
  int rank = 0;                    //!< world rank

  friend bool operator==(const stage_assignment&, const stage_assignment&) = default;
};

//! The assignment of world rank `rank` in `layout` (a method's configuration made concrete).
[[nodiscard]] inline stage_assignment assignment_of(const plan_layout& layout, int rank) {
  const world_layout world(layout.config);
  stage_assignment out;
  out.role = world.role(rank);
  out.positions = world.positions();
  out.tp_size = world.tp(out.role.module);
  const module_plan& module = out.role.encoder() ? layout.encoder : layout.llm;
  out.first_layer = module.first_layer.at(out.role.stage);
  out.end_layer = module.first_layer.at(out.role.stage + 1);
  out.slice = module.slice(static_cast<int>(out.role.stage));
  out.degrees = out.role.encoder() ? layout.config.encoder : layout.config.llm;
  out.recompute_first_layers = recomputed_layers(out.degrees, out.slice.layers);
  out.rank = rank;
  return out;
}

//! What the multimodal executor runs for `batch`, whose sample numbers index `samples`.
[[nodiscard]] inline multimodal_batch executable_batch(const batch_schedule& batch,
                                                       std::span<const sample> samples) noexcept {
  return {samples, batch.llm_microbatches, batch.encoder_parts, batch.slot_order, batch.encoder_recomputed,
          batch.llm_recomputed};
}

namespace detail {
template <class Communicator, class EncoderStage, class LlmStage>
using plan_executor_t = std::conditional_t<std::is_same_v<EncoderStage, LlmStage>,
                                           multimodal_executor<Communicator, EncoderStage>,
                                           multimodal_executor<Communicator, EncoderStage, LlmStage>>;

}  // namespace detail

//! Runs one method of a plan (dflop's choice or a baseline's configuration) on
//! this rank, with `Schedule` (the pipeline's schedule policy) over `Communicator`.
//! Every rank of the world builds one, together, and calls `step` together.
//! (Declared in plan_runner_fwd.hpp, where `LlmStage` defaults to `EncoderStage`;
//! the concepts are checked here, where the runner is built.)
template <class Schedule, class Communicator, class EncoderStage, class LlmStage>
class plan_runner {
  static_assert(schedule<Schedule>, "plan_runner: Schedule must model dflop::schedule (schedule/concept.hpp)");
  static_assert(communicator<Communicator>,
                "plan_runner: Communicator must model dflop::communicator (exec/communicator.hpp)");

public:
  //! The executor underneath.
  using executor_type = detail::plan_executor_t<Communicator, EncoderStage, LlmStage>;
  //! How this rank's stage is held: the one stage type, or a variant of the two.
  using stage_type = typename executor_type::stage_type;

  //! Builds this rank's stage with `make_stage(const stage_assignment&)` (which
  //! returns an `EncoderStage` or an `LlmStage`; if it throws, every rank is
  //! stopped, as for a failing step) and its executor. `method` picks
  //! the configuration: dflop's (the plan's choice) or a baseline's. Throws `input_error` when the plan has no such method,
  //! when the world's size is not the plan's GPU count, or when `policy` is not
  //! the schedule the plan was made with.
  template <class StageFactory>
    requires std::invocable<StageFactory&, const stage_assignment&>
  plan_runner(const plan& chosen, Communicator& world, StageFactory&& make_stage, executor_options options = {},
              plan_method method = plan_method::dflop, Schedule policy = {})
      : plan_runner(make_plan_layout(chosen, method, policy), world, std::forward<StageFactory>(make_stage), options) {}

  //! Runs a plan layout directly (a configuration made concrete with `make_plan_layout`).
  template <class StageFactory>
    requires std::invocable<StageFactory&, const stage_assignment&>
  plan_runner(plan_layout layout, Communicator& world, StageFactory&& make_stage, executor_options options = {})
      : layout_(std::move(layout)), assignment_(checked_assignment(layout_, world)),
        executor_(world, world_layout(layout_.config), built_stage(make_stage, assignment_, world), options) {}

  //! Runs one global batch: `batch` must have been scheduled for this runner's
  //! configuration (`pipeline::schedule_batch` with the same plan and method; only
  //! the configuration is checked, so a batch of another method with the same
  //! degrees but another layer split is not caught) from
  //! `samples`, the batch's samples (every rank passes the same). Returns the
  //! loss (summed over the batch, the same on every rank), wall time and, with
  //! `executor_options::record_op_times`, this rank's op times. Throws
  //! `input_error` for a batch made for another configuration; the executor's
  //! errors otherwise (`stage_failure`, `pipeline_aborted`, `watchdog_timeout`).
  step_result step(const batch_schedule& batch, std::span<const sample> samples) {
    if (batch.config != layout_.config) {
      std::ostringstream text;
      text << "the batch was scheduled for " << batch.config << ", this runner runs " << layout_.config;
      throw input_error("batch_schedule", 0, text.str());
    }
    return executor_.step(layout_.schedule, executable_batch(batch, samples));
  }

  //! The configuration, layer splits and schedule this runner runs.
  [[nodiscard]] const plan_layout& layout() const noexcept { return layout_; }
  //! What this rank holds.
  [[nodiscard]] const stage_assignment& assignment() const noexcept { return assignment_; }
  //! This rank's stage: its parameters and gradients.
  [[nodiscard]] stage_type& stage() noexcept { return executor_.stage(); }
  //! What this rank's stage updates after a step (its shard of each gradient
  //! buffer under the distributed optimizer; see `has_parameters`).
  [[nodiscard]] optimizer_shard optimizer_shard_of_stage() noexcept { return executor_.optimizer_shard_of_stage(); }
  //! The executor (tensor and data-parallel groups, pool statistics).
  [[nodiscard]] executor_type& executor() noexcept { return executor_; }

private:
  // A factory that throws on some ranks only would leave the others waiting in the
  // executor's collective group splits: it stops every rank instead (and rethrows).
  template <class StageFactory>
  static stage_type built_stage(StageFactory& make_stage, const stage_assignment& assignment, Communicator& world) {
    try {
      return stage_type(make_stage(assignment));
    } catch (...) {
      world.abort(std::current_exception());
      throw;
    }
  }
  static stage_assignment checked_assignment(const plan_layout& layout, const Communicator& world) {
    const int needed = layout.config.gpus();
    if (world.size() != needed)
      throw input_error("world", 0,
                        "the plan runs on " + std::to_string(needed) + " GPUs (one rank each), the world has " +
                            std::to_string(world.size()) + " ranks");
    return assignment_of(layout, world.rank());
  }

  plan_layout layout_;
  stage_assignment assignment_;
  executor_type executor_;
};

}  // namespace dflop
