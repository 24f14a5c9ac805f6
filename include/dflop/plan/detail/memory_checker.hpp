// SPDX-License-Identifier: Apache-2.0
//! \file
//! Whether a configuration fits in GPU memory: the bytes of every stage with
//! given microbatches and the schedule's in-flight peaks, by dflop's rule and
//! by the DFLOP reference's; the memory savers to try when it does not fit;
//! and the closest miss, to say why nothing fits.
#pragma once

#include <dflop/cost/memory_model.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/detail/sampled_batches.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/planner_options.hpp>
#include <dflop/plan/stage_memories.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace dflop::detail {

// `dflop::stage_memory` (a plan's bytes per stage) is written qualified: the
// executors' `detail::stage_memory` (their allocator) would hide it here.

//! Largest stage memory of `stages`, GiB.
[[nodiscard]] inline double peak_gib(const std::vector<dflop::stage_memory>& stages) {
  double peak = 0;
  for (const auto& stage : stages) peak = std::max(peak, static_cast<double>(stage.bytes.total()));
  return peak / (1 << 30);
}

//! Memory checks of one model's configurations on one cluster; layer splits
//! and in-flight peaks come from a `layout_cache` (`Layouts`). Holds pointers
//! to its inputs, which must outlive it.
template <memory_model Memory, class Layouts>
class memory_checker {
public:
  //! Checks `model` on `cluster` with `memory`, `options`' headroom and `layouts`' splits and peaks.
  memory_checker(const multimodal_spec& model, const cluster_spec& cluster, const Memory& memory,
                 const planner_options& options, Layouts& layouts)
      : model_(&model), cluster_(&cluster), memory_(&memory), options_(&options), layouts_(&layouts) {}

  //! Usable bytes per GPU: its memory less the headroom.
  [[nodiscard]] double capacity() const noexcept {
    return static_cast<double>(cluster_->gpu.memory_bytes) * (1.0 - options_->memory_headroom);
  }

  //! Memory of every stage of `config` (layers split by `policy`) with the tail
  //! microbatches and the schedule's in-flight peaks; builds no op lists.
  template <layer_partitioner P>
  [[nodiscard]] std::vector<dflop::stage_memory> stage_memories(const parallel_config& config, const P& policy,
                                                                const microbatch_views& tails) {
    const auto& peaks = layouts_->schedule_of(config).peaks;
    return price_stage_memories(*memory_, layouts_->module_plan_of(module_kind::encoder, config.encoder, policy),
                                layouts_->module_plan_of(module_kind::llm, config.llm, policy), peaks, tails.encoder,
                                tails.llm);
  }

  //! Bytes by which the worst stage exceeds usable memory (<= 0: fits).
  template <layer_partitioner P>
  [[nodiscard]] double memory_shortfall(const parallel_config& config, const P& policy, const microbatch_views& tails) {
    double worst = -std::numeric_limits<double>::infinity();
    for (const auto& stage : stage_memories(config, policy, tails))
      worst = std::max(worst, static_cast<double>(stage.bytes.total()) - capacity());
    return worst;
  }

  //! `memory_shortfall` by the DFLOP reference's rule: even layers, and one
  //! microbatch in flight (it ignores how many 1F1B keeps).
  [[nodiscard]] double reference_memory_shortfall(const parallel_config& config, const microbatch_views& microbatches) {
    double worst = -std::numeric_limits<double>::infinity();
    for (module_kind kind : all_module_kinds) {
      const module_plan plan =
          layouts_->module_plan_of(kind, kind == module_kind::encoder ? config.encoder : config.llm, even_layers{});
      const auto& samples = kind == module_kind::encoder ? microbatches.encoder : microbatches.llm;
      for (int s = 0; s < plan.degrees.pp; ++s)
        worst = std::max(worst, static_cast<double>(estimate_memory_with(*memory_, kind, plan.degrees.tp,
                                                                         plan.slice(s), 1, samples,
                                                                         memory_choices_of(plan.degrees))
                                                        .total()) -
                                    capacity());
    }
    return worst;
  }

  //! The variants of `base` the search tries, fastest first; the first whose
  //! tail microbatches fit is the one scored. In order: `base` with the
  //! distributed optimizer on every module with replicas (it holds less and is
  //! faster: its reduce-scatter moves half an all-reduce's bytes, in buckets
  //! under the last B like the all-reduce, and the other half, the parameter
  //! gather, runs before each rank's first op, which waits for its inputs
  //! anyway), then activation recomputation (one more forward) of the encoder,
  //! of the LLM, of both. Only a memory model that prices `memory_choices` gets
  //! more than `base` as it is.
  [[nodiscard]] std::vector<parallel_config> memory_variants(const parallel_config& base) const {
    std::vector<parallel_config> variants{base};
    if constexpr (memory_model_with_choices<Memory>) {
      parallel_config sharded = base;
      sharded.encoder.distributed_optimizer = base.encoder.dp > 1;
      sharded.llm.distributed_optimizer = base.llm.dp > 1;
      variants.front() = sharded;
      for (const auto& [encoder, llm] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
        parallel_config saver = sharded;
        saver.encoder.recompute = encoder;
        saver.llm.recompute = llm;
        variants.push_back(saver);
      }
    }
    return variants;
  }

