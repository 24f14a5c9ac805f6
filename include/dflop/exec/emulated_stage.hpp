// SPDX-License-Identifier: Apache-2.0
//! \file
//! A stage that emulates a device: it holds no model, sleeps each op for the
//! time the plan's cost model gives it (the batch's own per-op costs, scaled),
//! and passes real activation and gradient bytes of the sizes the model implies
//! (scaled down) through the executor. Running a plan with it exercises every
//! message, hand-off, TP broadcast and gradient sum the plan implies and
//! measures the iteration time the schedule, packing and communication really
//! give, on CPUs: what the simulator predicts can be checked by running it.
//!
//! Each sample's block of every activation and gradient starts with a stamp
//! (its batch index and the direction), checked where it arrives, and every
//! received buffer must have the size the samples imply, so a message routed to
//! the wrong rank or offset, or one missing, is an error, not noise.
//!
//! Not emulated: link time. Point-to-point transfers, hand-offs and TP
//! broadcasts move at memory speed, while the prediction adds their modelled
//! link time (small against compute on NVLink; on multi-node plans measured
//! times come out below predicted by up to the critical path's transfers).
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/util/precise_sleep.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! How an emulated device scales time and bytes.
struct emulation_options {
  //! Each op sleeps its cost-model time times this (1: real time; 0.01: a 1 s
  //! iteration in 10 ms). Keep ops above a millisecond: sleeps are not precise below.
  double time_scale = 1;
  //! Activation bytes moved, as a fraction of the model's (`element_bytes` per
  //! element, per TP rank); each sample's block is rounded up to whole 8-byte
  //! words, at least one.
  double byte_scale = 1.0 / 1024;
  //! Bytes per activation element of the emulated model: keep it the memory
  //! model's (`activation_element_bytes`), 2 for bf16.
  double element_bytes = 2;
};

//! A device-less stage for any rank of a plan (see the file comment). Call
//! `begin_step(batch)` before every `plan_runner::step(batch, samples)`.
class emulated_stage {
public:
  //! The stage `assignment` names, for `model`'s shapes.
  emulated_stage(const stage_assignment& assignment, const multimodal_spec& model, emulation_options options = {})
      : assignment_(assignment), options_(options) {
    if (!(options.time_scale >= 0) || !std::isfinite(options.time_scale))
      throw input_error("time_scale", 0, "must be finite and >= 0");
    if (!(options.byte_scale > 0) || !std::isfinite(options.byte_scale))
      throw input_error("byte_scale", 0, "must be finite and > 0");
    if (!(options.element_bytes > 0) || !std::isfinite(options.element_bytes))
      throw input_error("element_bytes", 0, "must be finite and > 0");
    const double tp = assignment.tp_size;
    const double scale = options.element_bytes * options.byte_scale;
    encoder_bytes_per_token_ = static_cast<double>(model.encoder.hidden) * scale / tp;
    llm_bytes_per_token_ = static_cast<double>(model.llm.hidden) * scale / tp;
    // The hand-off moves projected tokens (LLM width) whole to TP rank 0, then to its peers.
    handoff_bytes_per_token_ = static_cast<double>(model.llm.hidden) * scale;
    (void)sleep_overshoot();  // calibrated now, not inside the first op
  }

  //! The batch whose op costs the next step sleeps (the one `step` will run).
  void begin_step(const batch_schedule& batch) {
    const module_costs& costs = assignment_.role.encoder() ? batch.costs.encoder : batch.costs.llm;
    const std::uint32_t stage = assignment_.role.stage;
    if (stage >= costs.stages || assignment_.role.replica >= costs.replicas)
      throw input_error("batch_schedule", 0,
                        "emulated_stage (" + to_string_role() + "): the batch was scheduled for " +
                            std::to_string(costs.stages) + " stages x " + std::to_string(costs.replicas) +
                            " replicas of this module");
    batch_ = &batch;
    calls_ = 0;
    final_started_ = final_ended_ = {};
    gathered_ = false;
    gather_seconds_ = costs.parameter_gather_seconds(stage);
    const auto reduction = costs.gradient_reduction(stage, batch.costs.gradient_bucket_bytes);
    buckets_ = std::max(1.0, static_cast<double>(reduction.buckets));
    sync_seconds_ = reduction.bucket_seconds;
  }

  //! Input activation bytes: the previous stage's output for these samples.
  [[nodiscard]] std::size_t input_bytes(const microbatch_view& mb) const {
    const auto& role = assignment_.role;
    if (role.stage > 0) return sum(mb, input_block());
    return role.position == 0 ? 0 : sum(mb, &emulated_stage::handoff_block);  // a first stage embeds its own input
  }
  //! Output activation bytes: this stage's activations, the hand-off rows on the
  //! encoder's last stage, none on the LLM's last.
  [[nodiscard]] std::size_t output_bytes(const microbatch_view& mb) const {
    const auto& role = assignment_.role;
    if (role.position + 1 == assignment_.positions) return 0;
    return sum(mb, output_block());
  }

