// SPDX-License-Identifier: Apache-2.0
//! \file
//! One rank's stage of the torch model (model_options.hpp), as the executor sees
//! it. The libtorch code lives in one translation unit (torch_model.cpp): this
//! header has no torch include, so the planning side of the trainer compiles
//! without it (each torch translation unit costs half a minute and much memory).
//!
//! What the stage does with the executor's memory:
//! - F builds the microbatch's part of the model graph with autograd: the first
//!   encoder stage from the samples' pixels, the first LLM stage from the hand-off
//!   rows (one block per sample, copied once into a tensor) and the text tokens,
//!   other stages from `ctx.input` (one copy in). It keeps the graph per
//!   microbatch and copies its output once into `ctx.output`; the LLM's last stage
//!   sets `ctx.loss`.
//! - B runs that graph backward from `ctx.output_grad` (read in place) or the
//!   loss, accumulates weight gradients into one flat buffer (the DP sum's
//!   `gradients()`), and copies the input's gradient once into `ctx.input_grad`.
//! - With `ctx.recomputed_layers` = k (the batch's data-aware count), F runs the
//!   stage's first k layers without autograd, keeping only each one's input, and
//!   B runs them again from those inputs, last first, before backpropagating
//!   through them: the gradients are those of a run that kept everything.
//! - With a gradient bucket size, B runs one unit at a time (the head, then each
//!   layer, last first: the graph is cut at their inputs) and, in the stage's last
//!   B of the step, says each bucket of units final (`ctx.gradients_ready`) as
//!   soon as it is: its data-parallel sum then runs under the rest of that B, as
//!   the simulator predicts with `batch_options::gradient_bucket_bytes`.
//! - After every step, `update` applies Adam to the summed gradients and zeroes
//!   them. Under the distributed optimizer (the plan's `+do`), the executor
//!   reduce-scatters the gradients, `update` steps this rank's shard only, and the
//!   next step starts by gathering the parameters (`parameters()`).
#pragma once

#include "model_options.hpp"

#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/runtime/profiler.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <vector>

namespace dflop::torch_trainer {

//! One forward or backward call of a stage, timed inside the stage (what the
//! fitted cost model is checked against): which samples of the batch it ran.
struct op_record {
  bool forward = true;                 //!< F, or B
  std::uint32_t microbatch = 0;        //!< schedule position
  std::vector<std::uint32_t> samples;  //!< indices into the step's batch
  double seconds = 0;                  //!< wall time of the call
  double cpu_seconds = 0;              //!< CPU time of the call on its thread (cpu_clock.hpp)
  std::uint32_t recomputed_layers = 0; //!< the stage's first layers recomputed for this microbatch (`stage_context`)
};

//! A stage of the torch model: the layers [first_layer, end_layer) of its module
//! (and the embedding / projector / head where `slice` says) of `assignment`.
class torch_stage {
public:
  //! Builds the stage's parameters (deterministic: layer l of a module starts the
  //! same everywhere). With `gradient_bucket_bytes` > 0 the gradients come in
  //! buckets of at least that many bytes, each said final as B finishes it (the
  //! plan's `batch.gradient_bucket_bytes`, so the prediction prices what runs);
  //! 0: one buffer, summed after the step's last op.
  torch_stage(const stage_assignment& assignment, const model_options& options, double gradient_bucket_bytes = 0);
  ~torch_stage();
  torch_stage(torch_stage&&) noexcept;
  torch_stage& operator=(torch_stage&&) noexcept;

  //! Input activation bytes: previous stage's rows (LLM first stage: the hand-off rows; none on position 0).
  [[nodiscard]] std::size_t input_bytes(const microbatch_view& mb) const;
  //! Output activation bytes: this stage's rows (encoder last stage: projected rows); none on the LLM's last.
  [[nodiscard]] std::size_t output_bytes(const microbatch_view& mb) const;
  //! F (see the file comment).
  void forward(stage_context& ctx);
  //! B (see the file comment).
  void backward(stage_context& ctx);
  //! The flat weight-gradient buffer as its buckets (one without a bucket size),
  //! summed over the data-parallel group by the executor.
  [[nodiscard]] std::span<const gradient_buffer> gradients() const noexcept;

