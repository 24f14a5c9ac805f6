// SPDX-License-Identifier: Apache-2.0
//! \file
//! Per-step machinery both executors share: the wrapper that stops every rank
//! when a step fails, the stage call that turns a stage's exception into a
//! `stage_failure`, op timing, the data-parallel gradient sum and the step's close.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/detail/gradient_overlap.hpp>
#include <dflop/exec/detail/stage_dispatch.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/exec/step_result.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <type_traits>
#include <utility>
#include <vector>

namespace dflop::detail {

//! Runs `body()`; on any failure but `pipeline_aborted` (another rank's), aborts
//! `world` (stopping every rank) before rethrowing.
template <class Communicator, class Body>
decltype(auto) guarded_step(Communicator& world, Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (const pipeline_aborted&) {
    throw;
  } catch (...) {
    world.abort(std::current_exception());
    throw;
  }
}

//! Runs op `ctx.kind` on the stage `slot` holds; a throw becomes a `stage_failure`
//! naming `rank`, the stage, the op and the microbatch.
template <class Slot, class Context>
void call_stage(int rank, Slot& slot, Context& ctx, bool run_weight_after_backward) {
  try {
    with_stage(slot, [&](auto& stage) { run_stage_op(stage, ctx, run_weight_after_backward); });
  } catch (const std::exception& e) {
    throw stage_failure(rank, ctx.stage, ctx.kind, ctx.microbatch, e.what());
  } catch (...) {
    throw stage_failure(rank, ctx.stage, ctx.kind, ctx.microbatch, "unknown exception");
  }
}

//! `group.reduce_scatter_sum` / `group.all_gather` where the communicator has
//! them; the unconstrained overloads are never reached (callers derive
//! `gradient_reduction::reduce_scatter` from `can_shard` first) and keep every
//! executor compiling without them.
template <class Communicator>
  requires shards_gradients<Communicator>
void reduce_scatter(Communicator& group, const gradient_buffer& buffer) {
  group.reduce_scatter_sum(buffer, group.resource());
}
template <class Communicator>
void reduce_scatter(Communicator&, const gradient_buffer&) {
  throw error("reduce_scatter_sum: this communicator cannot split a sum over its members");
}
template <class Communicator>
  requires shards_gradients<Communicator>
void gather(Communicator& group, const gradient_buffer& buffer) {
  group.all_gather(buffer, group.resource());
}
template <class Communicator>
void gather(Communicator&, const gradient_buffer&) {
  throw error("all_gather: this communicator cannot gather shards");
}

//! Whether `Stage`'s optimizer can be sharded over `Communicator` (the stage
//! exposes its parameters and the communicator splits sums).
template <class Communicator, class Stage>
inline constexpr bool can_shard = shards_gradients<Communicator> && has_parameters<Stage>;

//! How the gradients of the stage `slot` holds are summed: reduce-scattered when
//! the plan `shard`s its optimizer and `can_shard`, else all-reduced. The stage's
//! type decides, so an executor derives it once.
template <class Communicator, class Slot>
gradient_reduction reduction_for(Slot& slot, bool shard) {
  return with_stage(slot, [&](auto& stage) {
    return shard && can_shard<Communicator, std::remove_cvref_t<decltype(stage)>> ? gradient_reduction::reduce_scatter
                                                                                  : gradient_reduction::all_reduce;
  });
}

//! Sums the gradients of the stage `slot` holds over `group` (in member order) as
//! `how` says (reduce-scattered: this member's shard and the common remainder get
//! the sum), except the buffers `already_started(buffer)` says have their sum under way.
template <class Communicator, class Slot, class Started>
void sum_gradients(Communicator& group, Slot& slot, gradient_reduction how, Started&& already_started) {
  with_stage(slot, [&](auto& stage) {
    for_each_gradient(stage.gradients(), [&](const gradient_buffer& g) {
      if (already_started(g)) return;
      if (how == gradient_reduction::reduce_scatter) reduce_scatter(group, g);
      else group.all_reduce_sum(g, group.resource());
    });
  });
}

//! Gathers the parameters of the stage `slot` holds over `group` (each member's
//! shard, updated by its optimizer, to every member) when its gradients are
//! reduce-scattered (`how`).
template <class Communicator, class Slot>
void gather_parameters(Communicator& group, Slot& slot, gradient_reduction how) {
  if (how != gradient_reduction::reduce_scatter) return;
  with_stage(slot, [&](auto& stage) {
    if constexpr (has_parameters<std::remove_cvref_t<decltype(stage)>>)
      for_each_gradient(stage.parameters(), [&](const gradient_buffer& p) { gather(group, p); });
  });
}

//! The step's clock: seconds since its start, and op times when asked for.
class step_clock {
public:
  //! Starts the clock (at `start`: when the step began); records op times into `result` when `record`.
  step_clock(bool record, step_result& result,
             std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now()) noexcept
      : start_(start), record_(record), result_(&result) {}
  //! Seconds since the start.
  [[nodiscard]] double seconds() const noexcept {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  //! Before a stage call: its start time (0 when not recording).
  [[nodiscard]] double op_begin() const noexcept { return record_ ? seconds() : 0.0; }
  //! After it: records the op (when recording).
  void op_end(op_kind kind, std::uint32_t microbatch, std::uint32_t stage, double begin) {
    if (record_) result_->op_times.push_back({kind, microbatch, stage, begin, seconds()});
  }

private:
  std::chrono::steady_clock::time_point start_;
  bool record_;
  step_result* result_;
};

//! Ends a step on every rank alike: the loss summed over `world` (this rank adds
//! its microbatches' `losses` when it `holds_loss`), the pool blocks it had to
//! allocate and the step's wall time go into `result`, which is returned.
template <class Communicator>
step_result close_step(Communicator& world, bool holds_loss, const std::vector<double>& losses,
                       std::size_t new_buffers, const step_clock& clock, step_result& result) {
  double local = 0;
  if (holds_loss)
    for (double value : losses) local += value;
  result.loss = world.all_reduce_value(local);
  result.new_buffers = new_buffers;
  result.seconds = clock.seconds();
  return std::move(result);
}

}  // namespace dflop::detail
