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

#include <dflop/exec/detail/op_loop.hpp>  // and the executor vocabulary it brings
#include <dflop/exec/detail/step_receives.hpp>
#include <dflop/exec/handoff.hpp>
#include <dflop/plan/world_layout.hpp>

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
class multimodal_executor : public detail::op_loop<Communicator, multimodal_executor<Communicator, Stages...>, Stages...> {
  using loop = detail::op_loop<Communicator, multimodal_executor, Stages...>;
  friend loop;

public:
  using typename loop::context;     // the context the stages receive
  using typename loop::stage_type;  // how the rank's stage is held (one type, or a variant)

  //! The executor of world rank `world.rank()` in `layout`, running `stage` (the
  //! stage `layout.role(world.rank())` names). `world` must outlive the executor.
  //! Throws `dflop::error` when the world's size is not the layout's.
  multimodal_executor(Communicator& world, const world_layout& layout, stage_type stage, executor_options options = {})
      : loop(world, options), layout_(layout), stage_(std::move(stage)) {
    if (world.size() != layout.world_size())
      throw error("multimodal_executor: the layout needs " + std::to_string(layout.world_size()) +
                  " ranks, the world has " + std::to_string(world.size()));
    role_ = layout.role(world.rank());
    tp_ = layout.tp(role_.module);
    encoder_stages_ = layout.stages(module_kind::encoder);
    positions_ = layout.positions();
    encoders_ = layout.replicas(module_kind::encoder);
    llms_ = layout.replicas(module_kind::llm);
    data_parallel_.emplace(world.split(layout.rank_of(role_.module, role_.stage, 0, role_.tp_rank),
                                       static_cast<int>(role_.replica)));
    tensor_parallel_.emplace(world.split(layout.rank_of(role_.module, role_.stage, role_.replica, 0),
                                         static_cast<int>(role_.tp_rank)));
    reduction_ = detail::reduction_for<Communicator>(
        stage_, layout.degrees(role_.module).distributed_optimizer && data_parallel_->size() > 1);
  }

  //! Runs one iteration of `schedule` (one chunk, `layout.positions()` ranks) on
  //! `batch`. Throws `stage_failure` for a stage that threw (after stopping every
  //! rank), `pipeline_aborted` when another rank failed, `watchdog_timeout`,
  //! `schedule_error` for a schedule that does not fit, `dflop::error` for a batch
  //! that does not (see `handoff_routes::build`) or a stage whose hand-off sizes are
  //! not per-sample sums.
  step_result step(const pipeline_schedule& schedule, const multimodal_batch& batch) {
    return detail::guarded_step(*this->world_, [&] { return run(schedule, batch); });
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
  //! What the stage's optimizer updates after a step: its shard of each gradient
  //! buffer when the module's plan shards the optimizer, the stage exposes its
  //! parameters (`has_parameters`) and the communicator can (`shards_gradients`):
  //! the step then reduce-scattered the gradients, and the next step starts by
  //! gathering the parameters. Otherwise the whole buffers (one member).
  [[nodiscard]] optimizer_shard optimizer_shard_of_stage() const noexcept {
    if (reduction_ != detail::gradient_reduction::reduce_scatter) return {};
    return {data_parallel_->size(), data_parallel_->rank()};
  }

private:
  using record = typename loop::record;
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
    return static_cast<int>(((gradient ? 1U : 0U) * this->m_ + j) * positions_ + position);
  }
  [[nodiscard]] int handoff_tag(bool gradient, std::uint32_t j, std::uint32_t e, std::uint32_t r) const noexcept {
    const std::size_t base = 2ULL * this->m_ * positions_;
    return static_cast<int>(base + (((gradient ? 1U : 0U) * this->m_ + j) * encoders_ + e) * llms_ + r);
  }
  [[nodiscard]] int broadcast_tag(bool gradient, std::uint32_t j) const noexcept {
    const std::size_t base = 2ULL * this->m_ * positions_ + 2ULL * this->m_ * encoders_ * llms_;
    return static_cast<int>(base + (gradient ? 1U : 0U) * this->m_ + j);
  }
  [[nodiscard]] std::span<const std::uint32_t> samples_of(std::uint32_t j, const multimodal_batch& batch) const {
    const std::uint32_t k = batch.slot(j);
    return role_.encoder() ? routes_.encoder_samples(role_.replica, k) : routes_.llm_samples(role_.replica, k);
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
    const std::uint64_t m = schedule.microbatches;
    this->check_schedule(schedule, 2 * m * positions_ + 2 * m * encoders_ * llms_ + 2 * m, "multimodal_executor");
  }