  //! `config` with each recomputing module recomputing the fewest layers per
  //! stage (`module_parallelism::recompute_layers`; at least the count it has,
  //! from one layer when it recomputes all)
  //! with which every microbatch of `samples` fits; nullopt when even full
  //! recomputation does not. Every recomputed layer costs its forward again, so
  //! fewer is faster. From one recomputed layer on, each more keeps an input
  //! instead of a layer's full set, so memory only falls and a bisection finds
  //! the count; the modules' stages are apart, so each module is bisected alone.
  //! All of a module's layers is written as 0 (full recomputation).
  template <layer_partitioner P>
  [[nodiscard]] std::optional<parallel_config> fewest_recomputed_layers(parallel_config config, const P& policy,
                                                                        std::span<const microbatch_views> samples) {
    const auto fits = [&](const parallel_config& candidate) {
      return std::all_of(samples.begin(), samples.end(), [&](const microbatch_views& microbatch) {
        return memory_shortfall(candidate, policy, microbatch) <= 0;
      });
    };
    for (module_kind kind : all_module_kinds) {
      module_parallelism& degrees = kind == module_kind::encoder ? config.encoder : config.llm;
      if (!degrees.recompute) continue;
      const module_plan plan = layouts_->module_plan_of(kind, degrees, policy);
      std::int64_t most = 0;  // the largest stage's layers: recomputing that many is full recomputation
      for (int s = 0; s < degrees.pp; ++s) most = std::max(most, plan.slice(s).layers);
      const auto with = [&](std::int64_t layers) {
        parallel_config candidate = config;
        (kind == module_kind::encoder ? candidate.encoder : candidate.llm).recompute_layers =
            layers >= most ? 0 : static_cast<int>(layers);
        return candidate;
      };
      std::int64_t high = most;  // fits (checked next); the answer is in [low, high]
      if (!fits(with(high))) return std::nullopt;
      std::int64_t low = std::min<std::int64_t>(std::max(degrees.recompute_layers, 1), high);
      if (fits(with(low))) {
        high = low;
      } else {
        while (high - low > 1) {  // low misses, high fits
          const std::int64_t middle = low + (high - low) / 2;
          (fits(with(middle)) ? high : low) = middle;
        }
      }
      config = with(high);
    }
    return config;
  }

  //! The first memory variant after `config` (of its base configuration) whose
  //! `tails` fit with even layers.
  [[nodiscard]] std::optional<parallel_config> next_fitting_variant(const parallel_config& config,
                                                                    const microbatch_views& tails) {
    const auto variants = memory_variants(without_memory_savers(config));
    auto at = std::find(variants.begin(), variants.end(), config);
    if (at == variants.end()) return std::nullopt;
    for (++at; at != variants.end(); ++at)
      if (memory_shortfall(*at, even_layers{}, tails) <= 0) return *at;
    return std::nullopt;
  }

  //! Remembers `config` when it misses memory by less than any before it.
  void note_miss(const parallel_config& config, double shortfall) {
    if (shortfall > 0 && (!closest_miss_ || shortfall < closest_miss_->second)) closest_miss_ = {config, shortfall};
  }

  //! Why nothing fits: the usable memory and the closest miss noted.
  [[nodiscard]] std::string closest_miss_text() const {
    std::string text = "no configuration of " + model_->name + " on " + std::to_string(cluster_->gpus) + " x " +
                       cluster_->gpu.name + " fits in memory (" + detail::format_fixed(capacity() / (1 << 30), 1) +
                       " GiB usable per GPU)";
    if (closest_miss_) {
      std::ostringstream config;
      config << closest_miss_->first;
      text += "; closest: " + config.str() + ", short by " +
              detail::format_fixed(closest_miss_->second / (1 << 30), 2) + " GiB on its fullest stage";
    }
    return text;
  }

private:
  const multimodal_spec* model_;
  const cluster_spec* cluster_;
  const Memory* memory_;
  const planner_options* options_;
  Layouts* layouts_;
  std::optional<std::pair<parallel_config, double>> closest_miss_;
};

}  // namespace dflop::detail
