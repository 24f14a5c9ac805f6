// SPDX-License-Identifier: Apache-2.0
//! \file
//! The multimodal executor: one iteration of an encoder + LLM model exactly as
//! `multimodal_simulator` models it. Encoder stages then LLM stages form one
//! one-chunk pipeline of `encoder.pp + llm.pp` positions (ranks placed as
//! `world_layout` says, the plan's GPU numbering); every rank of
//! position p runs `schedule.rank_ops[p]`. Each module has its own data-parallel
//! degree and tensor-parallel group size.
//!
//! Messages (all sizes derived from the samples on both sides: no handshake):
//! - between stages of one module: as in `executor`, replica to same replica,
//!   TP rank i to TP rank i;
//! - the hand-off: after F of slot k, TP rank 0 of each encoder replica's last
//!   stage sends each LLM replica that holds some of its samples one message with
//!   exactly those samples' rows (a contiguous range, see handoff.hpp) straight
//!   to TP rank 0 of that replica's first stage; that rank then forwards the
//!   assembled input to its TP peers (point-to-point broadcast). Backward mirrors
//!   it: the LLM first stage's TP rank 0 returns each encoder replica the
//!   gradient of its rows; the encoder's TP rank 0 forwards the assembled output
//!   gradient to its TP peers.
//! After the last op, gradients are summed over each (module, stage, TP rank)'s
//! data-parallel group and the loss over the world (each LLM replica's last
//! stage counted once, by its TP rank 0). Any failure stops every rank.
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
#include <dflop/exec/handoff.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/exec/step_result.hpp>
#include <dflop/plan/world_layout.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/validate.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! Runs multimodal schedules: one rank's stage (an encoder or LLM stage type out
//! of `Stages...`) over `Communicator`. All ranks construct theirs together
//! (construction splits the data-parallel and tensor-parallel groups) and call
//! `step` together.
template <communicator Communicator, class... Stages>
class multimodal_executor {
public:
  //! The context the stages receive.
  using context = basic_stage_context<typename Communicator::resource_type>;
  //! How the rank's stage is held.
  using stage_type = detail::stage_slot_t<Stages...>;
  static_assert(sizeof...(Stages) > 0, "dflop::multimodal_executor needs at least one stage type");
  static_assert((detail::check_stage<Stages, context>() && ...));

  //! The executor of world rank `world.rank()` in `layout`, running `stage` (the
  //! stage `layout.role(world.rank())` names). `world` must outlive the executor.
  //! Throws `dflop::error` when the world's size is not the layout's.
  multimodal_executor(Communicator& world, const world_layout& layout, stage_type stage, executor_options options = {})
      : world_(&world), layout_(layout), options_(options), stage_(std::move(stage)), pool_(world), sends_(pool_) {
    if (world.size() != layout.world_size())
      throw error("multimodal_executor: the layout needs " + std::to_string(layout.world_size()) +
                  " ranks, the world has " + std::to_string(world.size()));
    role_ = layout.role(world.rank());
    tp_ = layout.tp(role_.module);
    encoder_stages_ = layout.stages(module_kind::encoder);
    positions_ = layout.positions();
    encoders_ = layout.replicas(module_kind::encoder);
    llms_ = layout.replicas(module_kind::llm);
    world.set_watchdog(options.watchdog_seconds);
    data_parallel_.emplace(world.split(layout.rank_of(role_.module, role_.stage, 0, role_.tp_rank),
                                       static_cast<int>(role_.replica)));
    tensor_parallel_.emplace(world.split(layout.rank_of(role_.module, role_.stage, role_.replica, 0),
                                         static_cast<int>(role_.tp_rank)));
  }

  //! Runs one iteration of `schedule` (one chunk, `layout.positions()` ranks) on
  //! `batch`. Throws `stage_failure` for a stage that threw (after stopping every
  //! rank), `pipeline_aborted` when another rank failed, `watchdog_timeout`,
  //! `schedule_error` for a schedule that does not fit, `dflop::error` for a batch
  //! that does not (see `handoff_plan::build`) or a stage whose hand-off sizes are
  //! not per-sample sums.
  step_result step(const pipeline_schedule& schedule, const multimodal_batch& batch) {
    return detail::guarded_step(*world_, [&] { return run(schedule, batch); });
  }

