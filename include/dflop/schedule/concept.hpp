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

//! The clauses of `schedule`, named so that a diagnostic can say which one a
//! type misses (detail/concept_diagnostics.hpp); `schedule` is their conjunction.
namespace concept_clauses {
//! Copyable: plans and runners keep their own copy of the policy.
template <class T>
concept schedule_copyable = std::copyable<T>;

//! `name()` on a const policy, convertible to `std::string_view` (plans record it).
template <class T>
concept schedule_name = requires(const T& policy) {
  { policy.name() } -> std::convertible_to<std::string_view>;
};

//! `make(shape)` can be called on a *const* policy with a `schedule_shape`.
template <class T>
concept schedule_make_callable = requires(const T& policy, const schedule_shape& shape) { policy.make(shape); };

//! ... and returns exactly `pipeline_schedule`.
template <class T>
concept schedule_make_returns_pipeline_schedule = requires(const T& policy, const schedule_shape& shape) {
  { policy.make(shape) } -> std::same_as<pipeline_schedule>;
};
}  // namespace concept_clauses

//! A schedule policy: `name()` for reports and `make(shape)` building the op lists
//! for `shape.ranks` ranks and `shape.microbatches` microbatches (throwing
//! `schedule_error` for a shape it cannot serve).
template <class T>
concept schedule = concept_clauses::schedule_copyable<T> && concept_clauses::schedule_name<T> &&
                   concept_clauses::schedule_make_callable<T> &&
                   concept_clauses::schedule_make_returns_pipeline_schedule<T>;

namespace detail {
inline void require_positive_shape(const schedule_shape& shape, std::string_view policy) {
  if (shape.ranks == 0 || shape.microbatches == 0) {
    std::string text(policy);
    text.append(": needs at least one stage and one microbatch (got S=")
        .append(std::to_string(shape.ranks))
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
  result.ranks = shape.ranks;
  result.chunks = chunks;
  result.microbatches = shape.microbatches;
  result.split_backward = split_backward;
  result.rank_ops.resize(shape.ranks);
  const std::size_t per_rank = static_cast<std::size_t>(result.kinds()) * shape.microbatches * chunks;
  for (auto& ops : result.rank_ops) ops.reserve(per_rank);
  return result;
}
}  // namespace detail

}  // namespace dflop
