// SPDX-License-Identifier: Apache-2.0
//! \file
//! The compile-time composition of dflop's policies. `dflop::pipeline<>` is a
//! good default; override one policy at a time:
//!
//!     using my_pipeline = dflop::pipeline<dflop::table_cost_model>;          // profiled costs
//!     auto plan  = my_pipeline::make_plan(workload, model, cluster);          // once per run
//!     my_pipeline::runner<dflop::mpi_communicator, vit_stage, llm_stage> run(plan, world, make_stage);
//!     auto batch = my_pipeline::schedule_batch(plan, samples, step);          // every iteration
//!     run.step(batch, samples);
//!
//! Policies with settings are passed as values (`policies{.schedule = ...}`);
//! the defaults are default-constructed. Planning needs this header alone;
//! building a `runner` needs `<dflop/exec/plan_runner.hpp>` too (the executors
//! are not parsed by translation units that only plan).
//!
//! Each parameter is checked against its concept clause by clause: a policy
//! that misses one gets a message naming that clause and the signature
//! expected (detail/concept_diagnostics.hpp).
#pragma once

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/detail/concept_diagnostics.hpp>
#include <dflop/exec/plan_runner_fwd.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/plan/pack/refined_packer.hpp>
#include <dflop/plan/pack/sequential_packer.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/plan_method.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/schedule/concept.hpp>
#include <dflop/schedule/one_f_one_b.hpp>

#include <concepts>
#include <span>
#include <string_view>

namespace dflop {

namespace detail {
//! `pipeline::planner_type` when a policy misses a clause of its concept: that
//! clause's static_assert has said what is wrong, and naming `planner<...>`
//! would only repeat it as a long constraint failure.
struct invalid_pipeline_policies;

//! `planner<...>` when `Valid`, named only then (see `invalid_pipeline_policies`).
template <bool Valid, class Cost, class Memory, class Partitioner, class Packer, class Schedule>
struct pipeline_planner {
  using type = planner<Cost, Memory, Partitioner, Packer, Schedule>;
};
template <class Cost, class Memory, class Partitioner, class Packer, class Schedule>
struct pipeline_planner<false, Cost, Memory, Partitioner, Packer, Schedule> {
  using type = invalid_pipeline_policies;
};
}  // namespace detail

//! A data-aware training pipeline type: how samples are priced (`CostModel`),
//! how layers are split into stages (`Partitioner`), how batches are packed
//! into microbatches (`Packer`), which pipeline schedule runs (`Schedule`), and
//! how memory is counted (`MemoryModel`).
template <class CostModel = flops_cost_model, class Partitioner = min_max_layers, class Packer = refined_packer,
          class Schedule = one_f_one_b, class MemoryModel = analytic_memory_model>
struct pipeline {
  //! Each policy's concept, checked clause by clause: a policy that misses one
  //! fails a static_assert that names that clause and the signature expected
  //! (detail/concept_diagnostics.hpp), rather than a bare "constraints not satisfied".
  static constexpr bool policies_model_their_concepts =
      detail::diagnose_cost_model<CostModel>() && detail::diagnose_layer_partitioner<Partitioner>() &&
      detail::diagnose_packer<Packer>() && detail::diagnose_schedule<Schedule>() &&
      detail::diagnose_memory_model<MemoryModel>();

  using cost_model_type = CostModel;       //!< prices microbatches
  using partitioner_type = Partitioner;    //!< splits layers into stages
  using packer_type = Packer;              //!< packs batches into microbatches
  using schedule_type = Schedule;          //!< orders each rank's ops
  using memory_model_type = MemoryModel;   //!< counts bytes per stage
  //! The planner this pipeline composes (with a policy that misses a clause: an
  //! incomplete placeholder, so that the clause's own message is the only error).
  using planner_type = typename detail::pipeline_planner<policies_model_their_concepts, CostModel, MemoryModel,
                                                         Partitioner, Packer, Schedule>::type;

  //! The policy values, for policies with settings (e.g. `named_schedule("zb-h1")`).
  struct policies {
    Partitioner partitioner{};  //!< splits layers into stages
    Packer packer{};            //!< packs batches into microbatches
    Schedule schedule{};        //!< orders each rank's ops
  };

