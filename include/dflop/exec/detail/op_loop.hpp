// SPDX-License-Identifier: Apache-2.0
//! \file
//! The op loop both executors run, written once: per op, post the receives a few
//! ops ahead, reap finished sends, fill the stage context, wait for the op's
//! inputs, lend it output and gradient blocks from the pool, call the stage
//! (timed), hand the results on, release what the microbatch no longer needs;
//! after the last op, reap every send, sum gradients over the data-parallel
//! group and close the step. What differs between the single-module and the
//! multimodal executor is only where a microbatch's data comes from and goes to,
//! which the derived executor says through these members (CRTP):
//!
//! - `op_record<C>& record_for(const pipeline_op&)`: the op's buffers;
//! - `microbatch_view samples_for(const pipeline_op&)`: the op's samples;
//! - `stage_slot& stage_for(const pipeline_op&)`: the stage that runs it;
//! - `void describe(context&, const pipeline_op&)`: stage, stages, replica and TP fields;
//! - `std::size_t output_bytes_for(const pipeline_op&, const microbatch_view&)`;
//! - `void before_call(const pipeline_op&, op_record<C>&)`: after the inputs arrived (TP broadcast);
//! - `void forwarded(const pipeline_op&, pooled_buffer& output)`: send or hand over F's output;
//! - `void backpropagated(const pipeline_op&, pooled_buffer& input_grad)`: likewise B's input gradient;
//! - `Communicator& gradient_group()`: the data-parallel group its stages' gradients are summed over;
//! - `gradient_reduction reduction()`: how the stage's gradients are summed (buffers said final start it at once);
//! - `void sum_gradients()` and `bool holds_loss()`: the step's close (`sum_gradients`
//!   skips the buffers whose sums `overlap_` started during the step).
//!
//! This header is the executors' common ground: an executor derives from
//! `op_loop<Communicator, itself, Stages...>` and gets from it the context and
//! stage-slot types and the vocabulary below (errors, buffers, the
//! communicator concept, stages, step results, schedule ops).
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/buffer_pool.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/detail/gradient_overlap.hpp>
#include <dflop/exec/detail/pool_memory.hpp>
#include <dflop/exec/detail/step_receives.hpp>
#include <dflop/exec/detail/send_queue.hpp>
#include <dflop/exec/detail/stage_dispatch.hpp>
#include <dflop/exec/detail/step_runtime.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/exec/step_result.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/validate.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace dflop::detail {

//! The shared step of `Derived` (an executor over `Communicator` running
//! `Stages...`; see the file comment).
template <class Communicator, class Derived, class... Stages>
class op_loop {
public:
  //! The context the stages receive.
  using context = basic_stage_context<typename Communicator::resource_type>;
  //! How the executor holds a stage: the one stage type, or a variant of
  //! `Stages...`, each type checked member by member first (`checked_stage_slot`).
  using stage_type = typename checked_stage_slot<context, Stages...>::type;

  //! Blocks the buffer pool holds.
  [[nodiscard]] std::size_t pool_buffers() const noexcept { return pool_.allocations(); }

protected:
  using record = op_record<Communicator>;

  op_loop(Communicator& world, executor_options options)
      : world_(&world), options_(options), pool_(world), sends_(pool_) {
    world.set_watchdog(options.watchdog_seconds);
  }

  //! Validates `schedule` once per distinct schedule (op lists are checked for
  //! deadlocks and completeness) and checks that `tags` message tags fit the communicator.
  void check_schedule(const pipeline_schedule& schedule, std::uint64_t tags, const char* who) {
    if (schedule != validated_) {
      validate(schedule);
      validated_ = schedule;
    }
    if (tags > static_cast<std::uint64_t>(world_->max_tag()))
      throw error(std::string(who) + ": " + std::to_string(tags) + " message tags exceed the communicator's limit " +
                  std::to_string(world_->max_tag()));
  }

  //! Starts the step's clock: before checking and planning, which are part of the step.
  void start_clock() noexcept { started_ = std::chrono::steady_clock::now(); }

  //! Starts a step of `schedule` with `records` op records.
  void begin_step(const pipeline_schedule& schedule, std::size_t records) {
    m_ = schedule.microbatches;
    split_ = schedule.split_backward;
    records_.resize(records);
    losses_.assign(m_, 0.0);
    receives_.clear();
    if constexpr (matches_in_order<Communicator>) {
      // Each op's index in its rank's list: an in-order communicator matches a
      // receive to the sender's posting order, so receives are planned in it.
      position_.assign(3 * static_cast<std::size_t>(m_) * schedule.stages(), 0);
      for (const auto& list : schedule.rank_ops)
        for (std::size_t i = 0; i < list.size(); ++i) position_[op_slot(schedule, list[i])] = i;
    }
  }

  //! Where `op` sits in its rank's list (0 for communicators that match by tag).
  [[nodiscard]] std::size_t sent_at(const pipeline_schedule& schedule, const pipeline_op& op) const noexcept {
    if constexpr (matches_in_order<Communicator>) return position_[op_slot(schedule, op)];
    else return 0;
  }

