// SPDX-License-Identifier: Apache-2.0
//! \file
//! Compile-time diagnostics for `dflop::pipeline`'s policies: `diagnose_*<T>()`
//! walks the clauses of one concept (`dflop::concept_clauses`) in order and
//! fires one static_assert for the first clause `T` misses, whose message names
//! that clause and the signature expected. A bare `static_assert(packer<P>)`
//! only says that the whole concept failed; this says what to write.
//!
//! Each function returns true when `T` models the concept. When it does not,
//! its static_assert has already failed, so callers use the result only to
//! keep the rest of their body from repeating the error.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/schedule/concept.hpp>

#include <type_traits>

namespace dflop::detail {

//! A class that can be a base (complete, not a union, not final): only such a T
//! can be probed for a member name by ambiguity (`lacks_member_*` below).
template <class T>
concept probe_by_ambiguity = std::is_class_v<T> && requires { sizeof(T); } && !std::is_final_v<T>;

// `lacks_member_<m><T>`: T declares no member named `m` (of any kind or
// signature), so a failing clause about `m` means "missing", not "wrong
// signature". Found by ambiguity: a class deriving from T and from a base that
// declares `m` names `m` unambiguously only when T has none; overloads and
// templates count. Where T cannot be a base only a single, non-template member
// is seen (an overloaded one there reads as missing). The concept's && and ||
// keep the derived class from being instantiated for a T that cannot be a
// base. Used only to word a message, never in a concept a type must model.
#define DFLOP_DETAIL_MEMBER_PROBE(member)                                           \
  struct member_probe_base_##member {                                               \
    int member;                                                                     \
  };                                                                                \
  template <class T>                                                                \
  struct member_probe_##member : T, member_probe_base_##member {};                  \
  template <class T>                                                                \
  concept lacks_member_##member =                                                   \
      (probe_by_ambiguity<T> && requires { &member_probe_##member<T>::member; }) || \
      (!probe_by_ambiguity<T> && !requires { &T::member; });

DFLOP_DETAIL_MEMBER_PROBE(estimate_time)
DFLOP_DETAIL_MEMBER_PROBE(estimate_memory)
DFLOP_DETAIL_MEMBER_PROBE(name)
DFLOP_DETAIL_MEMBER_PROBE(partition)
DFLOP_DETAIL_MEMBER_PROBE(pack)
DFLOP_DETAIL_MEMBER_PROBE(make)
#undef DFLOP_DETAIL_MEMBER_PROBE

//! `CostModel`: `cost_model`'s clauses in order.
template <class T>
consteval bool diagnose_cost_model() {
  using namespace concept_clauses;
  if constexpr (!cost_model_estimate_time_callable<T>) {
    if constexpr (lacks_member_estimate_time<T>)
      static_assert(cost_model_estimate_time_callable<T>,
                    "dflop::pipeline: CostModel is missing `dflop::module_cost estimate_time(dflop::module_kind, int "
                    "tp, std::span<const dflop::sample> microbatch) const`");
    else
      static_assert(cost_model_estimate_time_callable<T>,
                    "dflop::pipeline: CostModel's estimate_time(...) has the wrong signature (or is not const): "
                    "expected `dflop::module_cost estimate_time(dflop::module_kind, int tp, std::span<const "
                    "dflop::sample> microbatch) const`");
    return false;
  } else if constexpr (!cost_model_estimate_time_returns_module_cost<T>) {
    static_assert(cost_model_estimate_time_returns_module_cost<T>,
                  "dflop::pipeline: CostModel's estimate_time(...) must return exactly `dflop::module_cost`");
    return false;
  } else {
    static_assert(cost_model<T>, "dflop::pipeline: CostModel: a cost_model clause without its own diagnostic");
    return true;
  }
}

//! `MemoryModel`: `memory_model`'s clauses in order.
template <class T>
consteval bool diagnose_memory_model() {
  using namespace concept_clauses;
  if constexpr (!memory_model_estimate_memory_callable<T>) {
    if constexpr (lacks_member_estimate_memory<T>)
      static_assert(memory_model_estimate_memory_callable<T>,
                    "dflop::pipeline: MemoryModel is missing `dflop::memory_breakdown "
                    "estimate_memory(dflop::module_kind, int tp, dflop::stage_slice, int in_flight, std::span<const "
                    "dflop::sample> microbatch) const`");
    else
      static_assert(memory_model_estimate_memory_callable<T>,
                    "dflop::pipeline: MemoryModel's estimate_memory(...) has the wrong signature (or is not const): "
                    "expected `dflop::memory_breakdown estimate_memory(dflop::module_kind, int tp, dflop::stage_slice, "
                    "int in_flight, std::span<const dflop::sample> microbatch) const`");
    return false;
  } else if constexpr (!memory_model_estimate_memory_returns_breakdown<T>) {
    static_assert(memory_model_estimate_memory_returns_breakdown<T>,
                  "dflop::pipeline: MemoryModel's estimate_memory(...) must return exactly `dflop::memory_breakdown`");
    return false;
  } else {
    static_assert(memory_model<T>, "dflop::pipeline: MemoryModel: a memory_model clause without its own diagnostic");
    return true;
  }
}

//! `Partitioner`: `layer_partitioner`'s clauses in order.
template <class T>
consteval bool diagnose_layer_partitioner() {
  using namespace concept_clauses;
  if constexpr (!layer_partitioner_semiregular<T>) {
    static_assert(layer_partitioner_semiregular<T>,
                  "dflop::pipeline: Partitioner must be default-constructible and copyable (std::semiregular): the "
                  "planner makes and copies it");
    return false;
  } else if constexpr (!layer_partitioner_name<T>) {
    if constexpr (lacks_member_name<T>)
      static_assert(layer_partitioner_name<T>,
                    "dflop::pipeline: Partitioner is missing `std::string_view name() const`");
    else
      static_assert(layer_partitioner_name<T>,
                    "dflop::pipeline: Partitioner's name() has the wrong signature (or is not const): expected "
                    "`std::string_view name() const` (any return convertible to std::string_view)");
    return false;
  } else if constexpr (!layer_partitioner_partition_callable<T>) {
    if constexpr (lacks_member_partition<T>)
      static_assert(layer_partitioner_partition_callable<T>,
                    "dflop::pipeline: Partitioner is missing `dflop::layer_partition partition(std::span<const "
                    "double> layer_costs, std::size_t stages) const`");
    else
      static_assert(layer_partitioner_partition_callable<T>,
                    "dflop::pipeline: Partitioner's partition(...) has the wrong signature (or is not const): "
                    "expected `dflop::layer_partition partition(std::span<const double> layer_costs, std::size_t "
                    "stages) const`");
    return false;
  } else if constexpr (!layer_partitioner_partition_returns_layer_partition<T>) {
    static_assert(layer_partitioner_partition_returns_layer_partition<T>,
                  "dflop::pipeline: Partitioner's partition(...) must return exactly `dflop::layer_partition`");
    return false;
  } else {
    static_assert(layer_partitioner<T>,
                  "dflop::pipeline: Partitioner: a layer_partitioner clause without its own diagnostic");
    return true;
  }
}

//! `Packer`: `packer`'s clauses in order.
template <class T>
consteval bool diagnose_packer() {
  using namespace concept_clauses;
  if constexpr (!packer_semiregular<T>) {
    static_assert(packer_semiregular<T>,
                  "dflop::pipeline: Packer must be default-constructible and copyable (std::semiregular): the "
                  "planner makes and copies it");
    return false;
  } else if constexpr (!packer_name<T>) {
    if constexpr (!requires { T::name; })
      static_assert(packer_name<T>,
                    "dflop::pipeline: Packer is missing `std::string_view name() const` (e.g. `static constexpr "
                    "std::string_view name() noexcept { return \"my-packer\"; }`)");
    else
      static_assert(packer_name<T>,
                    "dflop::pipeline: Packer's name must be a function, as every policy's is: `static constexpr "
                    "std::string_view name() noexcept { return \"my-packer\"; }`, not a data member");
    return false;
  } else if constexpr (!packer_pack_callable<T>) {
    if constexpr (lacks_member_pack<T>)
      static_assert(packer_pack_callable<T>,
                    "dflop::pipeline: Packer is missing `void pack(const dflop::cost_matrix&, std::size_t bins, const "
                    "dflop::pack_options&, dflop::pack_workspace&, dflop::packing&) const`");
    else
      static_assert(packer_pack_callable<T>,
                    "dflop::pipeline: Packer's pack(...) has the wrong signature (or is not const): expected `void "
                    "pack(const dflop::cost_matrix&, std::size_t bins, const dflop::pack_options&, "
                    "dflop::pack_workspace&, dflop::packing&) const`");
    return false;
  } else if constexpr (!packer_pack_returns_void<T>) {
    static_assert(packer_pack_returns_void<T>,
                  "dflop::pipeline: Packer's pack(...) must return void: it fills its `dflop::packing&` argument");
    return false;
  } else {
    static_assert(packer<T>, "dflop::pipeline: Packer: a packer clause without its own diagnostic");
    return true;
  }
}

//! `Schedule`: `schedule`'s clauses in order.
template <class T>
consteval bool diagnose_schedule() {
  using namespace concept_clauses;
  if constexpr (!schedule_copyable<T>) {
    static_assert(schedule_copyable<T>,
                  "dflop::pipeline: Schedule must be copyable (std::copyable): plans and runners keep their own copy");
    return false;
  } else if constexpr (!schedule_name<T>) {
    if constexpr (lacks_member_name<T>)
      static_assert(schedule_name<T>, "dflop::pipeline: Schedule is missing `std::string_view name() const`");
    else
      static_assert(schedule_name<T>,
                    "dflop::pipeline: Schedule's name() has the wrong signature (or is not const): expected "
                    "`std::string_view name() const` (any return convertible to std::string_view)");
    return false;
  } else if constexpr (!schedule_make_callable<T>) {
    if constexpr (lacks_member_make<T>)
      static_assert(schedule_make_callable<T>,
                    "dflop::pipeline: Schedule is missing `dflop::pipeline_schedule make(const dflop::schedule_shape&) "
                    "const`");
    else
      static_assert(schedule_make_callable<T>,
                    "dflop::pipeline: Schedule's make(...) has the wrong signature (or is not const): expected "
                    "`dflop::pipeline_schedule make(const dflop::schedule_shape&) const`");
    return false;
  } else if constexpr (!schedule_make_returns_pipeline_schedule<T>) {
    static_assert(schedule_make_returns_pipeline_schedule<T>,
                  "dflop::pipeline: Schedule's make(...) must return exactly `dflop::pipeline_schedule` (the "
                  "per-rank op lists)");
    return false;
  } else {
    static_assert(schedule<T>, "dflop::pipeline: Schedule: a schedule clause without its own diagnostic");
    return true;
  }
}

}  // namespace dflop::detail