  // Per microbatch: where each peer's rows lie in this rank's hand-off buffer.
  void plan_handoff(const multimodal_batch& batch) {
    const std::uint32_t peers = llm_first() ? encoders_ : encoder_last() ? llms_ : 0;
    peers_ = peers;
    handoff_.assign(static_cast<std::size_t>(this->m_) * peers, handoff_bytes{});
    any_feeds_.assign(this->m_, 0);
    if (peers == 0) return;
    const std::uint32_t q = role_.replica;
    for (std::uint32_t j = 0; j < this->m_; ++j) {
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
        const auto sources = routes_.llm_sources(q, k);
        for (std::size_t p = 0; p < samples.size(); ++p)
          if (sources[p] == handoff_routes::none && offsets_[p + 1] != offsets_[p])
            throw error("multimodal_executor: sample " + std::to_string(samples[p]) + " of slot " + std::to_string(k) +
                        " has encoder input rows in the LLM but no encoder replica encodes it");
      }
      for (std::uint32_t peer = 0; peer < peers; ++peer) {
        const auto range = role_.encoder() ? routes_.encoder_range(q, peer, k) : routes_.llm_range(peer, q, k);
        auto& h = handoff_[static_cast<std::size_t>(j) * peers + peer];
        h.offset = offsets_[range.first];
        h.bytes = offsets_[range.end] - offsets_[range.first];
        h.feeds = role_.encoder() ? routes_.feeds(q, peer, k) : routes_.feeds(peer, q, k);
        if (h.feeds) any_feeds_[j] = 1;
      }
    }
  }

  void plan_receives(const pipeline_schedule& schedule, const multimodal_batch& batch) {
    routes_.build(batch, this->m_, encoders_, llms_);
    plan_handoff(batch);
    const auto& ops = schedule.rank_ops[role_.position];
    const auto sent_at = [&](op_kind kind, std::uint32_t j, std::uint32_t position) -> std::size_t {
      return this->sent_at(schedule, {kind, j, position, 0});
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
          this->receives_.add({i, sent_at(op_kind::forward, j, p - 1), rank_at(p - 1, q, t), pipeline_tag(false, j, p), j, 0,
                         in, in, false});
        } else if (t == 0) {
          for (std::uint32_t e = 0; e < encoders_; ++e)
            if (const auto& h = handoff_[static_cast<std::size_t>(j) * peers_ + e]; h.feeds)
              this->receives_.add({i, sent_at(op_kind::forward, j, p - 1), rank_at(p - 1, e, 0), handoff_tag(false, j, e, q),
                             j, h.offset, h.bytes, in, false});
        } else if (any_feeds_[j]) {
          this->receives_.add({i, i, rank_at(p, q, 0), broadcast_tag(false, j), j, 0, in, in, false});
        }
      } else if (op.kind == op_kind::backward && p + 1 < positions_) {
        const std::size_t out = output_bytes(mb);
        if (!encoder_last()) {
          this->receives_.add({i, sent_at(op_kind::backward, j, p + 1), rank_at(p + 1, q, t), pipeline_tag(true, j, p), j, 0,
                         out, out, true});
        } else if (t == 0) {
          for (std::uint32_t r = 0; r < llms_; ++r)
            if (const auto& h = handoff_[static_cast<std::size_t>(j) * peers_ + r]; h.feeds)
              this->receives_.add({i, sent_at(op_kind::backward, j, p + 1), rank_at(p + 1, r, 0), handoff_tag(true, j, q, r),
                             j, h.offset, h.bytes, out, true});
        } else if (any_feeds_[j]) {
          this->receives_.add({i, i, rank_at(p, q, 0), broadcast_tag(true, j), j, 0, out, out, true});
        }
      }
    }
    this->receives_.finish();
  }

  // TP rank 0 forwards a record buffer it assembled from hand-offs to its TP peers.
  void broadcast(const pooled_buffer& buffer, bool gradient, std::uint32_t j) {
    for (std::uint32_t u = 1; u < tp_; ++u)
      this->send(buffer.bytes(), buffer, rank_at(role_.position, role_.replica, u), broadcast_tag(gradient, j));
  }

  step_result run(const pipeline_schedule& schedule, const multimodal_batch& batch) {
    this->start_clock();
    check(schedule);
    check_recomputed("encoder_recomputed", batch.encoder_recomputed.size(), encoders_, schedule.microbatches,
                     encoder_stages_);
    check_recomputed("llm_recomputed", batch.llm_recomputed.size(), llms_, schedule.microbatches,
                     positions_ - encoder_stages_);
    batch_ = &batch;
    this->begin_step(schedule, schedule.microbatches);
    plan_receives(schedule, batch);
    // The distributed optimizer: each member updated its shard after the last
    // step; every member needs all of them before its first op.
    detail::gather_parameters(*data_parallel_, stage_, reduction_);
    return this->run_ops(schedule, schedule.rank_ops[role_.position]);
  }

  // A batch's recompute counts: none, or one per (replica, slot, stage) of the module.
  static void check_recomputed(const char* what, std::size_t given, std::uint32_t replicas, std::uint32_t m,
                               std::uint32_t stages) {
    const std::size_t expected = static_cast<std::size_t>(replicas) * m * stages;
    if (given != 0 && given != expected)
      throw error(std::string("multimodal_batch: ") + what + " has " + std::to_string(given) + " counts for " +
                  std::to_string(replicas) + " replicas x " + std::to_string(m) + " slots x " +
                  std::to_string(stages) + " stages (expected " + std::to_string(expected) + ", or none)");
  }

  // The op loop's questions (see op_loop.hpp).
  record& record_for(const pipeline_op& op) { return this->records_[op.microbatch]; }
  microbatch_view samples_for(const pipeline_op& op) const {
    return microbatch_view(batch_->samples, samples_of(op.microbatch, *batch_));
  }
  stage_type& stage_for(const pipeline_op&) noexcept { return stage_; }
  void describe(context& ctx, const pipeline_op& op) const noexcept {
    ctx.stage = role_.position;
    ctx.stages = positions_;
    ctx.replica = role_.replica;
    ctx.tp_rank = role_.tp_rank;
    ctx.tp_size = tp_;
    const auto& counts = role_.encoder() ? batch_->encoder_recomputed : batch_->llm_recomputed;
    const std::size_t m = batch_->llm_microbatches.size() / llms_;
    const std::size_t at =
        (static_cast<std::size_t>(role_.replica) * m + batch_->slot(op.microbatch)) * stages_of_module() + role_.stage;
    ctx.recomputed_layers = at < counts.size() ? counts[at] : 0;
  }
  // Stages of this rank's module.
  [[nodiscard]] std::size_t stages_of_module() const noexcept {
    return role_.encoder() ? encoder_stages_ : positions_ - encoder_stages_;
  }
  std::size_t output_bytes_for(const pipeline_op&, const microbatch_view& mb) { return output_bytes(mb); }
  // The LLM's first stage (forward) and the encoder's last (backward) pass what
  // their TP rank 0 assembled from hand-offs on to the other TP ranks.
  void before_call(const pipeline_op& op, record& rec) {
    if (role_.tp_rank != 0 || tp_ == 1 || !any_feeds_[op.microbatch]) return;
    if (op.kind == op_kind::forward && llm_first()) broadcast(rec.input, false, op.microbatch);
    if (op.kind == op_kind::backward && encoder_last()) broadcast(rec.output_grad, true, op.microbatch);
  }
  // F's output: to the same replica's next stage, or (encoder's last stage, TP
  // rank 0) each fed LLM replica's rows straight to its first stage.
  void forwarded(const pipeline_op& op, pooled_buffer& output) {
    const std::uint32_t j = op.microbatch, p = role_.position, q = role_.replica;
    if (!encoder_last()) {
      this->send(output.bytes(), output, rank_at(p + 1, q, role_.tp_rank), pipeline_tag(false, j, p + 1));
    } else if (role_.tp_rank == 0) {
      for (std::uint32_t r = 0; r < llms_; ++r)
        if (const auto& h = handoff_[static_cast<std::size_t>(j) * peers_ + r]; h.feeds)
          this->send(output.bytes().subspan(h.offset, h.bytes), output, rank_at(p + 1, r, 0), handoff_tag(false, j, q, r));
    }
  }
  // B's input gradient: to the same replica's previous stage, or (LLM's first
  // stage, TP rank 0) each feeding encoder replica the gradient of its rows.
  void backpropagated(const pipeline_op& op, pooled_buffer& input_grad) {
    const std::uint32_t j = op.microbatch, p = role_.position, q = role_.replica;
    if (!llm_first()) {
      this->send(input_grad.bytes(), input_grad, rank_at(p - 1, q, role_.tp_rank), pipeline_tag(true, j, p - 1));
    } else if (role_.tp_rank == 0) {
      for (std::uint32_t e = 0; e < encoders_; ++e)
        if (const auto& h = handoff_[static_cast<std::size_t>(j) * peers_ + e]; h.feeds)
          this->send(input_grad.bytes().subspan(h.offset, h.bytes), input_grad, rank_at(p - 1, e, 0),
                     handoff_tag(true, j, e, q));
    }
  }
  // Gradients over the (module, stage, TP rank) replicas; each LLM replica's last
  // stage counts its loss once, by TP rank 0.
  void sum_gradients() {
    detail::sum_gradients(*data_parallel_, stage_, reduction_,
                          [&](const gradient_buffer& g) { return this->overlap_.started(g); });
  }
  [[nodiscard]] Communicator& gradient_group() noexcept { return *data_parallel_; }
  [[nodiscard]] detail::gradient_reduction reduction() const noexcept { return reduction_; }
  [[nodiscard]] bool holds_loss() const noexcept { return role_.position + 1 == positions_ && role_.tp_rank == 0; }

  world_layout layout_;
  stage_type stage_;
  std::optional<Communicator> data_parallel_;
  std::optional<Communicator> tensor_parallel_;
  rank_role role_;
  std::uint32_t tp_ = 1;
  // Reduce-scatter when the module's plan shards the optimizer over a group of 2
  // or more and the stage and communicator can (`detail::reduction_for`).
  detail::gradient_reduction reduction_ = detail::gradient_reduction::all_reduce;
  std::uint32_t encoder_stages_ = 0;
  std::uint32_t positions_ = 1;
  std::uint32_t encoders_ = 0;  // encoder replicas (0 without an encoder)
  std::uint32_t llms_ = 1;      // LLM replicas
  std::uint32_t peers_ = 0;  // replicas of the other module this rank exchanges hand-offs with
  const multimodal_batch* batch_ = nullptr;  // the step's batch, while it runs
  handoff_routes routes_;
  std::vector<handoff_bytes> handoff_;  // [j * peers_ + peer]
  std::vector<char> any_feeds_;         // per microbatch: some hand-off message arrives (TP peers need a copy)
  std::vector<std::size_t> offsets_;
};

}  // namespace dflop
