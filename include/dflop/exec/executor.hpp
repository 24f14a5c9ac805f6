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
#include <dflop/exec/detail/stage_dispatch.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/validate.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace dflop {

//! Tuning of an executor.
struct executor_options {
  double watchdog_seconds = default_watchdog_seconds;  //!< a wait with no progress this long stops every rank
  std::uint32_t receive_lookahead = 4;                 //!< receives are posted for this many ops ahead
};

//! What one step did on one rank.
struct step_result {
  double loss = 0;                    //!< loss summed over every microbatch of every replica (same on all ranks)
  double seconds = 0;                 //!< wall time of the step on this rank, gradient sync included
  std::size_t messages_sent = 0;      //!< point-to-point messages this rank sent (activations and gradients)
  std::size_t messages_received = 0;  //!< point-to-point messages it received
  std::size_t new_buffers = 0;        //!< blocks the buffer pool had to allocate during the step
};

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

namespace detail {
template <class First, class... Rest>
struct first_type {
  using type = First;
};
//! The stage type an executor holds: the one stage type, or a variant of several.
template <class... Stages>
using stage_slot_t =
    std::conditional_t<sizeof...(Stages) == 1, typename first_type<Stages...>::type, std::variant<Stages...>>;
}  // namespace detail

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
      : world_(&world), options_(options), stages_(std::move(stages)), pool_(world) {
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
    try {
      return run(schedule, batch);
    } catch (const pipeline_aborted&) {
      throw;
    } catch (...) {
      world_->abort(std::current_exception());
      throw;
    }
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
  using request = typename Communicator::request;

  // What a rank keeps for one (microbatch, chunk) between its ops.
  struct record {
    pooled_buffer input;        // F's input (received or handed over locally)
    pooled_buffer output_grad;  // B's incoming gradient
    request input_request{};
    request grad_request{};
    bool input_pending = false;
    bool grad_pending = false;
    std::vector<pooled_buffer> stash;
  };
  struct planned_receive {
    std::size_t needed_at;  // op index that consumes it
    std::size_t sent_at;    // op index of its send on the sender (for in-order communicators)
    int peer;
    int tag;
    std::size_t bytes;
    std::size_t record;
    bool gradient;
    bool posted = false;
  };
  struct pending_send {
    request handle;
    pooled_buffer buffer;
  };

  class memory final : public detail::stage_memory {
  public:
    memory(buffer_pool<Communicator>& pool, std::vector<pooled_buffer>& scratch) : pool_(&pool), scratch_(&scratch) {}
    std::span<std::byte> stash(std::size_t bytes) override {
      stash_->push_back(pool_->acquire(bytes));
      return stash_->back().bytes();
    }
    std::span<std::byte> stashed(std::size_t index) override {
      if (index >= stash_->size()) throw error("stage_context::stashed: no block " + std::to_string(index));
      return (*stash_)[index].bytes();
    }
    std::span<std::byte> scratch(std::size_t bytes) override {
      scratch_->push_back(pool_->acquire(bytes));
      return scratch_->back().bytes();
    }
    std::vector<pooled_buffer>* stash_ = nullptr;

  private:
    buffer_pool<Communicator>* pool_;
    std::vector<pooled_buffer>* scratch_;
  };

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
        receives_.push_back({i, sent_at, world_rank_of(need.stage), tag_of(gradient, op.microbatch, op.stage), bytes,
                             record_of(op.microbatch, op.chunk), gradient});
      }
    }
    if constexpr (matches_in_order<Communicator>) {
      // Per peer, receives must be posted in the sender's order.
      peer_order_.resize(receives_.size());
      for (std::size_t k = 0; k < receives_.size(); ++k) peer_order_[k] = k;
      std::stable_sort(peer_order_.begin(), peer_order_.end(), [&](std::size_t a, std::size_t b) {
        return std::tie(receives_[a].peer, receives_[a].sent_at) < std::tie(receives_[b].peer, receives_[b].sent_at);
      });
      rank_in_peer_.resize(receives_.size());
      for (std::size_t k = 0; k < peer_order_.size(); ++k) rank_in_peer_[peer_order_[k]] = k;
    }
  }

  void post(planned_receive& r) {
    if (r.posted) return;
    if constexpr (matches_in_order<Communicator>) {
      // Post every earlier receive from the same peer first.
      const std::size_t at = rank_in_peer_[static_cast<std::size_t>(&r - receives_.data())];
      std::size_t first = at;
      while (first > 0 && receives_[peer_order_[first - 1]].peer == r.peer && !receives_[peer_order_[first - 1]].posted)
        --first;
      for (std::size_t k = first; k < at; ++k) post_now(receives_[peer_order_[k]]);
    }
    post_now(r);
  }
  void post_now(planned_receive& r) {
    r.posted = true;
    auto& rec = records_[r.record];
    auto& buffer = r.gradient ? rec.output_grad : rec.input;
    buffer = pool_.acquire(r.bytes);
    auto handle = world_->receive(r.peer, r.tag, buffer.bytes(), world_->resource());
    (r.gradient ? rec.grad_request : rec.input_request) = std::move(handle);
    (r.gradient ? rec.grad_pending : rec.input_pending) = true;
    ++result_.messages_received;
  }

  void send(pooled_buffer& buffer, std::uint32_t to_stage, bool gradient, std::uint32_t microbatch) {
    auto handle = world_->send(world_rank_of(to_stage), tag_of(gradient, microbatch, to_stage), buffer.bytes(),
                               world_->resource());
    sends_.push_back({std::move(handle), buffer});
    buffer = {};
    ++result_.messages_sent;
  }
  void reap_sends(bool all) {
    std::size_t kept = 0;
    for (auto& s : sends_) {
      if (all) world_->wait(s.handle, world_->resource());
      if (all || world_->test(s.handle)) pool_.release(s.buffer);
      else sends_[kept++] = std::move(s);
    }
    sends_.resize(kept);
  }
  void release(record& rec) {
    pool_.release(rec.input);
    pool_.release(rec.output_grad);
    for (auto& b : rec.stash) pool_.release(b);
    rec.stash.clear();
  }

  void call(std::uint32_t chunk, context& ctx) {
    try {
      with(chunk, [&](auto& stage) { detail::run_stage_op(stage, ctx, !split_); });
    } catch (const std::exception& e) {
      throw stage_failure(world_->rank(), ctx.stage, ctx.kind, ctx.microbatch, e.what());
    } catch (...) {
      throw stage_failure(world_->rank(), ctx.stage, ctx.kind, ctx.microbatch, "unknown exception");
    }
  }

  step_result run(const pipeline_schedule& schedule, const step_batch& batch) {
    const auto start = std::chrono::steady_clock::now();
    const std::size_t buffers_before = pool_.allocations();
    check(schedule, batch);
    result_ = {};
    m_ = schedule.microbatches;
    chunks_ = schedule.chunks;
    stages_count_ = schedule.stages();
    split_ = schedule.split_backward;
    records_.resize(static_cast<std::size_t>(m_) * chunks_);
    losses_.assign(m_, 0.0);
    plan(schedule, batch);

    const auto& ops = schedule.rank_ops[pipeline_rank_];
    const std::uint32_t last = stages_count_ - 1;
    std::size_t next_receive = 0;
    memory mem(pool_, scratch_);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      while (next_receive < receives_.size() && receives_[next_receive].needed_at <= i + options_.receive_lookahead)
        post(receives_[next_receive++]);
      if (!sends_.empty()) reap_sends(false);
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
      if (rec.input_pending) {
        world_->wait(rec.input_request, ctx.resource);
        rec.input_pending = false;
      }
      ctx.input = rec.input.bytes();
      switch (op.kind) {
        case op_kind::forward: {
          pooled_buffer output =
              op.stage < last ? pool_.acquire(with(op.chunk, [&](auto& s) -> std::size_t { return s.output_bytes(mb); }))
                              : pooled_buffer{};
          ctx.output = output.bytes();
          call(op.chunk, ctx);
          if (op.stage == last) losses_[op.microbatch] = ctx.loss;
          else if (world_rank_of(op.stage + 1) != world_->rank()) send(output, op.stage + 1, false, op.microbatch);
          else records_[record_of(op.microbatch, (op.stage + 1) / ranks_)].input = output;
          break;
        }
        case op_kind::backward: {
          if (rec.grad_pending) {
            world_->wait(rec.grad_request, ctx.resource);
            rec.grad_pending = false;
          }
          ctx.output_grad = rec.output_grad.bytes();
          pooled_buffer input_grad = op.stage > 0 ? pool_.acquire(rec.input.size) : pooled_buffer{};
          ctx.input_grad = input_grad.bytes();
          call(op.chunk, ctx);
          if (op.stage > 0) {
            if (world_rank_of(op.stage - 1) != world_->rank()) send(input_grad, op.stage - 1, true, op.microbatch);
            else records_[record_of(op.microbatch, (op.stage - 1) / ranks_)].output_grad = input_grad;
          }
          if (!split_) release(rec);
          break;
        }
        case op_kind::weight:
          ctx.output_grad = rec.output_grad.bytes();
          call(op.chunk, ctx);
          release(rec);
          break;
      }
      for (auto& b : scratch_) pool_.release(b);
      scratch_.clear();
    }
    reap_sends(true);

    // Data-parallel gradient sum per stage, then the loss over the world.
    auto& group = data_parallel_.front();
    for (std::uint32_t c = 0; c < chunks_; ++c)
      with(c, [&](auto& stage) {
        detail::for_each_gradient(stage.gradients(),
                                  [&](const gradient_buffer& g) { group.all_reduce_sum(g, group.resource()); });
      });
    double local = 0;
    if (world_rank_of(last) == world_->rank())
      for (double value : losses_) local += value;
    result_.loss = world_->all_reduce_value(local);
    result_.new_buffers = pool_.allocations() - buffers_before;
    result_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result_;
  }

  Communicator* world_;
  executor_options options_;
  std::vector<stage_type> stages_;
  buffer_pool<Communicator> pool_;
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
  std::vector<planned_receive> receives_;
  std::vector<std::size_t> position_;
  std::vector<std::size_t> peer_order_;
  std::vector<std::size_t> rank_in_peer_;
  std::vector<pending_send> sends_;
  std::vector<pooled_buffer> scratch_;
  std::vector<double> losses_;
  step_result result_;
};

}  // namespace dflop
