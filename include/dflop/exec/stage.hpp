// SPDX-License-Identifier: Apache-2.0
//! \file
//! The `pipeline_stage` concept: what a user's model stage provides so the
//! executor can run it, and the `stage_context` every call receives.
//!
//! A stage is a functor with
//! - `void forward(stage_context&)`: reads `ctx.input` (empty on the first stage,
//!   which loads its data from `ctx.samples`), writes `ctx.output` (empty on the
//!   last stage, which writes the microbatch's loss to `ctx.loss`);
//! - `void backward(stage_context&)`: reads `ctx.output_grad` (empty on the last
//!   stage, which starts from its loss) and `ctx.input`, writes `ctx.input_grad`
//!   (empty on the first stage) and accumulates its weight gradients, unless it
//!   also has
//! - `void weight(stage_context&)` (optional): the weight gradient alone, run as
//!   the W op of schedules that split the backward (zero bubble);
//! - `std::size_t input_bytes(const microbatch_view&) const` and
//!   `std::size_t output_bytes(const microbatch_view&) const`: the sizes of its
//!   input and output activations (and so of their gradients) for a microbatch.
//!   Every rank computes them from the samples: shapes never travel;
//! - `gradients()`: its gradient memory, summed over data-parallel replicas after
//!   the step (a `std::span<double>`, `std::span<float>` or a range of `gradient_buffer`).
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/gradient_shard.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/schedule/op.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

namespace dflop {

//! The execution resource of host communicators: the calling thread.
struct host_thread {
  friend bool operator==(const host_thread&, const host_thread&) = default;
};

namespace detail {
//! Per-op memory the executor (or the sequential reference) lends a stage.
class stage_memory {
public:
  //! A block kept until the microbatch's last backward op on this stage.
  virtual std::span<std::byte> stash(std::size_t bytes) = 0;
  //! The `index`-th block stashed for this (microbatch, stage).
  virtual std::span<std::byte> stashed(std::size_t index) = 0;
  //! A block valid until the op returns.
  virtual std::span<std::byte> scratch(std::size_t bytes) = 0;

protected:
  stage_memory() = default;
  stage_memory(const stage_memory&) = default;
  stage_memory& operator=(const stage_memory&) = default;
  ~stage_memory() = default;
};

//! Where a stage's final gradient buffers go as it produces them: the executor's
//! overlapped data-parallel reduction (exec/detail/gradient_overlap.hpp).
class gradient_sink {
public:
  //! `buffer` holds its final gradients for the step.
  virtual void ready(const gradient_buffer& buffer) = 0;

protected:
  gradient_sink() = default;
  gradient_sink(const gradient_sink&) = default;
  gradient_sink& operator=(const gradient_sink&) = default;
  ~gradient_sink() = default;
};
}  // namespace detail

//! Everything a stage call is told: which op, microbatch, stage and replica, the
//! microbatch's samples, its activation and gradient memory, where it runs
//! (`resource`: the thread, or a CUDA stream) and a buffer allocator.
template <class Resource>
struct basic_stage_context {
  op_kind kind = op_kind::forward;  //!< which op this call is
  std::uint32_t microbatch = 0;     //!< position in the schedule (0-based)
  std::uint32_t stage = 0;          //!< model stage (chunk * ranks + pipeline rank; multimodal: position, encoder first)
  std::uint32_t stages = 1;         //!< model stages in the pipeline (multimodal: encoder + LLM stages)
  std::uint32_t replica = 0;        //!< data-parallel replica (of its module, in a multimodal run)
  std::uint32_t tp_rank = 0;        //!< rank within the stage's tensor-parallel group (the stage splits its own math)
  std::uint32_t tp_size = 1;        //!< ranks in that group; all of them run the same ops
  int rank = 0;                     //!< this process's (or thread's) rank in the world
  microbatch_view samples;          //!< the microbatch's samples: every shape derives from them
  std::span<const std::byte> input;        //!< F, B, W: the activation received from the previous stage
  std::span<std::byte> output;             //!< F: the activation for the next stage
  std::span<const std::byte> output_grad;  //!< B, W: the gradient received from the next stage
  std::span<std::byte> input_grad;         //!< B: the gradient for the previous stage
  double loss = 0;                         //!< F on the last stage: the microbatch's loss
  Resource resource{};                     //!< where the work runs (thread or stream)
  detail::stage_memory* memory = nullptr;  //!< the allocator behind stash/scratch
  //! B or W: this is the stage's last gradient-producing op of the step (the last
  //! B, or the last W when the schedule splits the backward and the stage has a
  //! weight pass): its gradients become final as this op writes them.
  bool final_gradients = false;
  detail::gradient_sink* gradient_sink = nullptr;  //!< the executor's overlapped reduction (null: none)
  //! How many of this stage's first layers recompute their forward for this
  //! microbatch (F keeps only their inputs, B recomputes them); 0: keep every
  //! layer's activations. The batch's data-aware count
  //! (`batch_schedule::encoder_recomputed` / `llm_recomputed`: at most the
  //! plan's, fewer where what the stage holds at once allows), the same in
  //! every op of one microbatch: what the prediction priced and the memory
  //! budget was checked with.
  std::uint32_t recomputed_layers = 0;

