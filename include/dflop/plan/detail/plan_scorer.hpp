// SPDX-License-Identifier: Apache-2.0
//! \file
//! Everything the plan search asks of one configuration, owned in one place:
//! the inputs and policies, the sampled batches (`sampled_batches.hpp`), and
//! the three pieces that answer on them: prices, layer splits and schedules
//! per shape (`layout_cache.hpp`), memory checks and savers
//! (`memory_checker.hpp`), and scores on the batches (`batch_scorer.hpp`);
//! plus the summaries a plan reports (mean sample, ideal bound).
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/flops.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/error.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/detail/batch_scorer.hpp>
#include <dflop/plan/detail/layout_cache.hpp>
#include <dflop/plan/detail/memory_checker.hpp>
#include <dflop/plan/detail/sampled_batches.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/plan/planner_options.hpp>
#include <dflop/schedule/activations.hpp>
#include <dflop/schedule/concept.hpp>
#include <dflop/workload/sample.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop::detail {

//! Prices, checks and scores configurations of one model and cluster on the
//! sampled global batches, with the planner's policies; owns the inputs, the
//! batches and every cache (rebuilt whenever batches are drawn). Its pieces
//! point into it, so it is neither copied nor moved.
template <cost_model Cost, memory_model Memory, layer_partitioner Partitioner, packer Packer, schedule Schedule>
class plan_scorer {
public:
  using layouts_type = layout_cache<Cost, Schedule>;                 //!< prices, splits and schedules per shape
  using checks_type = memory_checker<Memory, layouts_type>;          //!< memory checks and savers
  using scoring_type = batch_scorer<Cost, Memory>;                   //!< scores on the sampled batches

  //! Keeps the inputs and policies; `draw_batches` before anything is priced.
  plan_scorer(multimodal_spec model, cluster_spec cluster, Cost cost, Memory memory, planner_options options,
              Partitioner partitioner, Packer pack_policy, Schedule schedule_policy)
      : model_(std::move(model)), cluster_(std::move(cluster)), cost_(std::move(cost)), memory_(std::move(memory)),
        options_(std::move(options)), partitioner_(std::move(partitioner)), packer_(std::move(pack_policy)),
        schedule_(std::move(schedule_policy)), layouts_(model_, cost_, schedule_, batches_.scoring),
        checks_(model_, cluster_, memory_, options_, layouts_),
        scoring_(model_, cluster_, cost_, memory_, options_, batches_) {
    // dflop's batches are packed within the usable memory (the planner rejects
    // a headroom outside [0, 1) right after this).
    if (!(options_.memory_headroom >= 0 && options_.memory_headroom < 1)) return;
    const auto budget = static_cast<std::int64_t>(checks_.capacity());
    std::int64_t& given = options_.batch.memory_budget_bytes;
    if (given != 0 && given != budget)
      throw input_error("batch.memory_budget_bytes", 0,
                        "the planner sets the memory budget from the GPU's memory and memory_headroom (" +
                            std::to_string(budget) + " bytes here); got " + std::to_string(given) +
                            ": leave it 0 and set memory_headroom instead");
    given = budget;
  }
  plan_scorer(const plan_scorer&) = delete;             //!< its pieces point into it
  plan_scorer& operator=(const plan_scorer&) = delete;  //!< its pieces point into it

  [[nodiscard]] const multimodal_spec& model() const noexcept { return model_; }      //!< the model planned
  [[nodiscard]] const cluster_spec& cluster() const noexcept { return cluster_; }     //!< the GPUs planned on
  [[nodiscard]] const Cost& cost() const noexcept { return cost_; }                   //!< prices microbatches
  [[nodiscard]] const Memory& memory() const noexcept { return memory_; }             //!< counts stage bytes
  [[nodiscard]] const planner_options& options() const noexcept { return options_; }  //!< the search's settings
  [[nodiscard]] const Partitioner& partitioner() const noexcept { return partitioner_; }  //!< the search's layer split
  [[nodiscard]] const Packer& pack_policy() const noexcept { return packer_; }             //!< the search's packer
  [[nodiscard]] const Schedule& schedule_policy() const noexcept { return schedule_; }     //!< orders each rank's ops

  //! Orders ops with `schedule_policy` from now on (the planner's schedule
  //! search); op lists and in-flight peaks made with the old one are forgotten.
  void use_schedule(Schedule schedule_policy) {
    schedule_ = std::move(schedule_policy);
    layouts_.forget_schedules();
  }

  [[nodiscard]] layouts_type& layouts() noexcept { return layouts_; }  //!< prices, splits and schedules per shape
  [[nodiscard]] checks_type& checks() noexcept { return checks_; }     //!< memory checks and savers
  [[nodiscard]] const checks_type& checks() const noexcept { return checks_; }  //!< memory checks and savers
  [[nodiscard]] scoring_type& scoring() noexcept { return scoring_; }  //!< scores on the sampled batches

  //! The global batches configurations are scored on.
  [[nodiscard]] const std::vector<std::vector<sample>>& batches() const noexcept { return batches_.scoring; }
  //! The workload's heaviest sample per module, alone (`sampled_batches::heaviest`).
  [[nodiscard]] const tail_samples& heaviest_samples() const noexcept { return batches_.heaviest; }

  //! Samples the search's batches from `workload` and forgets every cached
  //! price, split and schedule (they depend on the batches).
  void draw_batches(std::span<const sample> workload) {
    batches_ = sampled_batches::draw(workload, options_);
    layouts_.clear();
  }

  //! The mean sample of the sampled batches (what data-blind planners reason with).
  [[nodiscard]] sample mean_sample() const {
    double items = 0, encoder_tokens = 0, llm_tokens = 0, count = 0;
    for (const auto& batch : batches_.scoring)
      for (const sample& s : batch) {
        items += static_cast<double>(s.encoder_items);
        encoder_tokens += static_cast<double>(s.encoder_tokens);
        llm_tokens += static_cast<double>(s.llm_tokens);
        ++count;
      }
    sample mean{"mean", modality::image, std::llround(items / count), std::llround(encoder_tokens / count),
                std::max<std::int64_t>(1, std::llround(llm_tokens / count))};
    if (mean.encoder_items == 0) mean.kind = modality::text, mean.encoder_tokens = 0;
    return mean;
  }

  //! Training FLOPs of the mean sampled batch over every GPU at the best efficiency.
  [[nodiscard]] double ideal_seconds() const {
    double flops = 0;
    for (const auto& batch : batches_.scoring)
      for (module_kind kind : all_module_kinds) {
        const microbatch_shape shape = shape_of(kind, batch);
        const double layers = static_cast<double>(layouts_.layers_of(kind));
        flops += layers * part_forward_flops(model_, {kind, module_part::layer}, shape) +
                 part_forward_flops(model_, {kind, module_part::embedding}, shape) +
                 part_forward_flops(model_, {kind, module_part::head}, shape);
      }
    flops *= (1.0 + backward_flops_ratio(false)) / static_cast<double>(batches_.scoring.size());
    return flops / (cluster_.gpus * cluster_.gpu.peak_flops * options_.ideal_efficiency);
  }

private:
  multimodal_spec model_;
  cluster_spec cluster_;
  Cost cost_;
  Memory memory_;
  planner_options options_;
  Partitioner partitioner_;
  Packer packer_;
  Schedule schedule_;
  sampled_batches batches_;
  // The pieces, after everything they point into.
  layouts_type layouts_;
  checks_type checks_;
  scoring_type scoring_;
};

}  // namespace dflop::detail
