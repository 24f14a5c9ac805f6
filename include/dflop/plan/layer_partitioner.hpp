// SPDX-License-Identifier: Apache-2.0
//! \file
//! The layer-partitioner policy: how a module's layers are split into
//! contiguous pipeline stages, given each layer's expected cost (the first and
//! last entries include the embedding and the head).
#pragma once

#include <dflop/plan/layer_partition.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

namespace dflop {

//! The clauses of `layer_partitioner`, named so that a diagnostic can say which
//! one a type misses (detail/concept_diagnostics.hpp); `layer_partitioner` is
//! their conjunction.
namespace concept_clauses {
//! Default-constructible and copyable: the planner makes and copies policies.
template <class P>
concept layer_partitioner_semiregular = std::semiregular<P>;

//! `name()` on a const policy, convertible to `std::string_view` (reports use it).
template <class P>
concept layer_partitioner_name = requires(const P& policy) {
  { policy.name() } -> std::convertible_to<std::string_view>;
};

//! `partition(costs, stages)` can be called on a *const* policy with a
//! `std::span<const double>` and a `std::size_t`.
template <class P>
concept layer_partitioner_partition_callable = requires(const P& policy, std::span<const double> costs,
                                                        std::size_t stages) {
  policy.partition(costs, stages);
};

//! ... and returns exactly `layer_partition`.
template <class P>
concept layer_partitioner_partition_returns_layer_partition =
    requires(const P& policy, std::span<const double> costs, std::size_t stages) {
      { policy.partition(costs, stages) } -> std::same_as<layer_partition>;
    };
}  // namespace concept_clauses

//! A policy with `name()` and `partition(layer_costs, stages) -> layer_partition`.
template <class P>
concept layer_partitioner = concept_clauses::layer_partitioner_semiregular<P> &&
                            concept_clauses::layer_partitioner_name<P> &&
                            concept_clauses::layer_partitioner_partition_callable<P> &&
                            concept_clauses::layer_partitioner_partition_returns_layer_partition<P>;

//! dflop's default: the exact min-max contiguous split (`partition_layers`).
struct min_max_layers {
  //! "min-max".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "min-max"; }
  //! See `partition_layers`.
  [[nodiscard]] layer_partition partition(std::span<const double> costs, std::size_t stages) const {
    return partition_layers(costs, stages);
  }
};
static_assert(layer_partitioner<min_max_layers>);

//! The data-blind split: equal layer counts (`partition_layers_evenly`).
struct even_layers {
  //! "even".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "even"; }
  //! See `partition_layers_evenly`.
  [[nodiscard]] layer_partition partition(std::span<const double> costs, std::size_t stages) const {
    return partition_layers_evenly(costs, stages);
  }
};
static_assert(layer_partitioner<even_layers>);

}  // namespace dflop