  //! F: checks the input's stamps, sleeps the forward, stamps the output. The
  //! last stage's loss is the sum of (batch index + 1) over its samples, so a
  //! step's loss is N (N + 1) / 2 exactly when every sample ran once.
  template <class Context>
  void forward(Context& ctx) {
    check(ctx.input, ctx.samples, input_block(), forward_stamp, "input activation", input_bytes(ctx.samples));
    finish_op(cost(module().forward, ctx));
    stamp(ctx.output, ctx.samples, output_block(), forward_stamp);
    if (ctx.last_stage()) {
      ctx.loss = 0;
      for (std::uint32_t i : ctx.samples.indices()) ctx.loss += static_cast<double>(i) + 1;
    }
  }
  //! B: checks the output gradient's stamps, sleeps the backward (the whole of it
  //! when the schedule does not split it: the batch then prices no W), stamps the input gradient.
  template <class Context>
  void backward(Context& ctx) {
    check(ctx.output_grad, ctx.samples, output_block(), backward_stamp, "output gradient", output_bytes(ctx.samples));
    final_op(ctx, false, [&] { finish_op(cost(module().backward, ctx)); });
    stamp(ctx.input_grad, ctx.samples, input_block(), backward_stamp);
  }
  //! W: sleeps the weight-gradient time (split schedules; otherwise the executor
  //! calls it right after B and the batch prices it 0).
  template <class Context>
  void weight(Context& ctx) {
    final_op(ctx, true, [&] { finish_op(cost(module().weight, ctx)); });
  }
  //! One value, summed over the data-parallel group like real gradients. The
  //! executor reads it once after a step's last op, before the sum: the first
  //! read then sleeps the emulated all-reduce, which the simulator starts when
  //! every replica of the stage has finished and its last messages are out.
  //! With buckets (`multimodal_costs::gradient_bucket_bytes`) the value was said
  //! final in the last gradient-producing op and is summed then; the read sleeps
  //! until this replica's bucketed reduction, timed from that op as the
  //! simulator times it, would end.
  [[nodiscard]] std::span<double> gradients() {
    if (batch_ && calls_ == 3 * batch_->costs.microbatches) {
      ++calls_;
      if (buckets_ <= 1) {
        if (sync_seconds_ > 0) sleep_precisely(sync_seconds_ * options_.time_scale);
      } else if (final_ended_ != clock::time_point{}) {
        sleep_until(bucketed_end());
      }
    }
    return {&gradient_, 1};
  }
  //! One value, gathered over the data-parallel group at a step's start when
  //! the plan shards the optimizer (`module_costs::sharded_parameter_bytes`):
  //! the first read of a step sleeps the emulated all-gather, which the
  //! simulator has every replica's first op wait for.
  [[nodiscard]] std::span<double> parameters() {
    if (batch_ && !gathered_ && calls_ == 0) {
      gathered_ = true;
      if (gather_seconds_ > 0) sleep_precisely(gather_seconds_ * options_.time_scale);
    }
    return {&parameter_, 1};
  }

  //! What this stage stands for.
  [[nodiscard]] const stage_assignment& assignment() const noexcept { return assignment_; }

private:
  using block_bytes = std::size_t (emulated_stage::*)(const sample&) const;
  static constexpr std::uint64_t forward_stamp = 0xF0F0'0000'0000'0000ULL;
  static constexpr std::uint64_t backward_stamp = 0xB0B0'0000'0000'0000ULL;

