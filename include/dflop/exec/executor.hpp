// SPDX-License-Identifier: Apache-2.0
//! \file
//! The executor: runs one rank's share of a pipeline schedule over user stage
//! functors, exactly the op lists the simulator predicts. Receives are posted a
//! few ops ahead, sends overlap the following compute, shapes come from the
//! samples (no handshake, no padding), buffers come from a pool reused across
//! steps. After the last op, gradients are summed over the data-parallel group
//! and the loss over the world. Any failure stops every rank (see failure.hpp).
//!
//! World layout: `world.size() = pipeline_ranks x replicas`; world rank
//! `replica * pipeline_ranks + pipeline_rank`. A rank holds the schedule's chunks
//! c = 0..v-1 of its pipeline rank, i.e. model stages c * pipeline_ranks + pipeline_rank.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/buffer_pool.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/detail/pool_memory.hpp>
#include <dflop/exec/detail/receive_plan.hpp>
#include <dflop/exec/detail/send_queue.hpp>
#include <dflop/exec/detail/stage_dispatch.hpp>
#include <dflop/exec/detail/step_runtime.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/exec/step_result.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/validate.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! Number of point-to-point messages one replica of `schedule` moves in a step:
//! the dependency edges between ops on different ranks.
[[nodiscard]] inline std::size_t cross_rank_messages(const pipeline_schedule& schedule) {
  std::size_t count = 0;
  for (const auto& ops : schedule.rank_ops)
    for (const auto& op : ops)
      for (const auto& next : dependents(schedule, op))
        if (crosses_ranks(schedule, op, next)) ++count;
  return count;
}

//! Runs schedules over `Stages...` (one stage type, or several held in a variant)
//! with `Communicator`. One executor per rank; all ranks construct theirs together
//! (construction splits the data-parallel group) and call `step` together.
template <communicator Communicator, class... Stages>
class executor {
public:
  //! The context the stages receive.
  using context = basic_stage_context<typename Communicator::resource_type>;
  //! How a rank's stages are held.
  using stage_type = detail::stage_slot_t<Stages...>;
  static_assert(sizeof...(Stages) > 0, "dflop::executor needs at least one stage type");
  static_assert((detail::check_stage<Stages, context>() && ...));

  //! An executor for world rank `world.rank()` of a pipeline with `pipeline_ranks`
  //! ranks; `stages[c]` is the rank's chunk c (model stage c * pipeline_ranks +
  //! pipeline rank). `world` must outlive the executor.
  executor(Communicator& world, std::uint32_t pipeline_ranks, std::vector<stage_type> stages,
           executor_options options = {})
      : world_(&world), options_(options), stages_(std::move(stages)), pool_(world), sends_(pool_) {
    if (pipeline_ranks == 0 || world.size() % static_cast<int>(pipeline_ranks) != 0)
      throw error("executor: the world's " + std::to_string(world.size()) +
                  " ranks are not a multiple of the pipeline ranks (" + std::to_string(pipeline_ranks) + ")");
    if (stages_.empty()) throw error("executor: a rank needs at least one stage");
    ranks_ = pipeline_ranks;
    replicas_ = static_cast<std::uint32_t>(world.size()) / pipeline_ranks;
    pipeline_rank_ = static_cast<std::uint32_t>(world.rank()) % pipeline_ranks;
    replica_ = static_cast<std::uint32_t>(world.rank()) / pipeline_ranks;
    world.set_watchdog(options.watchdog_seconds);
    data_parallel_.emplace_back(world.split(static_cast<int>(pipeline_rank_), static_cast<int>(replica_)));
  }

  //! Runs one step of `schedule` on `batch` (`batch.microbatches` holds every
  //! replica's lists). Throws `stage_failure` for a stage that threw (after stopping
  //! every rank), `pipeline_aborted` when another rank failed, `watchdog_timeout`,
  //! `schedule_error` for a schedule that does not fit this executor.
  step_result step(const pipeline_schedule& schedule, const step_batch& batch) {
    return detail::guarded_step(*world_, [&] { return run(schedule, batch); });
  }