  //! Sends `bytes` (inside `block`) to `peer` with `tag`; `block` stays lent until the send completes.
  void send(std::span<const std::byte> bytes, const pooled_buffer& block, int peer, int tag) {
    sends_.send(*world_, peer, tag, bytes, block);
    ++result_.messages_sent;
  }

  //! Runs `ops` (this rank's list of `schedule`, with receives planned) and closes the step.
  step_result run_ops(const pipeline_schedule& schedule, std::span<const pipeline_op> ops) {
    auto& self = static_cast<Derived&>(*this);
    result_ = {};
    step_clock clock(options_.record_op_times, result_, started_);
    const std::size_t buffers_before = pool_.allocations();
    if (options_.record_op_times) result_.op_times.reserve(ops.size());
    const std::uint32_t last = schedule.stages() - 1;
    pool_memory<Communicator> mem(pool_);
    mark_final_gradient_ops(schedule, ops);
    overlap_.begin_step(self.gradient_group(), self.reduction());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      result_.messages_received += receives_.post_until(i + options_.receive_lookahead, *world_, pool_, records_);
      if (!sends_.empty()) sends_.reap(*world_, false);
      const pipeline_op& op = ops[i];
      record& rec = self.record_for(op);
      const microbatch_view mb = self.samples_for(op);
      context ctx;
      ctx.kind = op.kind;
      ctx.microbatch = op.microbatch;
      ctx.rank = world_->rank();
      ctx.samples = mb;
      ctx.resource = world_->resource();
      ctx.memory = &mem;
      ctx.final_gradients = final_op_[op.stage] == i;
      ctx.gradient_sink = &overlap_;
      self.describe(ctx, op);
      mem.stash_ = &rec.stash;
      wait_all(*world_, rec.input_requests, ctx.resource);
      ctx.input = rec.input.bytes();
      switch (op.kind) {
        case op_kind::forward: {
          self.before_call(op, rec);
          pooled_buffer output = op.stage < last ? pool_.acquire(self.output_bytes_for(op, mb)) : pooled_buffer{};
          ctx.output = output.bytes();
          call(op, ctx, clock);
          if (op.stage == last) losses_[op.microbatch] = ctx.loss;
          else self.forwarded(op, output);
          sends_.release(output);
          break;
        }
        case op_kind::backward: {
          wait_all(*world_, rec.grad_requests, ctx.resource);
          self.before_call(op, rec);
          ctx.output_grad = rec.output_grad.bytes();
          pooled_buffer input_grad = op.stage > 0 ? pool_.acquire(rec.input.size) : pooled_buffer{};
          ctx.input_grad = input_grad.bytes();
          call(op, ctx, clock);
          if (op.stage > 0) self.backpropagated(op, input_grad);
          sends_.release(input_grad);
          if (!split_) release(rec);
          break;
        }
        case op_kind::weight:
          ctx.output_grad = rec.output_grad.bytes();
          call(op, ctx, clock);
          release(rec);
          break;
      }
      mem.end_op();
    }
    sends_.reap(*world_, true);
    self.sum_gradients();
    result_.gradient_sums_overlapped = overlap_.started_sums();
    overlap_.finish();
    return close_step(*world_, self.holds_loss(), losses_, pool_.allocations() - buffers_before, clock, result_);
  }

  Communicator* world_;
  executor_options options_;
  buffer_pool<Communicator> pool_;
  send_queue<Communicator> sends_;
  std::vector<record> records_;
  step_receives<Communicator> receives_;
  std::uint32_t m_ = 0;
  bool split_ = false;
  gradient_overlap<Communicator> overlap_;  // the sums stages started during the step

private:
  // Per model stage, the index in `ops` of its last gradient-producing op: the
  // last W when the schedule splits the backward and the stage has a weight
  // pass, else the last B (which then runs the weight pass too).
  void mark_final_gradient_ops(const pipeline_schedule& schedule, std::span<const pipeline_op> ops) {
    auto& self = static_cast<Derived&>(*this);
    final_op_.assign(schedule.stages(), ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const pipeline_op& op = ops[i];
      const bool weight_pass = split_ && with_stage(self.stage_for(op), [](auto& stage) {
                                 return has_weight_pass<std::remove_cvref_t<decltype(stage)>, context>;
                               });
      if (op.kind == (weight_pass ? op_kind::weight : op_kind::backward)) final_op_[op.stage] = i;
    }
  }

  void call(const pipeline_op& op, context& ctx, step_clock& clock) {
    const double begin = clock.op_begin();
    call_stage(world_->rank(), static_cast<Derived&>(*this).stage_for(op), ctx, !split_);
    clock.op_end(op.kind, op.microbatch, op.stage, begin);
  }
  // The microbatch's buffers go back to the pool (sent ones once their sends complete).
  void release(record& rec) {
    sends_.release(rec.input);
    sends_.release(rec.output_grad);
    for (auto& b : rec.stash) pool_.release(b);
    rec.stash.clear();
  }

  pipeline_schedule validated_;
  std::chrono::steady_clock::time_point started_;
  std::vector<std::size_t> position_;
  std::vector<std::size_t> final_op_;  // per model stage: see mark_final_gradient_ops
  std::vector<double> losses_;
  step_result result_;
};

}  // namespace dflop::detail