  //! Runs this pipeline's plans on `Communicator` (inproc_communicator,
  //! mpi_communicator, nccl_communicator) over the user's stage types, with this
  //! pipeline's Schedule policy. Only declared here: include
  //! `<dflop/exec/plan_runner.hpp>` to build one (see plan_runner_fwd.hpp).
  template <class Communicator, class EncoderStage, class LlmStage = EncoderStage>
  using runner = plan_runner<Schedule, Communicator, EncoderStage, LlmStage>;

  //! Plans with cost and memory models built from the model and the GPU
  //! (`CostModel(model, gpu)`, `MemoryModel(model)`).
  [[nodiscard]] static plan make_plan(std::span<const sample> workload, const multimodal_spec& model,
                                      const cluster_spec& cluster, planner_options options = {},
                                      const policies& with = {})
    requires std::constructible_from<CostModel, const multimodal_spec&, const gpu_spec&> &&
             std::constructible_from<MemoryModel, const multimodal_spec&>
  {
    return make_plan(workload, model, cluster, CostModel(model, cluster.gpu), MemoryModel(model), std::move(options),
                     with);
  }

  //! Plans with the given cost and memory model instances (profiled tables, fitted models...).
  [[nodiscard]] static plan make_plan(std::span<const sample> workload, const multimodal_spec& model,
                                      const cluster_spec& cluster, CostModel cost, MemoryModel memory,
                                      planner_options options = {}, const policies& with = {}) {
    planner_type search(model, cluster, std::move(cost), std::move(memory), std::move(options), with.partitioner,
                        with.packer, with.schedule);
    return search.make_plan(workload);
  }

  //! Packs, orders and prices one global batch for `chosen` (every iteration):
  //! what `runner::step` runs. `method` picks the configuration: dflop's (the
  //! plan's choice, packed with this pipeline's Packer and the plan's batch
  //! options), or a baseline run as that method runs it (`data_blind`:
  //! sequential packing; `dflop_reference`: refined packing; both with
  //! round-robin slots in arrival order). A method named in a file or on a
  //! command line is parsed once with `parse_plan_method`. Throws `input_error` for a method the
  //! plan does not hold or a `with.schedule` other than the plan's.
  [[nodiscard]] static batch_schedule schedule_batch(const plan& chosen, std::span<const sample> samples,
                                                     const CostModel& cost, const MemoryModel& memory,
                                                     std::uint64_t seed = 0, plan_method method = plan_method::dflop,
                                                     const policies& with = {}) {
    const method_result& run = chosen.method(method);
    const plan_layout layout = make_plan_layout(chosen, method, with.schedule);
    batch_options options = chosen.batch;
    options.seed = seed;
    if (&run == &chosen.chosen) {
      batch_scheduler<CostModel, MemoryModel, Packer> scheduler(chosen.model_spec, chosen.cluster, cost, memory,
                                                                with.packer);
      return scheduler.schedule(layout, samples, options);
    }
    options = as_baselines_run(options);
    if (run.method == plan_method::data_blind)
      return batch_scheduler<CostModel, MemoryModel, sequential_packer>(chosen.model_spec, chosen.cluster, cost, memory)
          .schedule(layout, samples, options);
    return batch_scheduler<CostModel, MemoryModel, refined_packer>(chosen.model_spec, chosen.cluster, cost, memory)
        .schedule(layout, samples, options);
  }

  //! `schedule_batch` with cost and memory models built from the plan's model and GPU.
  [[nodiscard]] static batch_schedule schedule_batch(const plan& chosen, std::span<const sample> samples,
                                                     std::uint64_t seed = 0, plan_method method = plan_method::dflop,
                                                     const policies& with = {})
    requires std::constructible_from<CostModel, const multimodal_spec&, const gpu_spec&> &&
             std::constructible_from<MemoryModel, const multimodal_spec&>
  {
    return schedule_batch(chosen, samples, CostModel(chosen.model_spec, chosen.cluster.gpu),
                          MemoryModel(chosen.model_spec), seed, method, with);
  }
};

}  // namespace dflop
