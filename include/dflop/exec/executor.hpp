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

#include <dflop/exec/detail/op_loop.hpp>  // and the executor vocabulary it brings
#include <dflop/exec/detail/step_receives.hpp>

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
class executor : public detail::op_loop<Communicator, executor<Communicator, Stages...>, Stages...> {
  using loop = detail::op_loop<Communicator, executor, Stages...>;
  friend loop;

public:
  using typename loop::context;     // the context the stages receive
  using typename loop::stage_type;  // how a rank's stages are held (one type, or a variant)

  //! An executor for world rank `world.rank()` of a pipeline with `pipeline_ranks`
  //! ranks; `stages[c]` is the rank's chunk c (model stage c * pipeline_ranks +
  //! pipeline rank). `world` must outlive the executor.
  executor(Communicator& world, std::uint32_t pipeline_ranks, std::vector<stage_type> stages,
           executor_options options = {})
      : loop(world, options), stages_(std::move(stages)) {
    if (pipeline_ranks == 0 || world.size() % static_cast<int>(pipeline_ranks) != 0)
      throw error("executor: the world's " + std::to_string(world.size()) +
                  " ranks are not a multiple of the pipeline ranks (" + std::to_string(pipeline_ranks) + ")");
    if (stages_.empty()) throw error("executor: a rank needs at least one stage");
    ranks_ = pipeline_ranks;
    replicas_ = static_cast<std::uint32_t>(world.size()) / pipeline_ranks;
    pipeline_rank_ = static_cast<std::uint32_t>(world.rank()) % pipeline_ranks;
    replica_ = static_cast<std::uint32_t>(world.rank()) / pipeline_ranks;
    data_parallel_.emplace_back(world.split(static_cast<int>(pipeline_rank_), static_cast<int>(replica_)));
  }

  //! Runs one step of `schedule` on `batch` (`batch.microbatches` holds every
  //! replica's lists). Throws `stage_failure` for a stage that threw (after stopping
  //! every rank), `pipeline_aborted` when another rank failed, `watchdog_timeout`,
  //! `schedule_error` for a schedule that does not fit this executor.
  step_result step(const pipeline_schedule& schedule, const step_batch& batch) {
    return detail::guarded_step(*this->world_, [&] { return run(schedule, batch); });
  }

  //! The rank's stages (chunk c at index c): parameters and gradients live there.
  [[nodiscard]] std::vector<stage_type>& stages() noexcept { return stages_; }
  //! This rank's position in the pipeline.
  [[nodiscard]] std::uint32_t pipeline_rank() const noexcept { return pipeline_rank_; }
  //! This rank's data-parallel replica.
  [[nodiscard]] std::uint32_t replica() const noexcept { return replica_; }
  //! Data-parallel replicas in the world.
  [[nodiscard]] std::uint32_t replicas() const noexcept { return replicas_; }

private:
  using record = typename loop::record;

  [[nodiscard]] int world_rank_of(std::uint32_t stage) const noexcept {
    return static_cast<int>(replica_ * ranks_ + stage % ranks_);
  }
  [[nodiscard]] std::size_t record_of(std::uint32_t microbatch, std::uint32_t chunk) const noexcept {
    return static_cast<std::size_t>(microbatch) * chunks_ + chunk;
  }
  // Tag of the message into `stage` for `microbatch`: an activation (F) or a gradient (B).
  [[nodiscard]] int tag_of(bool gradient, std::uint32_t microbatch, std::uint32_t stage) const noexcept {
    return static_cast<int>(((gradient ? 1U : 0U) * this->m_ + microbatch) * stages_count_ + stage);
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
    batch.check(replicas_, schedule.microbatches);
    this->check_schedule(schedule, 2ULL * schedule.microbatches * schedule.stages(), "executor");
  }

