// SPDX-License-Identifier: Apache-2.0
//! \file
//! The shipped schedule policies by their names, for command lines and configs,
//! and "auto", which leaves the choice to the planner.
#pragma once

#include <dflop/error.hpp>
#include <dflop/schedule/gpipe.hpp>
#include <dflop/schedule/interleaved_1f1b.hpp>
#include <dflop/schedule/one_f_one_b.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/zero_bubble_h1.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace dflop {

//! Names of the shipped schedules: "gpipe", "1f1b", "interleaved", "zb-h1".
inline constexpr std::array<std::string_view, 4> schedule_names{gpipe::name(), one_f_one_b::name(),
                                                                interleaved_1f1b::name(), zero_bubble_h1::name()};

//! Builds the shipped schedule called `name` for `shape`; `chunks` is used by
//! "interleaved" only (others need 1). Throws `schedule_error` for an unknown name
//! or a shape the policy cannot serve.
[[nodiscard]] inline pipeline_schedule make_schedule(std::string_view name, const schedule_shape& shape,
                                                     std::uint32_t chunks = 1) {
  if (name == interleaved_1f1b::name()) return interleaved_1f1b{chunks}.make(shape);
  if (chunks != 1) {
    std::string text("schedule '");
    text.append(name).append("' has one chunk per rank (only 'interleaved' takes more)");
    throw schedule_error(text);
  }
  if (name == gpipe::name()) return gpipe{}.make(shape);
  if (name == one_f_one_b::name()) return one_f_one_b{}.make(shape);
  if (name == zero_bubble_h1::name()) return zero_bubble_h1{}.make(shape);
  std::string text("unknown schedule '");
  text.append(name).append("' (known:");
  for (auto known : schedule_names) text.append(" ").append(known);
  text.append(")");
  throw schedule_error(text);
}

//! A schedule chosen at run time by name (a command-line flag): models the
//! `schedule` concept by forwarding to `make_schedule`. The name `automatic`
//! ("auto") asks the planner to choose: `make_plan` plans under each of
//! `planner_options::schedule_candidates` and records the fastest in
//! `plan::schedule`; it builds no op lists itself.
class named_schedule {
public:
  //! The name that leaves the choice to the planner.
  static constexpr std::string_view automatic = "auto";

  //! \param name one of `schedule_names`  \param chunks model chunks per rank ("interleaved" only)
  named_schedule() = default;
  explicit named_schedule(std::string name, std::uint32_t chunks = 1) : name_(std::move(name)), chunks_(chunks) {}

  //! The schedule's name.
  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  //! Whether the planner chooses the schedule (the name is `automatic`).
  [[nodiscard]] bool is_automatic() const noexcept { return name_ == automatic; }
  //! Builds the op lists (throws `schedule_error` for an unknown name or unsupported
  //! shape, and for "auto", which only the planner resolves).
  [[nodiscard]] pipeline_schedule make(const schedule_shape& shape) const {
    if (is_automatic())
      throw schedule_error("schedule 'auto' is chosen by the planner (make_plan); schedule batches with the "
                           "plan's schedule (plan::schedule)");
    return make_schedule(name_, shape, chunks_);
  }

private:
  std::string name_{one_f_one_b::name()};
  std::uint32_t chunks_ = 1;
};
static_assert(schedule<named_schedule>);

//! Whether `name` is a shipped schedule with one model chunk per rank ("gpipe",
//! "1f1b", "zb-h1"): the schedules a multimodal plan runs.
[[nodiscard]] inline bool is_one_chunk_schedule(std::string_view name) noexcept {
  return name != interleaved_1f1b::name() &&
         std::find(schedule_names.begin(), schedule_names.end(), name) != schedule_names.end();
}

//! The schedule a multimodal plan can use, by name: "auto" (the planner
//! chooses) or a one-chunk schedule ("gpipe", "1f1b", "zb-h1"); anything else
//! throws `input_error` naming `parameter` (a flag or argument name).
[[nodiscard]] inline named_schedule plannable_schedule(const std::string& name, const std::string& parameter) {
  if (name == named_schedule::automatic || is_one_chunk_schedule(name)) return named_schedule(name);
  throw input_error(parameter, 0, "'" + name + "' is neither 'auto' nor a one-chunk schedule (gpipe, 1f1b, zb-h1)");
}

}  // namespace dflop
