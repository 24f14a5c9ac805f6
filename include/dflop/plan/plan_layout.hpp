// SPDX-License-Identifier: Apache-2.0
//! \file
//! Everything fixed about an iteration once a configuration is chosen: the
//! degrees, each module's layer split, the schedule's op lists and the ranks'
//! placement. Per-batch work (packing, ordering, costs) hangs off this.
#pragma once

#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/rank_layout.hpp>
#include <dflop/schedule/concept.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/run_ahead.hpp>

#include <string>
#include <string_view>

namespace dflop {

//! A configuration made concrete: module plans plus the one-chunk schedule over
//! the combined pipeline (encoder stages first).
struct plan_layout {
  parallel_config config;      //!< degrees and microbatches
  module_plan encoder;         //!< encoder degrees and layer split
  module_plan llm;             //!< LLM degrees and layer split
  pipeline_schedule schedule;  //!< op lists per pipeline position (encoder.pp + llm.pp of them)

  //! Pipeline position of a module's stage.
  [[nodiscard]] int position(module_kind kind, int stage) const noexcept {
    return kind == module_kind::encoder ? stage : config.encoder.pp + stage;
  }
};

//! Builds the layout for `config` with the given layer splits and the op lists
//! of `policy` over the combined pipeline, its encoder positions running
//! `config.encoder_run_ahead` forwards further ahead. Multimodal pipelines take
//! one-chunk schedules; a policy producing more chunks is rejected, and so is
//! a negative run-ahead or one without an encoder.
template <schedule Policy>
[[nodiscard]] plan_layout make_plan_layout(const parallel_config& config, module_plan encoder, module_plan llm,
                                           const Policy& policy) {
  if (config.encoder_run_ahead < 0 || (config.encoder_run_ahead > 0 && !config.has_encoder()))
    throw input_error("parallel_config::encoder_run_ahead", 0,
                      "must be 0, or positive with an encoder; got " + std::to_string(config.encoder_run_ahead) +
                          (config.has_encoder() ? "" : " without an encoder"));
  plan_layout layout{config, std::move(encoder), std::move(llm), {}};
  layout.schedule = policy.make(
      schedule_shape{static_cast<std::uint32_t>(config.stages()), static_cast<std::uint32_t>(config.microbatches)});
  if (layout.schedule.chunks != 1) {
    std::string text("schedule '");
    text.append(policy.name()).append("' interleaves model chunks; multimodal plans take one-chunk schedules");
    throw input_error("schedule", 0, text);
  }
  if (config.encoder_run_ahead > 0)
    layout.schedule = with_run_ahead(std::move(layout.schedule), static_cast<std::uint32_t>(config.encoder.pp),
                                     static_cast<std::uint32_t>(config.encoder_run_ahead));
  return layout;
}

//! The layout of `method` (dflop's choice or a baseline) of `chosen`, with
//! `policy`'s op lists: what a runner runs and a batch is scheduled for. Throws
//! `input_error` when `policy` is not the schedule the plan was made with, the
//! plan has no such method, or the method's GPUs are not the plan's cluster.
template <schedule Policy>
[[nodiscard]] plan_layout make_plan_layout(const plan& chosen, plan_method method, const Policy& policy) {
  if (policy.name() != chosen.schedule)
    throw input_error("schedule", 0,
                      "the plan was made for schedule '" + chosen.schedule + "', the schedule policy is '" +
                          std::string(policy.name()) + "'");
  const method_result& run = chosen.method(method);
  if (run.config.gpus() != chosen.cluster.gpus)
    throw input_error("plan", 0,
                      "method '" + std::string(name_of(run.method)) + "' uses " + std::to_string(run.config.gpus()) +
                          " GPUs, the plan's cluster has " + std::to_string(chosen.cluster.gpus));
  return make_plan_layout(run.config, run.encoder, run.llm, policy);
}

}  // namespace dflop