  void plan_receives(const pipeline_schedule& schedule, const step_batch& batch) {
    const auto& ops = schedule.rank_ops[pipeline_rank_];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      if (op.kind == op_kind::weight) continue;
      for (const auto& need : dependencies(schedule, op)) {
        if (!crosses_ranks(schedule, need, op)) continue;
        const bool gradient = op.kind == op_kind::backward;
        const microbatch_view mb = batch.view(replica_, op.microbatch, this->m_);
        const std::size_t bytes = with(op.chunk, [&](auto& stage) -> std::size_t {
          return gradient ? stage.output_bytes(mb) : stage.input_bytes(mb);
        });
        this->receives_.add({.needed_at = i,
                       .sent_at = this->sent_at(schedule, need),
                       .peer = world_rank_of(need.stage),
                       .tag = tag_of(gradient, op.microbatch, op.stage),
                       .record = record_of(op.microbatch, op.chunk),
                       .offset = 0,
                       .bytes = bytes,
                       .total = bytes,
                       .gradient = gradient});
      }
    }
    this->receives_.finish();
  }

  step_result run(const pipeline_schedule& schedule, const step_batch& batch) {
    this->start_clock();
    check(schedule, batch);
    chunks_ = schedule.chunks;
    stages_count_ = schedule.stages();
    batch_ = &batch;
    this->begin_step(schedule, static_cast<std::size_t>(schedule.microbatches) * chunks_);
    plan_receives(schedule, batch);
    return this->run_ops(schedule, schedule.rank_ops[pipeline_rank_]);
  }

  // The op loop's questions (see op_loop.hpp).
  record& record_for(const pipeline_op& op) { return this->records_[record_of(op.microbatch, op.chunk)]; }
  microbatch_view samples_for(const pipeline_op& op) const { return batch_->view(replica_, op.microbatch, this->m_); }
  stage_type& stage_for(const pipeline_op& op) { return stages_[op.chunk]; }
  void describe(context& ctx, const pipeline_op& op) const {
    ctx.stage = op.stage;
    ctx.stages = stages_count_;
    ctx.replica = replica_;
  }
  std::size_t output_bytes_for(const pipeline_op& op, const microbatch_view& mb) {
    return with(op.chunk, [&](auto& s) -> std::size_t { return s.output_bytes(mb); });
  }
  void before_call(const pipeline_op&, record&) const noexcept {}
  // F's output goes to the next stage: another rank, or this rank's next chunk.
  void forwarded(const pipeline_op& op, pooled_buffer& output) {
    if (world_rank_of(op.stage + 1) != this->world_->rank())
      this->send(output.bytes(), output, world_rank_of(op.stage + 1), tag_of(false, op.microbatch, op.stage + 1));
    else
      this->records_[record_of(op.microbatch, (op.stage + 1) / ranks_)].input = std::exchange(output, {});
  }
  // B's input gradient goes to the previous stage likewise.
  void backpropagated(const pipeline_op& op, pooled_buffer& input_grad) {
    if (world_rank_of(op.stage - 1) != this->world_->rank())
      this->send(input_grad.bytes(), input_grad, world_rank_of(op.stage - 1), tag_of(true, op.microbatch, op.stage - 1));
    else
      this->records_[record_of(op.microbatch, (op.stage - 1) / ranks_)].output_grad = std::exchange(input_grad, {});
  }
  // Data-parallel gradient sum per stage; the last stage's rank holds the loss.
  void sum_gradients() {
    for (auto& stage : stages_)
      detail::sum_gradients(data_parallel_.front(), stage, detail::gradient_reduction::all_reduce,
                            [&](const gradient_buffer& g) { return this->overlap_.started(g); });
  }
  [[nodiscard]] Communicator& gradient_group() noexcept { return data_parallel_.front(); }
  // Gradients are all-reduced (no distributed optimizer here).
  [[nodiscard]] static constexpr detail::gradient_reduction reduction() noexcept {
    return detail::gradient_reduction::all_reduce;
  }
  [[nodiscard]] bool holds_loss() const noexcept { return world_rank_of(stages_count_ - 1) == this->world_->rank(); }

  std::vector<stage_type> stages_;
  std::vector<Communicator> data_parallel_;  // this pipeline rank's data-parallel group (one entry)
  std::uint32_t ranks_ = 1;
  std::uint32_t replicas_ = 1;
  std::uint32_t pipeline_rank_ = 0;
  std::uint32_t replica_ = 0;
  std::uint32_t chunks_ = 1;
  std::uint32_t stages_count_ = 1;
  const step_batch* batch_ = nullptr;  // the step's batch, while it runs
};

}  // namespace dflop
