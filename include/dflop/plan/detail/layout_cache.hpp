// SPDX-License-Identifier: Apache-2.0
//! \file
//! What the plan search prices per module shape and pipeline shape, once:
//! the mean cost of the sampled batches per (module, TP degree), the layer
//! split per (partitioner, module, TP, PP) and the schedule with its
//! in-flight peaks per (stages, microbatches). Thousands of candidate
//! configurations share a few hundred of these, so each cache is keyed by
//! exactly what its entry depends on.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/layer_partition.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule/activations.hpp>
#include <dflop/schedule/concept.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/workload/sample.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dflop::detail {

//! Layer costs, layer splits and schedules of one model's module and pipeline
//! shapes, priced on a set of sampled global batches (see the file comment).
//! Holds pointers to its inputs, which must outlive it.
template <cost_model Cost, schedule Schedule>
class layout_cache {
public:
  //! Prices `model` with `cost` on `batches`, ordering ops with `schedule_policy`.
  layout_cache(const multimodal_spec& model, const Cost& cost, const Schedule& schedule_policy,
               const std::vector<std::vector<sample>>& batches)
      : model_(&model), cost_(&cost), schedule_(&schedule_policy), batches_(&batches) {}

  //! Forgets every entry (the batches they were priced on changed).
  void clear() {
    batch_costs_.clear();
    partitions_.clear();
    schedules_.clear();
  }

  //! Forgets the op lists and in-flight peaks only (the schedule policy changed;
  //! prices and layer splits do not depend on it).
  void forget_schedules() { schedules_.clear(); }

  //! Layers of `kind`.
  [[nodiscard]] std::int64_t layers_of(module_kind kind) const noexcept {
    return kind == module_kind::encoder ? model_->encoder.layers : model_->llm.layers;
  }

  //! Mean over the sampled batches of the whole batch as one microbatch, per (module, tp).
  // With a fixed cost per microbatch (the throughput curve's), splitting a batch
  // never makes the parts cheaper in sum, so stage totals of the whole batch bound any packing from below.
  [[nodiscard]] const module_cost& batch_cost(module_kind kind, int tp) {
    const auto key = std::make_pair(kind, tp);
    if (auto found = batch_costs_.find(key); found != batch_costs_.end()) return found->second;
    module_cost sum;
    for (const auto& batch : *batches_) {
      const module_cost one = cost_->estimate_time(kind, tp, batch);
      sum.layer = sum.layer + one.layer;
      sum.embedding = sum.embedding + one.embedding;
      sum.head = sum.head + one.head;
    }
    const double scale = 1.0 / static_cast<double>(batches_->size());
    module_cost mean{scale * sum.layer, scale * sum.embedding, scale * sum.head};
    return batch_costs_.emplace(key, mean).first->second;
  }

  //! Expected cost of each layer (embedding on the first, head on the last), for the partitioner.
  [[nodiscard]] std::vector<double> layer_costs(module_kind kind, int tp) {
    const module_cost& cost = batch_cost(kind, tp);
    std::vector<double> costs(static_cast<std::size_t>(layers_of(kind)), cost.layer.total());
    costs.front() += cost.embedding.total();
    costs.back() += cost.head.total();
    return costs;
  }

  //! `degrees` of `kind` with its layers split by `policy` (the search's
  //! partitioner or the baselines' `even_layers`).
  template <layer_partitioner P>
  [[nodiscard]] module_plan module_plan_of(module_kind kind, const module_parallelism& degrees, const P& policy) {
    // Keyed by the policy's name: the search's partitioner and the baselines'
    // even split (or any other) never read each other's splits.
    auto key = std::make_tuple(std::string(policy.name()), kind, degrees.tp, degrees.pp);
    auto found = partitions_.find(key);
    if (found == partitions_.end())
      found = partitions_
                  .emplace(std::move(key),
                           policy.partition(layer_costs(kind, degrees.tp), static_cast<std::size_t>(degrees.pp)))
                  .first;
    return make_module_plan(degrees, found->second);
  }

  //! A schedule's op lists and the in-flight peak of each stage.
  struct schedule_entry {
    pipeline_schedule schedule;        //!< every rank's ops
    std::vector<std::uint32_t> peaks;  //!< most microbatches in flight, per stage
  };

  //! The schedule's op lists and in-flight peaks for `config`'s pipeline shape.
  // Built once per shape: memory checks of thousands of candidates need only the peaks.
  [[nodiscard]] const schedule_entry& schedule_of(const parallel_config& config) {
    // The run-ahead moves the encoder's positions' forwards: with one, the split matters.
    const auto key = std::make_tuple(config.stages(), config.microbatches,
                                     config.encoder_run_ahead > 0 ? config.encoder.pp : 0, config.encoder_run_ahead);
    if (auto found = schedules_.find(key); found != schedules_.end()) return found->second;
    plan_layout layout = make_plan_layout(config, {}, {}, *schedule_);  // rejects interleaving schedules
    auto peaks = peak_activations(layout.schedule);
    return schedules_.emplace(key, schedule_entry{std::move(layout.schedule), std::move(peaks)}).first->second;
  }

  //! The layout of `config` with its layers split by `policy`.
  template <layer_partitioner P>
  [[nodiscard]] plan_layout layout_of(const parallel_config& config, const P& policy) {
    return {config, module_plan_of(module_kind::encoder, config.encoder, policy),
            module_plan_of(module_kind::llm, config.llm, policy), schedule_of(config).schedule};
  }

private:
  const multimodal_spec* model_;
  const Cost* cost_;
  const Schedule* schedule_;
  const std::vector<std::vector<sample>>* batches_;

  // By (module, tp).
  std::map<std::pair<module_kind, int>, module_cost> batch_costs_;
  // By (partitioner name, module, tp, pp).
  std::map<std::tuple<std::string, module_kind, int, int>, layer_partition> partitions_;
  // By (stages, microbatches, encoder stages where it runs ahead, run-ahead).
  std::map<std::tuple<int, int, int, int>, schedule_entry> schedules_;
};

}  // namespace dflop::detail
