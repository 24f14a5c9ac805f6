// SPDX-License-Identifier: Apache-2.0
//! \file
//! The shipped schedule policies by their names, for command lines and configs.
#pragma once

#include <dflop/schedule/gpipe.hpp>
#include <dflop/schedule/interleaved_1f1b.hpp>
#include <dflop/schedule/one_f_one_b.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/zero_bubble_h1.hpp>

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
//! `schedule` concept by forwarding to `make_schedule`.
class named_schedule {
public:
  //! \param name one of `schedule_names`  \param chunks model chunks per rank ("interleaved" only)
  named_schedule() = default;
  explicit named_schedule(std::string name, std::uint32_t chunks = 1) : name_(std::move(name)), chunks_(chunks) {}

  //! The schedule's name.
  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  //! Builds the op lists (throws `schedule_error` for an unknown name or unsupported shape).
  [[nodiscard]] pipeline_schedule make(const schedule_shape& shape) const { return make_schedule(name_, shape, chunks_); }

private:
  std::string name_{one_f_one_b::name()};
  std::uint32_t chunks_ = 1;
};
static_assert(schedule<named_schedule>);

}  // namespace dflop