  //! First model stage (no input activation)?
  [[nodiscard]] bool first_stage() const noexcept { return stage == 0; }
  //! Last model stage (computes the loss)?
  [[nodiscard]] bool last_stage() const noexcept { return stage + 1 == stages; }
  //! Memory kept for this (microbatch, stage) until its last backward op; from the
  //! executor's pool, so reused across steps.
  [[nodiscard]] std::span<std::byte> stash(std::size_t bytes) const { return memory->stash(bytes); }
  //! The `index`-th block this (microbatch, stage) stashed, in stash order.
  [[nodiscard]] std::span<std::byte> stashed(std::size_t index = 0) const { return memory->stashed(index); }
  //! Scratch memory valid until the call returns.
  [[nodiscard]] std::span<std::byte> scratch(std::size_t bytes) const { return memory->scratch(bytes); }
  //! Says that `buffer`, one of `gradients()`'s, holds its final gradients, so
  //! its data-parallel sum may start now and overlap the rest of this op (the
  //! way Megatron-LM and DDP overlap it): call it only while `final_gradients`,
  //! as each bucket of layers finishes, then leave the buffer untouched until
  //! the step ends. Every replica of the stage must say the same buffers in the
  //! same order. Buffers never said final are summed after the last op, as
  //! before; without an executor (the sequential reference: no sink) this does
  //! nothing. Throws `dflop::error` outside the last gradient-producing op.
  void gradients_ready(const gradient_buffer& buffer) const {
    if (gradient_sink == nullptr) return;
    if (!final_gradients)
      throw error(std::string("gradients_ready: called in a ") + kind_letter(kind) + " op of microbatch " +
                  std::to_string(microbatch) + " on stage " + std::to_string(stage) +
                  ", which is not the stage's last gradient-producing op of the step (see final_gradients)");
    gradient_sink->ready(buffer);
  }
};

//! The context of host stages (threads and MPI processes).
using stage_context = basic_stage_context<host_thread>;

//! Views `bytes` as an array of T (activations are byte buffers; stages know their types).
template <class T, class Byte>
  requires std::same_as<std::remove_const_t<Byte>, std::byte>
[[nodiscard]] auto as_span(std::span<Byte> bytes) noexcept {
  using element = std::conditional_t<std::is_const_v<Byte>, const T, T>;
  return std::span<element>(reinterpret_cast<element*>(bytes.data()), bytes.size() / sizeof(T));
}

//! Whether a stage has a separate weight-gradient pass (`weight(ctx)`).
template <class Stage, class Context = stage_context>
concept has_weight_pass = requires(Stage& stage, Context& ctx) { stage.weight(ctx); };

//! A model stage the executor can run with contexts of type `Context` (see the file comment).
template <class Stage, class Context = stage_context>
concept pipeline_stage = requires(Stage& stage, const Stage& const_stage, Context& ctx, const microbatch_view& mb) {
  stage.forward(ctx);
  stage.backward(ctx);
  { const_stage.input_bytes(mb) } -> std::convertible_to<std::size_t>;
  { const_stage.output_bytes(mb) } -> std::convertible_to<std::size_t>;
  { stage.gradients() } -> gradient_list;
};

//! Whether a stage exposes its parameters, for the distributed optimizer: a
//! `gradient_list` whose buffers match `gradients()`'s one for one (same counts
//! and types, in the same order). When its module's plan shards the optimizer
//! (`module_parallelism::distributed_optimizer`) and the communicator can
//! (`shards_gradients`), the multimodal executor reduce-scatters the gradients
//! instead of all-reducing them, so the stage must update only its shard of each
//! buffer (`optimizer_shard`, exec/gradient_shard.hpp), and all-gathers the
//! parameters at the next step's start.
template <class Stage>
concept has_parameters = requires(Stage& stage) {
  { stage.parameters() } -> gradient_list;
};

//! Which part of each gradient buffer a stage's optimizer updates after a step:
//! member `member` of `members` (`shard_of(buffer.count, members, member)`: its
//! shard and the common remainder); 1 member (the default): the whole buffer.
struct optimizer_shard {
  int members = 1;  //!< the data-parallel group's size when sharded, else 1
  int member = 0;   //!< this rank's place in it

  //! The part of a buffer of `count` elements to update.
  [[nodiscard]] constexpr gradient_shard of(std::size_t count) const noexcept { return shard_of(count, members, member); }
  friend bool operator==(const optimizer_shard&, const optimizer_shard&) = default;
};

namespace detail {
template <class Stage, class Context>
concept has_forward = requires(Stage& stage, Context& ctx) { stage.forward(ctx); };
template <class Stage, class Context>
concept has_backward = requires(Stage& stage, Context& ctx) { stage.backward(ctx); };
template <class Stage>
concept has_input_bytes = requires(const Stage& stage, const microbatch_view& mb) {
  { stage.input_bytes(mb) } -> std::convertible_to<std::size_t>;
};
template <class Stage>
concept has_output_bytes = requires(const Stage& stage, const microbatch_view& mb) {
  { stage.output_bytes(mb) } -> std::convertible_to<std::size_t>;
};
template <class Stage>
concept has_gradients = requires(Stage& stage) {
  { stage.gradients() } -> gradient_list;
};

//! Names the first member a stage lacks, in words (instead of a page of template errors).
template <class Stage, class Context>
consteval bool check_stage() {
  static_assert(has_forward<Stage, Context>,
                "dflop: a pipeline stage needs `void forward(dflop::stage_context&)` "
                "(or the basic_stage_context of its communicator)");
  static_assert(has_backward<Stage, Context>,
                "dflop: a pipeline stage needs `void backward(dflop::stage_context&)` "
                "(or the basic_stage_context of its communicator)");
  static_assert(has_input_bytes<Stage>,
                "dflop: a pipeline stage needs `std::size_t input_bytes(const dflop::microbatch_view&) const`");
  static_assert(has_output_bytes<Stage>,
                "dflop: a pipeline stage needs `std::size_t output_bytes(const dflop::microbatch_view&) const`");
  static_assert(has_gradients<Stage>,
                "dflop: a pipeline stage needs `gradients()` returning std::span<double>, std::span<float> or "
                "a range of dflop::gradient_buffer");
  return true;
}
}  // namespace detail

}  // namespace dflop
