// SPDX-License-Identifier: Apache-2.0
//! \file
//! Calls on a stage held either directly or in a `std::variant` of stage types,
//! shared by the executor and the sequential reference.
#pragma once

#include <dflop/exec/stage.hpp>

#include <type_traits>
#include <utility>
#include <variant>

namespace dflop::detail {

template <class First, class... Rest>
struct first_type {
  using type = First;
};
//! The stage type an executor holds: the one stage type, or a variant of several.
template <class... Stages>
using stage_slot_t =
    std::conditional_t<sizeof...(Stages) == 1, typename first_type<Stages...>::type, std::variant<Stages...>>;

//! The stage type of an executor over `Stages...` whose stages receive
//! `Context`, after each stage type is checked member by member
//! (`check_stage`: a stage missing one gets a message naming it).
template <class Context, class... Stages>
struct checked_stage_slot {
  static_assert(sizeof...(Stages) > 0, "dflop: an executor needs at least one stage type");
  static_assert((check_stage<Stages, Context>() && ...));
  using type = stage_slot_t<Stages...>;  //!< the one stage type, or a variant of them
};

template <class T>
inline constexpr bool is_variant = false;
template <class... T>
inline constexpr bool is_variant<std::variant<T...>> = true;

//! Calls `f(stage)` on the stage `slot` holds.
template <class Slot, class F>
decltype(auto) with_stage(Slot& slot, F&& f) {
  if constexpr (is_variant<std::remove_const_t<Slot>>) return std::visit(std::forward<F>(f), slot);
  else return std::forward<F>(f)(slot);
}

//! Runs the op `ctx.kind` on `stage`: forward, backward (then `weight` when
//! `run_weight_after_backward` and the stage has one) or weight (a no-op for a
//! stage without a weight pass: its backward did the work).
template <class Stage, class Context>
void run_stage_op(Stage& stage, Context& ctx, bool run_weight_after_backward) {
  if constexpr (pipeline_stage<Stage, Context>) {
    switch (ctx.kind) {
      case op_kind::forward: stage.forward(ctx); break;
      case op_kind::backward:
        stage.backward(ctx);
        if constexpr (has_weight_pass<Stage, Context>)
          if (run_weight_after_backward) stage.weight(ctx);
        break;
      case op_kind::weight:
        if constexpr (has_weight_pass<Stage, Context>) stage.weight(ctx);
        break;
    }
  }
}

}  // namespace dflop::detail
