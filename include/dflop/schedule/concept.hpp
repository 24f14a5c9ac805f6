// SPDX-License-Identifier: Apache-2.0
//! \file
//! The `schedule` concept: a small policy value that turns a pipeline shape into
//! per-rank operation lists. Users plug in their own by modelling it.
#pragma once

#include <dflop/schedule/op.hpp>

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

namespace dflop {

//! A schedule policy: `name()` for reports and `make(shape)` building the op lists
//! for `shape.stages` ranks and `shape.microbatches` microbatches (throwing
//! `schedule_error` for a shape it cannot serve).
template <class T>
concept schedule = std::copyable<T> && requires(const T& policy, const schedule_shape& shape) {
  { policy.name() } -> std::convertible_to<std::string_view>;
  { policy.make(shape) } -> std::same_as<pipeline_schedule>;
};

namespace detail {
inline void require_positive_shape(const schedule_shape& shape, std::string_view policy) {
  if (shape.stages == 0 || shape.microbatches == 0) {
    std::string text(policy);
    text.append(": needs at least one stage and one microbatch (got S=")
        .append(std::to_string(shape.stages))
        .append(", m=")
        .append(std::to_string(shape.microbatches))
        .append(")");
    throw schedule_error(text);
  }
}

inline pipeline_schedule empty_schedule(std::string_view name, const schedule_shape& shape, std::uint32_t chunks,
                                        bool split_backward) {
  pipeline_schedule result;
  result.name = std::string(name);
  result.ranks = shape.stages;
  result.chunks = chunks;
  result.microbatches = shape.microbatches;
  result.split_backward = split_backward;
  result.rank_ops.resize(shape.stages);
  const std::size_t per_rank = static_cast<std::size_t>(result.kinds()) * shape.microbatches * chunks;
  for (auto& ops : result.rank_ops) ops.reserve(per_rank);
  return result;
}
}  // namespace detail

}  // namespace dflop