  //! The rank's stages (chunk c at index c): parameters and gradients live there.
  [[nodiscard]] std::vector<stage_type>& stages() noexcept { return stages_; }
  //! This rank's position in the pipeline.
  [[nodiscard]] std::uint32_t pipeline_rank() const noexcept { return pipeline_rank_; }
  //! This rank's data-parallel replica.
  [[nodiscard]] std::uint32_t replica() const noexcept { return replica_; }
  //! Data-parallel replicas in the world.
  [[nodiscard]] std::uint32_t replicas() const noexcept { return replicas_; }
  //! Blocks the buffer pool holds.
  [[nodiscard]] std::size_t pool_buffers() const noexcept { return pool_.allocations(); }

private:
  using record = detail::op_record<Communicator>;

  [[nodiscard]] int world_rank_of(std::uint32_t stage) const noexcept {
    return static_cast<int>(replica_ * ranks_ + stage % ranks_);
  }
  [[nodiscard]] std::size_t record_of(std::uint32_t microbatch, std::uint32_t chunk) const noexcept {
    return static_cast<std::size_t>(microbatch) * chunks_ + chunk;
  }
  // Tag of the message into `stage` for `microbatch`: an activation (F) or a gradient (B).
  [[nodiscard]] int tag_of(bool gradient, std::uint32_t microbatch, std::uint32_t stage) const noexcept {
    return static_cast<int>(((gradient ? 1U : 0U) * m_ + microbatch) * stages_count_ + stage);
  }
  template <class F>
  decltype(auto) with(std::uint32_t chunk, F&& f) {
    return detail::with_stage(stages_[chunk], std::forward<F>(f));
  }

  void check(const pipeline_schedule& schedule, const step_batch& batch) {
    if (schedule.ranks != ranks_)
      throw schedule_error("executor: schedule '" + schedule.name + "' has " + std::to_string(schedule.ranks) +
                           " ranks, the executor " + std::to_string(ranks_));
    if (schedule.chunks != stages_.size())
      throw schedule_error("executor: schedule '" + schedule.name + "' has " + std::to_string(schedule.chunks) +
                           " chunks per rank, this rank holds " + std::to_string(stages_.size()) + " stages");
    if (schedule != validated_) {
      validate(schedule);
      validated_ = schedule;
    }
    batch.check(replicas_, schedule.microbatches);
    const std::uint64_t largest = 2ULL * schedule.microbatches * schedule.stages();
    if (largest > static_cast<std::uint64_t>(world_->max_tag()))
      throw error("executor: " + std::to_string(largest) + " message tags exceed the communicator's limit " +
                  std::to_string(world_->max_tag()));
  }

  void plan(const pipeline_schedule& schedule, const step_batch& batch) {
    receives_.clear();
    const auto& ops = schedule.rank_ops[pipeline_rank_];
    if constexpr (matches_in_order<Communicator>) {
      position_.assign(3 * static_cast<std::size_t>(m_) * stages_count_, 0);
      for (const auto& list : schedule.rank_ops)
        for (std::size_t i = 0; i < list.size(); ++i) position_[detail::op_slot(schedule, list[i])] = i;
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      if (op.kind == op_kind::weight) continue;
      for (const auto& need : dependencies(schedule, op)) {
        if (!crosses_ranks(schedule, need, op)) continue;
        const bool gradient = op.kind == op_kind::backward;
        const microbatch_view mb = batch.view(replica_, op.microbatch, m_);
        const std::size_t bytes = with(op.chunk, [&](auto& stage) -> std::size_t {
          return gradient ? stage.output_bytes(mb) : stage.input_bytes(mb);
        });
        std::size_t sent_at = 0;
        if constexpr (matches_in_order<Communicator>) sent_at = position_[detail::op_slot(schedule, need)];
        receives_.add({.needed_at = i,
                       .sent_at = sent_at,
                       .peer = world_rank_of(need.stage),
                       .tag = tag_of(gradient, op.microbatch, op.stage),
                       .record = record_of(op.microbatch, op.chunk),
                       .offset = 0,
                       .bytes = bytes,
                       .total = bytes,
                       .gradient = gradient});
      }
    }
    receives_.finish();
  }

  void send(pooled_buffer& buffer, std::uint32_t to_stage, bool gradient, std::uint32_t microbatch) {
    sends_.send(*world_, world_rank_of(to_stage), tag_of(gradient, microbatch, to_stage), buffer.bytes(), buffer);
    sends_.release(buffer);
    ++result_.messages_sent;
  }
  void release(record& rec) {
    sends_.release(rec.input);
    sends_.release(rec.output_grad);
    for (auto& b : rec.stash) pool_.release(b);
    rec.stash.clear();
  }