  static std::size_t words(double bytes) {
    return bytes <= 0 ? 0 : 8 * std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(bytes / 8)));
  }
  std::size_t encoder_block(const sample& s) const {
    return words(static_cast<double>(s.encoder_tokens) * encoder_bytes_per_token_);
  }
  std::size_t llm_block(const sample& s) const { return words(static_cast<double>(s.llm_tokens) * llm_bytes_per_token_); }
  std::size_t handoff_block(const sample& s) const {
    return words(static_cast<double>(s.encoder_tokens) * handoff_bytes_per_token_);
  }
  std::size_t sum(const microbatch_view& mb, block_bytes block) const {
    std::size_t total = 0;
    for (const sample& s : mb) total += (this->*block)(s);
    return total;
  }
  // The encoder's last stage: its output is the hand-off.
  [[nodiscard]] bool last_in_module() const noexcept {
    const auto& role = assignment_.role;
    return role.encoder() && static_cast<int>(role.stage) + 1 == assignment_.degrees.pp;
  }
  // Per-sample block sizes of this stage's input and output.
  [[nodiscard]] block_bytes input_block() const noexcept {
    const auto& role = assignment_.role;
    if (role.stage > 0) return role.encoder() ? &emulated_stage::encoder_block : &emulated_stage::llm_block;
    return &emulated_stage::handoff_block;
  }
  [[nodiscard]] block_bytes output_block() const noexcept {
    if (assignment_.role.encoder()) return last_in_module() ? &emulated_stage::handoff_block : &emulated_stage::encoder_block;
    return &emulated_stage::llm_block;
  }

  void stamp(std::span<std::byte> bytes, const microbatch_view& mb, block_bytes block, std::uint64_t direction) const {
    std::size_t at = 0;
    for (std::size_t p = 0; p < mb.size() && at < bytes.size(); ++p) {
      const std::size_t size = (this->*block)(mb[p]);
      if (size == 0) continue;
      const std::uint64_t value = direction | mb.indices()[p];
      std::memcpy(bytes.data() + at, &value, sizeof value);
      at += size;
    }
  }
  void check(std::span<const std::byte> bytes, const microbatch_view& mb, block_bytes block, std::uint64_t direction,
             const char* what, std::size_t expected) const {
    if (bytes.size() != expected)
      throw error("emulated_stage (" + to_string_role() + "): the " + what + " has " + std::to_string(bytes.size()) +
                  " bytes, its samples imply " + std::to_string(expected) + ": a message is missing or misrouted");
    std::size_t at = 0;
    for (std::size_t p = 0; p < mb.size() && at < bytes.size(); ++p) {
      const std::size_t size = (this->*block)(mb[p]);
      if (size == 0) continue;
      std::uint64_t value = 0;
      std::memcpy(&value, bytes.data() + at, sizeof value);
      if (value != (direction | mb.indices()[p]))
        throw error("emulated_stage (" + to_string_role() + "): the " + what + " block of sample " +
                    std::to_string(mb.indices()[p]) + " carries another sample's or direction's stamp: a message "
                    "went to the wrong rank or offset");
      at += size;
    }
  }
  [[nodiscard]] std::string to_string_role() const {
    const auto& role = assignment_.role;
    return std::string(role.encoder() ? "encoder" : "llm") + " stage " + std::to_string(role.stage) + " replica " +
           std::to_string(role.replica) + " tp " + std::to_string(role.tp_rank);
  }

  [[nodiscard]] const module_costs& module() const {
    if (!batch_) throw error("emulated_stage: begin_step(batch) was not called before the step");
    return assignment_.role.encoder() ? batch_->costs.encoder : batch_->costs.llm;
  }
  template <class Context>
  [[nodiscard]] double cost(const std::vector<double>& values, const Context& ctx) const {
    if (values.empty()) return 0;
    const module_costs& costs = module();
    const std::uint32_t slot = batch_->slot_order.empty() ? ctx.microbatch : batch_->slot_order[ctx.microbatch];
    return values[costs.at(ctx.replica, slot, assignment_.role.stage, batch_->costs.microbatches)];
  }
  using clock = std::chrono::steady_clock;

  // Runs `sleep` (a B or W); in the stage's last gradient-producing op, also
  // notes when that op ran. Its W call comes last (right after B when the
  // schedule does not split), so with buckets it says the gradient final there.
  template <class Context, class Sleep>
  void final_op(Context& ctx, bool is_weight, Sleep&& sleep) {
    if (!ctx.final_gradients) return sleep();
    if (final_started_ == clock::time_point{}) final_started_ = clock::now();  // B then W: from B's start
    sleep();
    final_ended_ = clock::now();
    if (is_weight && buckets_ > 1) ctx.gradients_ready(gradient_buffer::of(std::span<double>(&gradient_, 1)));
  }
  // When n buckets of t seconds, final evenly over [s, e), are reduced: e + t
  // when t <= (e - s) / n, else s + (e - s) / n + n t.
  [[nodiscard]] clock::time_point bucketed_end() const {
    const double op = std::chrono::duration<double>(final_ended_ - final_started_).count();
    const double t = sync_seconds_ * options_.time_scale;
    const double after_start = t <= op / buckets_ ? op + t : op / buckets_ + buckets_ * t;
    return final_started_ + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(after_start));
  }
  static void sleep_until(clock::time_point when) {
    const double left = std::chrono::duration<double>(when - clock::now()).count();
    if (left > 0) sleep_precisely(left);
  }

  // Sleeps one call's scaled time. The executor calls F, B and W once per
  // microbatch (W right after B when not split): `calls_` tells when the last has run.
  void finish_op(double seconds) {
    ++calls_;
    if (seconds > 0) sleep_precisely(seconds * options_.time_scale);
  }

  stage_assignment assignment_;
  emulation_options options_;
  double encoder_bytes_per_token_ = 0;
  double llm_bytes_per_token_ = 0;
  double handoff_bytes_per_token_ = 0;
  const batch_schedule* batch_ = nullptr;
  std::uint32_t calls_ = 0;
  double sync_seconds_ = 0;  // the whole all-reduce (reduce-scatter when sharded), or one bucket's with buckets
  double gather_seconds_ = 0;  // the distributed optimizer's parameter all-gather (0: not sharded)
  bool gathered_ = false;      // this step's parameters were read
  double buckets_ = 1;       // buckets the stage's gradients are reduced in
  clock::time_point final_started_{}, final_ended_{};  // the last gradient-producing op
  double gradient_ = 0;
  double parameter_ = 0;
};
static_assert(pipeline_stage<emulated_stage>);

}  // namespace dflop
