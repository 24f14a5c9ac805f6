// SPDX-License-Identifier: Apache-2.0
//! \file
//! What a packer is: a small value type that splits N samples into K non-empty
//! bins minimizing the makespan (max over bins and cost dimensions of the summed
//! costs), writing a `packing`. Every shipped packer is checked against this
//! concept right after its definition.
#pragma once

#include <dflop/plan/pack/cost_matrix.hpp>
#include <dflop/plan/pack/options.hpp>
#include <dflop/plan/pack/packing.hpp>
#include <dflop/plan/pack/workspace.hpp>

#include <concepts>
#include <cstddef>
#include <string_view>

namespace dflop {

//! The clauses of `packer`, named so that a diagnostic can say which one a type
//! misses (detail/concept_diagnostics.hpp); `packer` is their conjunction.
namespace concept_clauses {
//! Default-constructible and copyable: the planner makes and copies policies.
template <class P>
concept packer_semiregular = std::semiregular<P>;

//! `name()` callable on a *const* policy, convertible to `std::string_view`:
//! how every policy (partitioner, schedule, packer) says its name, e.g.
//! `static constexpr std::string_view name() noexcept { return "mine"; }`.
template <class P>
concept packer_name = requires(const P& policy) {
  { policy.name() } -> std::convertible_to<std::string_view>;
};

//! `pack(costs, bins, options, workspace, result)` can be called on a *const*
//! policy with those five argument types.
template <class P>
concept packer_pack_callable = requires(const P& policy, const cost_matrix& costs, std::size_t bins,
                                        const pack_options& options, pack_workspace& workspace, packing& result) {
  policy.pack(costs, bins, options, workspace, result);
};

//! ... and returns `void`: it fills `result` in place, reusing its memory.
template <class P>
concept packer_pack_returns_void = requires(const P& policy, const cost_matrix& costs, std::size_t bins,
                                            const pack_options& options, pack_workspace& workspace,
                                            packing& result) {
  { policy.pack(costs, bins, options, workspace, result) } -> std::same_as<void>;
};
}  // namespace concept_clauses

//! A packing policy. `p.pack(costs, K, options, workspace, result)` fills
//! `result` (reusing its memory) with a packing of every sample into exactly one
//! of K bins, none empty; throws `input_error` when N < K and `infeasible_error`
//! when the caps cannot be met. Same inputs and seed: same result. `p.name()` is
//! the name tools and reports use.
template <class P>
concept packer = concept_clauses::packer_semiregular<P> && concept_clauses::packer_name<P> &&
                 concept_clauses::packer_pack_callable<P> && concept_clauses::packer_pack_returns_void<P>;

//! Packs with `policy`, reusing `workspace`; returns the packing.
template <packer P>
[[nodiscard]] packing pack(const P& policy, const cost_matrix& costs, std::size_t bins, const pack_options& options,
                           pack_workspace& workspace) {
  packing result;
  policy.pack(costs, bins, options, workspace, result);
  return result;
}

//! Packs with `policy` and a fresh workspace (one-off calls).
template <packer P>
[[nodiscard]] packing pack(const P& policy, const cost_matrix& costs, std::size_t bins,
                           const pack_options& options = {}) {
  pack_workspace workspace;
  return pack(policy, costs, bins, options, workspace);
}

}  // namespace dflop