  //! The rank's stage: parameters and gradients live there.
  [[nodiscard]] stage_type& stage() noexcept { return stage_; }
  //! What this rank runs.
  [[nodiscard]] const rank_role& role() const noexcept { return role_; }
  //! The world's layout.
  [[nodiscard]] const world_layout& layout() const noexcept { return layout_; }
  //! The ranks of this rank's (module, stage, replica), ordered by TP rank: what a
  //! stage's own tensor-parallel collectives run over.
  [[nodiscard]] Communicator& tensor_group() noexcept { return *tensor_parallel_; }
  //! The ranks of this rank's (module, stage, TP rank), ordered by replica: its gradients are summed over it.
  [[nodiscard]] Communicator& data_parallel_group() noexcept { return *data_parallel_; }
  //! Blocks the buffer pool holds.
  [[nodiscard]] std::size_t pool_buffers() const noexcept { return pool_.allocations(); }

private:
  using record = detail::op_record<Communicator>;
  // This rank's share of one hand-off message, for one schedule microbatch and one peer replica.
  struct handoff_bytes {
    std::size_t offset = 0;
    std::size_t bytes = 0;
    bool feeds = false;
  };

  [[nodiscard]] bool llm_first() const noexcept { return !role_.encoder() && role_.stage == 0 && encoder_stages_ > 0; }
  [[nodiscard]] bool encoder_last() const noexcept { return role_.encoder() && role_.stage + 1 == encoder_stages_; }
  [[nodiscard]] int rank_at(std::uint32_t position, std::uint32_t replica, std::uint32_t tp_rank) const noexcept {
    return layout_.rank_at(position, replica, tp_rank);
  }
  // Tags: activations and gradients between stages of a module, then hand-offs
  // per (direction, microbatch, encoder replica, LLM replica), then TP broadcasts.
  [[nodiscard]] int pipeline_tag(bool gradient, std::uint32_t j, std::uint32_t position) const noexcept {
    return static_cast<int>(((gradient ? 1U : 0U) * m_ + j) * positions_ + position);
  }
  [[nodiscard]] int handoff_tag(bool gradient, std::uint32_t j, std::uint32_t e, std::uint32_t r) const noexcept {
    const std::size_t base = 2ULL * m_ * positions_;
    return static_cast<int>(base + (((gradient ? 1U : 0U) * m_ + j) * encoders_ + e) * llms_ + r);
  }
  [[nodiscard]] int broadcast_tag(bool gradient, std::uint32_t j) const noexcept {
    const std::size_t base = 2ULL * m_ * positions_ + 2ULL * m_ * encoders_ * llms_;
    return static_cast<int>(base + (gradient ? 1U : 0U) * m_ + j);
  }
  [[nodiscard]] std::span<const std::uint32_t> samples_of(std::uint32_t j, const multimodal_batch& batch) const {
    const std::uint32_t k = batch.slot(j);
    return role_.encoder() ? plan_.encoder_samples(role_.replica, k) : plan_.llm_samples(role_.replica, k);
  }
  template <class F>
  decltype(auto) with(F&& f) {
    return detail::with_stage(stage_, std::forward<F>(f));
  }
  std::size_t input_bytes(const microbatch_view& mb) {
    return with([&](auto& s) -> std::size_t { return s.input_bytes(mb); });
  }
  std::size_t output_bytes(const microbatch_view& mb) {
    return with([&](auto& s) -> std::size_t { return s.output_bytes(mb); });
  }