  //! Before a step: the loss is summed cross-entropy over `targets` predicted
  //! tokens of the whole global batch, divided by it (a mean over the batch).
  void begin_step(double targets);
  //! After a step: one Adam step on the summed gradients, which are then zeroed;
  //! under the distributed optimizer only on this rank's shard of each bucket
  //! (`plan_runner::optimizer_shard_of_stage`), whose values the next step gathers.
  void update(const optimizer_shard& shard = {});
  //! The flat parameter buffer in the gradients' buckets (`has_parameters`: the
  //! distributed optimizer gathers them at each step's start).
  [[nodiscard]] std::span<const gradient_buffer> parameters() const noexcept;
  //! The F and B calls of the last step (cleared by `begin_step`).
  [[nodiscard]] std::span<const op_record> records() const noexcept;
  //! Parameters this stage holds.
  [[nodiscard]] std::size_t parameter_count() const noexcept;
  //! What this stage is.
  [[nodiscard]] const stage_assignment& assignment() const noexcept;

  //! The libtorch side (torch_model.cpp; its profiling targets reach the model's parts).
  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

static_assert(pipeline_stage<torch_stage>);

//! Predicted tokens of `batch` (the loss's divisor): every text token but a text-only sample's first.
[[nodiscard]] std::int64_t predicted_tokens(std::span<const sample> batch, const model_options& options);

//! The single-process run of the same model on the same batches: all of each
//! batch in one piece through the whole model (no executor, no pipeline, no
//! microbatches), one Adam step per batch. Returns each batch's loss.
[[nodiscard]] std::vector<double> reference_losses(std::span<const std::vector<sample>> batches,
                                                   const model_options& options);

//! Heap bytes the whole `kind` module (its embedding, layers and projector or
//! head) holds after the forward of each of `microbatches` in turn, none
//! backpropagated yet, with its first `recomputed` layers recomputed: what a
//! stage holding them all keeps for its backward, measured (glibc's in-use
//! bytes, libtorch's CPU allocator has no cache), after one untimed pass that
//! makes the once-only tensors. Single-threaded, deterministic for fixed inputs.
[[nodiscard]] std::vector<std::size_t> held_bytes(const model_options& options, module_kind kind,
                                                  std::span<const std::vector<sample>> microbatches,
                                                  std::uint32_t recomputed);

//! Sizes the profile is measured at: encoder tokens (multiples of patches_per_item) and LLM tokens.
struct profile_sizes {
  std::vector<double> encoder_tokens;  //!< at least 3, or none: the encoder's parts are not profiled
  std::vector<double> llm_tokens;      //!< at least 3, or none: the LLM's parts are not profiled
};

//! Profiles every part of the model with `dflop::profiler` at TP 1 (one thread):
//! encoder layer, patch embedding, projector, LM layer, token embedding, LM head
//! (final norm, head and loss). Times wall time, or with `cpu_clock` the thread's
//! CPU time (thread_cpu_timer: what the op costs whatever else runs on a shared
//! machine), after writing `flush_bytes` of other memory before each timed run (cold
//! caches, as a pipelined stage meets them). With `passes` > 1 it profiles the
//! whole grid that many times, one pass after the other (sizes in another order
//! each pass), and keeps per point the median over the passes of each pass's
//! median: the repeats of a point then span the whole profile's time, not one
//! burst, so a machine whose speed drifts with other jobs is seen at its typical
//! speed. Returns the profile (`write_profile_file` saves it).
[[nodiscard]] profile profile_model(const model_options& options, const profile_sizes& sizes,
                                    const profiler_options& profiling, bool cpu_clock = false,
                                    std::size_t flush_bytes = 0, int passes = 1);

//! Sets libtorch's intra-op threads for the calling thread (OpenMP's count is
//! per thread): 1 on every rank's thread, the ranks are the parallelism.
void set_torch_threads(int threads);

}  // namespace dflop::torch_trainer