  step_result run(const pipeline_schedule& schedule, const step_batch& batch) {
    result_ = {};
    detail::step_clock clock(options_.record_op_times, result_);
    const std::size_t buffers_before = pool_.allocations();
    check(schedule, batch);
    m_ = schedule.microbatches;
    chunks_ = schedule.chunks;
    stages_count_ = schedule.stages();
    split_ = schedule.split_backward;
    records_.resize(static_cast<std::size_t>(m_) * chunks_);
    losses_.assign(m_, 0.0);
    plan(schedule, batch);

    const auto& ops = schedule.rank_ops[pipeline_rank_];
    if (options_.record_op_times) result_.op_times.reserve(ops.size());
    const std::uint32_t last = stages_count_ - 1;
    detail::pool_memory<Communicator> mem(pool_);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      result_.messages_received += receives_.post_until(i + options_.receive_lookahead, *world_, pool_, records_);
      if (!sends_.empty()) sends_.reap(*world_, false);
      const auto& op = ops[i];
      auto& rec = records_[record_of(op.microbatch, op.chunk)];
      const microbatch_view mb = batch.view(replica_, op.microbatch, m_);
      context ctx;
      ctx.kind = op.kind;
      ctx.microbatch = op.microbatch;
      ctx.stage = op.stage;
      ctx.stages = stages_count_;
      ctx.replica = replica_;
      ctx.rank = world_->rank();
      ctx.samples = mb;
      ctx.resource = world_->resource();
      ctx.memory = &mem;
      mem.stash_ = &rec.stash;
      detail::wait_all(*world_, rec.input_requests, ctx.resource);
      ctx.input = rec.input.bytes();
      switch (op.kind) {
        case op_kind::forward: {
          pooled_buffer output =
              op.stage < last ? pool_.acquire(with(op.chunk, [&](auto& s) -> std::size_t { return s.output_bytes(mb); }))
                              : pooled_buffer{};
          ctx.output = output.bytes();
          call(op, ctx, clock);
          if (op.stage == last) losses_[op.microbatch] = ctx.loss;
          else if (world_rank_of(op.stage + 1) != world_->rank()) send(output, op.stage + 1, false, op.microbatch);
          else records_[record_of(op.microbatch, (op.stage + 1) / ranks_)].input = output;
          break;
        }
        case op_kind::backward: {
          detail::wait_all(*world_, rec.grad_requests, ctx.resource);
          ctx.output_grad = rec.output_grad.bytes();
          pooled_buffer input_grad = op.stage > 0 ? pool_.acquire(rec.input.size) : pooled_buffer{};
          ctx.input_grad = input_grad.bytes();
          call(op, ctx, clock);
          if (op.stage > 0) {
            if (world_rank_of(op.stage - 1) != world_->rank()) send(input_grad, op.stage - 1, true, op.microbatch);
            else records_[record_of(op.microbatch, (op.stage - 1) / ranks_)].output_grad = input_grad;
          }
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

    // Data-parallel gradient sum per stage, then the loss over the world.
    for (auto& stage : stages_) detail::sum_gradients(data_parallel_.front(), stage);
    return detail::close_step(*world_, world_rank_of(last) == world_->rank(), losses_,
                              pool_.allocations() - buffers_before, clock, result_);
  }

  void call(const pipeline_op& op, context& ctx, detail::step_clock& clock) {
    const double begin = clock.op_begin();
    detail::call_stage(world_->rank(), stages_[op.chunk], ctx, !split_);
    clock.op_end(op.kind, op.microbatch, op.stage, begin);
  }

  Communicator* world_;
  executor_options options_;
  std::vector<stage_type> stages_;
  buffer_pool<Communicator> pool_;
  detail::send_queue<Communicator> sends_;
  std::vector<Communicator> data_parallel_;  // this pipeline rank's data-parallel group (one entry)
  std::uint32_t ranks_ = 1;
  std::uint32_t replicas_ = 1;
  std::uint32_t pipeline_rank_ = 0;
  std::uint32_t replica_ = 0;
  std::uint32_t m_ = 0;
  std::uint32_t chunks_ = 1;
  std::uint32_t stages_count_ = 1;
  bool split_ = false;
  pipeline_schedule validated_;
  std::vector<record> records_;
  detail::receive_plan<Communicator> receives_;
  std::vector<std::size_t> position_;
  std::vector<double> losses_;
  step_result result_;
};

}  // namespace dflop