  void check(const pipeline_schedule& schedule) {
    if (schedule.chunks != 1)
      throw schedule_error("multimodal_executor: schedule '" + schedule.name +
                           "' interleaves chunks; multimodal pipelines take one-chunk schedules");
    if (schedule.ranks != positions_)
      throw schedule_error("multimodal_executor: schedule '" + schedule.name + "' has " +
                           std::to_string(schedule.ranks) + " ranks, the layout " + std::to_string(positions_) +
                           " positions");
    if (schedule != validated_) {
      validate(schedule);
      validated_ = schedule;
    }
    const std::uint64_t m = schedule.microbatches;
    const std::uint64_t largest = 2 * m * positions_ + 2 * m * encoders_ * llms_ + 2 * m;
    if (largest > static_cast<std::uint64_t>(world_->max_tag()))
      throw error("multimodal_executor: " + std::to_string(largest) + " message tags exceed the communicator's limit " +
                  std::to_string(world_->max_tag()));
  }

  // Per microbatch: where each peer's rows lie in this rank's hand-off buffer.
  void plan_handoff(const multimodal_batch& batch) {
    const std::uint32_t peers = llm_first() ? encoders_ : encoder_last() ? llms_ : 0;
    peers_ = peers;
    handoff_.assign(static_cast<std::size_t>(m_) * peers, handoff_bytes{});
    any_feeds_.assign(m_, 0);
    if (peers == 0) return;
    const std::uint32_t q = role_.replica;
    for (std::uint32_t j = 0; j < m_; ++j) {
      const std::uint32_t k = batch.slot(j);
      const auto samples = samples_of(j, batch);
      const microbatch_view mb(batch.samples, samples);
      sample_offsets(batch.samples, samples,
                     [&](const microbatch_view& one) { return role_.encoder() ? output_bytes(one) : input_bytes(one); },
                     offsets_);
      const std::size_t whole = role_.encoder() ? output_bytes(mb) : input_bytes(mb);
      if (offsets_.back() != whole)
        throw error(std::string("multimodal_executor: the ") +
                    (role_.encoder() ? "encoder's last stage output_bytes" : "LLM's first stage input_bytes") + " is " +
                    std::to_string(whole) + " for microbatch " + std::to_string(j) +
                    ", not the sum over its samples (" + std::to_string(offsets_.back()) +
                    "): the hand-off moves rows per sample");
      if (!role_.encoder()) {
        const auto sources = plan_.llm_sources(q, k);
        for (std::size_t p = 0; p < samples.size(); ++p)
          if (sources[p] == handoff_plan::none && offsets_[p + 1] != offsets_[p])
            throw error("multimodal_executor: sample " + std::to_string(samples[p]) + " of slot " + std::to_string(k) +
                        " has encoder input rows in the LLM but no encoder replica encodes it");
      }
      for (std::uint32_t peer = 0; peer < peers; ++peer) {
        const auto range = role_.encoder() ? plan_.encoder_range(q, peer, k) : plan_.llm_range(peer, q, k);
        auto& h = handoff_[static_cast<std::size_t>(j) * peers + peer];
        h.offset = offsets_[range.first];
        h.bytes = offsets_[range.end] - offsets_[range.first];
        h.feeds = role_.encoder() ? plan_.feeds(q, peer, k) : plan_.feeds(peer, q, k);
        if (h.feeds) any_feeds_[j] = 1;
      }
    }
  }

  void plan(const pipeline_schedule& schedule, const multimodal_batch& batch) {
    plan_.build(batch, m_, encoders_, llms_);
    plan_handoff(batch);
    receives_.clear();
    const auto& ops = schedule.rank_ops[role_.position];
    if constexpr (matches_in_order<Communicator>) {
      index_.assign(3 * static_cast<std::size_t>(m_) * positions_, 0);
      for (const auto& list : schedule.rank_ops)
        for (std::size_t i = 0; i < list.size(); ++i) index_[detail::op_slot(schedule, list[i])] = i;
    }
    const auto sent_at = [&](op_kind kind, std::uint32_t j, std::uint32_t position) -> std::size_t {
      if constexpr (matches_in_order<Communicator>) return index_[detail::op_slot(schedule, {kind, j, position, 0})];
      else return 0;
    };
    const std::uint32_t p = role_.position;
    const std::uint32_t q = role_.replica;
    const std::uint32_t t = role_.tp_rank;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      const std::uint32_t j = op.microbatch;
      const microbatch_view mb(batch.samples, samples_of(j, batch));
      if (op.kind == op_kind::forward && p > 0) {
        const std::size_t in = input_bytes(mb);
        if (!llm_first()) {
          receives_.add({i, sent_at(op_kind::forward, j, p - 1), rank_at(p - 1, q, t), pipeline_tag(false, j, p), j, 0,
                         in, in, false});
        } else if (t == 0) {
          for (std::uint32_t e = 0; e < encoders_; ++e)
            if (const auto& h = handoff_[static_cast<std::size_t>(j) * peers_ + e]; h.feeds)
              receives_.add({i, sent_at(op_kind::forward, j, p - 1), rank_at(p - 1, e, 0), handoff_tag(false, j, e, q),
                             j, h.offset, h.bytes, in, false});
        } else if (any_feeds_[j]) {
          receives_.add({i, i, rank_at(p, q, 0), broadcast_tag(false, j), j, 0, in, in, false});
        }
      } else if (op.kind == op_kind::backward && p + 1 < positions_) {
        const std::size_t out = output_bytes(mb);
        if (!encoder_last()) {
          receives_.add({i, sent_at(op_kind::backward, j, p + 1), rank_at(p + 1, q, t), pipeline_tag(true, j, p), j, 0,
                         out, out, true});
        } else if (t == 0) {
          for (std::uint32_t r = 0; r < llms_; ++r)
            if (const auto& h = handoff_[static_cast<std::size_t>(j) * peers_ + r]; h.feeds)
              receives_.add({i, sent_at(op_kind::backward, j, p + 1), rank_at(p + 1, r, 0), handoff_tag(true, j, q, r),
                             j, h.offset, h.bytes, out, true});
        } else if (any_feeds_[j]) {
          receives_.add({i, i, rank_at(p, q, 0), broadcast_tag(true, j), j, 0, out, out, true});
        }
      }
    }
    receives_.finish();
  }

  void send(std::span<const std::byte> bytes, const pooled_buffer& block, int peer, int tag) {
    sends_.send(*world_, peer, tag, bytes, block);
    ++result_.messages_sent;
  }
  // TP rank 0 forwards a record buffer it assembled from hand-offs to its TP peers.
  void broadcast(const pooled_buffer& buffer, bool gradient, std::uint32_t j) {
    for (std::uint32_t u = 1; u < tp_; ++u)
      send(buffer.bytes(), buffer, rank_at(role_.position, role_.replica, u), broadcast_tag(gradient, j));
  }
  void release(record& rec) {
    sends_.release(rec.input);
    sends_.release(rec.output_grad);
    for (auto& b : rec.stash) pool_.release(b);
    rec.stash.clear();
  }

  step_result run(const pipeline_schedule& schedule, const multimodal_batch& batch) {
    result_ = {};
    detail::step_clock clock(options_.record_op_times, result_);
    const std::size_t buffers_before = pool_.allocations();
    check(schedule);
    m_ = schedule.microbatches;
    split_ = schedule.split_backward;
    records_.resize(m_);
    losses_.assign(m_, 0.0);
    plan(schedule, batch);

    const auto& ops = schedule.rank_ops[role_.position];
    if (options_.record_op_times) result_.op_times.reserve(ops.size());
    const std::uint32_t p = role_.position;
    const std::uint32_t q = role_.replica;
    const std::uint32_t t = role_.tp_rank;
    const bool last = p + 1 == positions_;
    detail::pool_memory<Communicator> mem(pool_);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      result_.messages_received += receives_.post_until(i + options_.receive_lookahead, *world_, pool_, records_);
      if (!sends_.empty()) sends_.reap(*world_, false);
      const auto& op = ops[i];
      const std::uint32_t j = op.microbatch;
      auto& rec = records_[j];
      const microbatch_view mb(batch.samples, samples_of(j, batch));
      context ctx;
      ctx.kind = op.kind;
      ctx.microbatch = j;
      ctx.stage = p;
      ctx.stages = positions_;
      ctx.replica = q;
      ctx.tp_rank = t;
      ctx.tp_size = tp_;
      ctx.rank = world_->rank();
      ctx.samples = mb;
      ctx.resource = world_->resource();
      ctx.memory = &mem;
      mem.stash_ = &rec.stash;
      detail::wait_all(*world_, rec.input_requests, ctx.resource);
      ctx.input = rec.input.bytes();
      switch (op.kind) {
        case op_kind::forward: {
          if (llm_first() && t == 0 && tp_ > 1 && any_feeds_[j]) broadcast(rec.input, false, j);
          pooled_buffer output = last ? pooled_buffer{} : pool_.acquire(output_bytes(mb));
          ctx.output = output.bytes();
          call(op, ctx, clock);
          if (last) {
            losses_[j] = ctx.loss;
          } else if (!encoder_last()) {
            send(output.bytes(), output, rank_at(p + 1, q, t), pipeline_tag(false, j, p + 1));
          } else if (t == 0) {
            for (std::uint32_t r = 0; r < llms_; ++r)
              if (const auto& h = handoff_[static_cast<std::size_t>(j) * peers_ + r]; h.feeds)
                send(output.bytes().subspan(h.offset, h.bytes), output, rank_at(p + 1, r, 0), handoff_tag(false, j, q, r));
          }
          sends_.release(output);
          break;
        }
        case op_kind::backward: {
          detail::wait_all(*world_, rec.grad_requests, ctx.resource);
          if (encoder_last() && t == 0 && tp_ > 1 && any_feeds_[j]) broadcast(rec.output_grad, true, j);
          ctx.output_grad = rec.output_grad.bytes();
          pooled_buffer input_grad = p > 0 ? pool_.acquire(rec.input.size) : pooled_buffer{};
          ctx.input_grad = input_grad.bytes();
          call(op, ctx, clock);
          if (p > 0 && !llm_first()) {
            send(input_grad.bytes(), input_grad, rank_at(p - 1, q, t), pipeline_tag(true, j, p - 1));
          } else if (p > 0 && t == 0) {
            for (std::uint32_t e = 0; e < encoders_; ++e)
              if (const auto& h = handoff_[static_cast<std::size_t>(j) * peers_ + e]; h.feeds)
                send(input_grad.bytes().subspan(h.offset, h.bytes), input_grad, rank_at(p - 1, e, 0),
                     handoff_tag(true, j, e, q));
          }
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

    // Gradients over the (module, stage, TP rank) replicas, then the loss over the world.
    detail::sum_gradients(*data_parallel_, stage_);
    return detail::close_step(*world_, last && t == 0, losses_, pool_.allocations() - buffers_before, clock,
                              result_);
  }

  void call(const pipeline_op& op, context& ctx, detail::step_clock& clock) {
    const double begin = clock.op_begin();
    detail::call_stage(world_->rank(), stage_, ctx, !split_);
    clock.op_end(op.kind, op.microbatch, op.stage, begin);
  }

  Communicator* world_;
  world_layout layout_;
  executor_options options_;
  stage_type stage_;
  buffer_pool<Communicator> pool_;
  detail::send_queue<Communicator> sends_;
  std::optional<Communicator> data_parallel_;
  std::optional<Communicator> tensor_parallel_;
  rank_role role_;
  std::uint32_t tp_ = 1;
  std::uint32_t encoder_stages_ = 0;
  std::uint32_t positions_ = 1;
  std::uint32_t encoders_ = 0;  // encoder replicas (0 without an encoder)
  std::uint32_t llms_ = 1;      // LLM replicas
  std::uint32_t m_ = 0;
  std::uint32_t peers_ = 0;  // replicas of the other module this rank exchanges hand-offs with
  bool split_ = false;
  pipeline_schedule validated_;
  handoff_plan plan_;
  std::vector<handoff_bytes> handoff_;  // [j * peers_ + peer]
  std::vector<char> any_feeds_;         // per microbatch: some hand-off message arrives (TP peers need a copy)
  std::vector<std::size_t> offsets_;
  std::vector<record> records_;
  detail::receive_plan<Communicator> receives_;
  std::vector<std::size_t> index_;  // each op's index in its position's list (in-order communicators)
  std::vector<double> losses_;
  step_result result_;
};

}  // namespace dflop
