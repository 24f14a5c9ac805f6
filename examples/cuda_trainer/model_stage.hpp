// SPDX-License-Identifier: Apache-2.0
//! \file
//! One rank's stage of the trainer's model (model.hpp), for either module: the
//! layers [first_layer, end_layer) its `stage_assignment` names, run through a
//! backend that either launches the functors as CUDA kernels on the rank's
//! stream (`device_backend`, device_backend.cuh) or loops over them on the host
//! (`host_backend`, host_backend.hpp: the same stage checked on a CPU).
//!
//! What it does with the executor's buffers, all in work ordered on `ctx.resource`:
//! - F stashes every layer's activation (one block), writes the last one to
//!   `ctx.output` or, on the LLM's last stage, adds the microbatch's loss to a
//!   device value: the loss stays on the device during the step (`ctx.loss` is 0);
//! - B walks the layers back, adds each weight gradient into the stage's
//!   gradient buffer (device memory; the executor sums it over the data-parallel
//!   group) and writes `ctx.input_grad`. With a gradient bucket size (the plan's
//!   `batch.gradient_bucket_bytes`), the stage's last B says each bucket of layers
//!   final as soon as its kernels are queued, so its sum overlaps the rest of B.
//! - Per-microbatch row tables (which sample and row each activation row is) are
//!   built on the host and copied into scratch memory on the stream.
//! After every step call `finish_step` (reads the loss once, waiting for the
//! stream) and then `update` (SGD, zeroes the gradients), both with the
//! runner's `optimizer_shard_of_stage()`: under the distributed optimizer
//! (`parameters()` mirrors the gradient buckets) each replica holds the sum of
//! its shard of each bucket only, counts only that in the gradient norm and
//! steps only that; the executor gathers the parameters at the next step's start.
//!
//! Tensor parallelism: every rank of a TP group computes the whole stage (the
//! executor hands each the same inputs); a real stage would split its matrices
//! over the executor's `tensor_group()`. Only TP rank 0 reports the loss.
#pragma once

#include "model.hpp"

#include <dflop/error.hpp>
#include <dflop/exec/gradient_buckets.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/exec/stage.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop::cuda_trainer {

//! What `finish_step` reads back: this rank's share of the step's figures.
struct stage_figures {
  double loss = 0;  //!< the loss of the step's microbatches (LLM last stage, TP rank 0; else 0)
  //! Sum of squared (summed) gradients, each counted once over the world: TP
  //! rank 0 of replica 0 of each stage, or, sharded, of every replica over its
  //! shards (the common remainders by member 0); else 0.
  double gradient_squares = 0;
};

//! A stage of the trainer's model over `Backend` (see the file comment). The
//! backend provides `resource_type`, `array` (owning double memory), `launch`,
//! `table`, `copy`, `zero`, `read` and `end_step`.
template <class Backend>
class model_stage {
public:
  //! Where its work runs: a CUDA stream, or the host thread.
  using resource_type = typename Backend::resource_type;

  //! The stage `assignment` names (layers [first_layer, end_layer) of its
  //! module); gradients in buckets of at least `gradient_bucket_bytes`, each a
  //! run of layers, said final in the last B (0: one buffer, summed after the step).
  model_stage(const stage_assignment& assignment, const model_options& options, Backend backend = Backend{},
              double gradient_bucket_bytes = 0)
      : assignment_(assignment), options_(options), backend_(std::move(backend)),
        layers_(static_cast<std::size_t>(assignment.end_layer - assignment.first_layer)),
        parameters_(initial_parameters(assignment, options.hidden)),
        gradients_(std::vector<double>(parameters_.size(), 0.0)),
        loss_(std::vector<double>(1, 0.0)),
        // Partial sums of squares: one per chunk of each range summed (each of
        // at most one bucket per layer has a shard and a remainder, each starting
        // a chunk), then their total.
        squares_(std::vector<double>(squares_chunks() + 2 * std::max<std::size_t>(1, layers_) + 1, 0.0)) {
    if (options.hidden == 0 || options.tokens_per_row <= 0)
      throw input_error("model", 0, "hidden and tokens_per_row must be positive");
    // B finishes layer l's gradient [l P, (l + 1) P), last layer first. The buffers
    // point into `gradients_`, whose memory moves with the stage.
    std::vector<gradient_unit> units;
    const std::size_t per_layer = layer_parameters(hidden());
    for (std::size_t l = layers_; l-- > 0;) units.push_back({l * per_layer, (l + 1) * per_layer});
    buckets_ = gradient_buckets(gradient_buffer::of(std::span<double>(gradients_.data(), gradients_.size())), units,
                                layers_ == 0 ? 0.0 : gradient_bucket_bytes);
    for (const gradient_buffer& bucket : buckets_.buffers())
      parameter_buckets_.push_back(
          gradient_buffer::of(std::span<double>(parameters_.data() + offset_of(bucket), bucket.count)));
  }

  //! Input activation bytes: the previous stage's rows (the hand-off: encoder rows; none on position 0).
  [[nodiscard]] std::size_t input_bytes(const microbatch_view& mb) const {
    const auto& role = assignment_.role;
    if (role.position == 0) return 0;
    if (role.stage > 0) return bytes(rows_of(mb, role.module));
    return bytes(rows_of(mb, module_kind::encoder));  // the LLM's first stage receives the hand-off
  }
  //! Output activation bytes: this stage's rows; none on the LLM's last stage.
  [[nodiscard]] std::size_t output_bytes(const microbatch_view& mb) const {
    if (last_position()) return 0;
    return bytes(rows_of(mb, assignment_.role.module));
  }

  //! F: embeds (a module's first stage), runs the layers, sends the last rows on or adds the loss.
  template <class Context>
  void forward(Context& ctx) {
    const std::size_t rows = rows_of(ctx.samples, module());
    const std::size_t n = rows * hidden();
    auto activations = as_span<double>(ctx.stash(bytes(rows) * (layers_ + 1)));
    double* x0 = activations.data();
    const row_info* table = nullptr;
    if (module_first()) {
      table = upload_rows(ctx);
      if (module() == module_kind::encoder) {
        backend_.launch(ctx.resource, n, embed_encoder{table, x0, hidden()});
      } else {
        expect(ctx.input.size(), input_bytes(ctx.samples), "input");
        const auto* handoff = has_handoff() ? as_span<double>(ctx.input).data() : nullptr;
        backend_.launch(ctx.resource, n, embed_llm{table, handoff, x0, hidden()});
      }
    } else {
      expect(ctx.input.size(), bytes(rows), "input");
      backend_.copy(x0, ctx.input.data(), bytes(rows), ctx.resource);
    }
    for (std::size_t l = 0; l < layers_; ++l)
      backend_.launch(ctx.resource, n, residual_forward{x0 + l * n, layer(l), x0 + (l + 1) * n, hidden()});
    const double* y = x0 + layers_ * n;
    ctx.loss = 0;  // kept on the device: see finish_step
    if (!last_position()) {
      expect(ctx.output.size(), bytes(rows), "output");
      backend_.copy(ctx.output.data(), y, bytes(rows), ctx.resource);
    } else if (holds_loss() && rows > 0) {
      if (table == nullptr) table = upload_rows(ctx);
      auto* per_row = as_span<double>(ctx.scratch(rows * sizeof(double))).data();
      backend_.launch(ctx.resource, rows, row_loss{table, y, per_row, hidden()});
      backend_.launch(ctx.resource, 1, accumulate{per_row, rows, loss_.data()});
    }
  }

  //! B: the loss's (or received) gradient back through the layers; weight
  //! gradients accumulate; the input gradient goes to the previous stage.
  template <class Context>
  void backward(Context& ctx) {
    const std::size_t rows = rows_of(ctx.samples, module());
    const std::size_t n = rows * hidden();
    double* x0 = as_span<double>(ctx.stashed(0)).data();
    double* dpre = as_span<double>(ctx.scratch(bytes(rows))).data();
    double* dx = as_span<double>(ctx.scratch(bytes(rows))).data();
    const double* dy = nullptr;  // the gradient of the current layer's output
    if (last_position()) {
      backend_.launch(ctx.resource, n, loss_residual{upload_rows(ctx), x0 + layers_ * n, dx, hidden()});
      dy = dx;
    } else {
      expect(ctx.output_grad.size(), bytes(rows), "output gradient");
      dy = as_span<double>(ctx.output_grad).data();
    }
    const bool input_gradient = assignment_.role.position > 0;
    buckets_.begin_op();
    for (std::size_t l = layers_; l-- > 0;) {
      const double* x = x0 + l * n;
      backend_.launch(ctx.resource, n, tanh_backward{dy, x, x + n, dpre});
      if (rows > 0)
        backend_.launch(ctx.resource, layer_parameters(hidden()),
                        dense_weight_gradient{x, dpre, rows, gradients_.data() + l * layer_parameters(hidden()), hidden()});
      buckets_.unit_done(ctx);  // layer l's gradient is queued: a bucket it completes may be summed after it
      if (l > 0 || input_gradient) {
        backend_.launch(ctx.resource, n, residual_input_gradient{dy, dpre, layer(l), dx, hidden()});
        dy = dx;
      }
    }
    buckets_.rest_done(ctx);
    if (!input_gradient) return;
    expect(ctx.input_grad.size(), input_bytes(ctx.samples), "input gradient");
    if (module_first()) {  // the LLM's first stage: each hand-off row's gradient is its text row's
      const std::size_t encoder = rows_of(ctx.samples, module_kind::encoder);
      backend_.launch(ctx.resource, encoder * hidden(),
                      gather_rows{upload_sources(ctx), dy, as_span<double>(ctx.input_grad).data(), hidden()});
    } else {
      backend_.copy(ctx.input_grad.data(), dy, bytes(rows), ctx.resource);
    }
  }

  //! The stage's weight gradients (device memory with the CUDA backend) as its
  //! buckets, summed over its data-parallel group by the executor.
  [[nodiscard]] std::span<const gradient_buffer> gradients() const noexcept { return buckets_.buffers(); }
  //! The parameters in the same buckets, one for one (`has_parameters`: the
  //! distributed optimizer gathers each bucket's shards over the replicas).
  [[nodiscard]] std::span<const gradient_buffer> parameters() const noexcept { return parameter_buckets_; }

  //! After a step: waits for `resource`, returns this rank's share of the loss
  //! and of the squared gradient norm (each counted once over the world: see
  //! `stage_figures`), and clears the loss. `shard`: the runner's
  //! `optimizer_shard_of_stage()`. Call before `update`.
  [[nodiscard]] stage_figures finish_step(resource_type resource, optimizer_shard shard = {}) {
    stage_figures out;
    if (assignment_.role.tp_rank == 0 && (shard.members > 1 || assignment_.role.replica == 0)) {
      std::size_t slots = 0;  // partial sums written
      for_each_owned_range(shard, true, [&](std::size_t begin, std::size_t count) {
        const std::size_t chunks = (count + chunk - 1) / chunk;
        backend_.launch(resource, chunks, square_sums{gradients_.data() + begin, count, chunk, squares_.data() + slots});
        slots += chunks;
      });
      double* total = squares_.data() + slots;
      backend_.zero(total, 1, resource);
      backend_.launch(resource, 1, accumulate{squares_.data(), slots, total});
      out.gradient_squares = backend_.read(total, resource);
    }
    out.loss = backend_.read(loss_.data(), resource);  // waits for the stream: the step's work is done
    backend_.zero(loss_.data(), 1, resource);
    backend_.end_step();
    if (!holds_loss()) out.loss = 0;
    return out;
  }

  //! SGD on the summed gradients (rate 0: none): all of them, or under the
  //! distributed optimizer (`shard`, the runner's `optimizer_shard_of_stage()`)
  //! this member's shard and the common remainder of each bucket; then zeroes
  //! every gradient for the next step.
  void update(resource_type resource, double rate, optimizer_shard shard = {}) {
    for_each_owned_range(shard, false, [&](std::size_t begin, std::size_t count) {
      backend_.launch(resource, count, sgd_step{parameters_.data() + begin, gradients_.data() + begin, rate});
    });
    backend_.zero(gradients_.data(), gradients_.size(), resource);
  }

  //! What this stage is.
  [[nodiscard]] const stage_assignment& assignment() const noexcept { return assignment_; }
  //! Layers it holds.
  [[nodiscard]] std::size_t layers() const noexcept { return layers_; }

private:
  static constexpr std::size_t chunk = 1024;  // gradient values per partial sum of squares

  // The stage's layers' parameters; a stage without layers holds one unused
  // value, so it still joins its group's sums and gathers.
  static std::vector<double> initial_parameters(const stage_assignment& a, std::uint32_t hidden) {
    std::vector<double> values;
    for (std::int64_t l = a.first_layer; l < a.end_layer; ++l) {
      const auto layer = initial_layer(a.role.module, l, hidden);
      values.insert(values.end(), layer.begin(), layer.end());
    }
    if (values.empty()) values.push_back(0.0);
    return values;
  }

  // Where `bucket` starts in `gradients_` (elements).
  [[nodiscard]] std::size_t offset_of(const gradient_buffer& bucket) const noexcept {
    return static_cast<std::size_t>(static_cast<const double*>(bucket.data) - gradients_.data());
  }
  // Calls f(begin, count) for each non-empty range of the gradients this rank
  // updates (and, `counting`, counts in the norm): everything with one member;
  // else each bucket's shard, and its common remainder (held by every member:
  // updated by each, counted by member 0 only).
  template <class F>
  void for_each_owned_range(optimizer_shard shard, bool counting, F&& f) const {
    for (const gradient_buffer& bucket : buckets_.buffers()) {
      const gradient_shard part = shard.of(bucket.count);
      const std::size_t first = offset_of(bucket);
      if (part.end > part.begin) f(first + part.begin, part.end - part.begin);
      if (part.count > part.common_begin && (!counting || shard.member == 0))
        f(first + part.common_begin, part.count - part.common_begin);
    }
  }

  [[nodiscard]] std::uint32_t hidden() const noexcept { return options_.hidden; }
  [[nodiscard]] module_kind module() const noexcept { return assignment_.role.module; }
  [[nodiscard]] bool module_first() const noexcept { return assignment_.role.stage == 0; }
  [[nodiscard]] bool last_position() const noexcept { return assignment_.role.position + 1 == assignment_.positions; }
  [[nodiscard]] bool holds_loss() const noexcept { return last_position() && assignment_.role.tp_rank == 0; }
  // The LLM's first stage receives encoder rows (there is an encoder before it).
  [[nodiscard]] bool has_handoff() const noexcept {
    return module() == module_kind::llm && module_first() && assignment_.role.position > 0;
  }
  [[nodiscard]] std::size_t squares_chunks() const noexcept { return (parameters_.size() + chunk - 1) / chunk; }
  [[nodiscard]] const double* layer(std::size_t l) const { return parameters_.data() + l * layer_parameters(hidden()); }
  [[nodiscard]] std::size_t bytes(std::size_t rows) const noexcept { return rows * hidden() * sizeof(double); }
  [[nodiscard]] std::size_t rows_of(const microbatch_view& mb, module_kind module) const {
    std::size_t rows = 0;
    for (const sample& s : mb) rows += module_rows(module, s, options_);
    return rows;
  }
  void expect(std::size_t got, std::size_t wanted, const char* what) const {
    if (got != wanted)
      throw error("model_stage: the " + std::string(what) + " has " + std::to_string(got) + " bytes, the samples need " +
                  std::to_string(wanted));
  }

  // The microbatch's row table (this module's rows), copied into scratch memory on the stream.
  template <class Context>
  const row_info* upload_rows(Context& ctx) {
    rows_.clear();
    std::uint32_t first_encoder = 0;
    for (std::size_t p = 0; p < ctx.samples.size(); ++p) {
      const sample& s = ctx.samples[p];
      const std::uint32_t count = module_rows(module(), s, options_);
      const std::uint32_t encoded = has_handoff() ? encoder_rows(s, options_) : 0;
      for (std::uint32_t r = 0; r < count; ++r)
        rows_.push_back({ctx.samples.indices()[p], r, count, first_encoder, encoded});
      first_encoder += encoded;
    }
    return upload(ctx, std::span<const row_info>(rows_));
  }
  // Per hand-off row: the text row (in this microbatch's LLM rows) it was added to.
  template <class Context>
  const handoff_source* upload_sources(Context& ctx) {
    sources_.clear();
    std::uint32_t first_row = 0;
    for (const sample& s : ctx.samples) {
      const std::uint32_t count = llm_rows(s, options_);
      const std::uint32_t encoded = encoder_rows(s, options_);
      for (std::uint32_t u = 0; u < encoded; ++u) sources_.push_back({first_row + u % count, fold(encoded, count)});
      first_row += count;
    }
    return upload(ctx, std::span<const handoff_source>(sources_));
  }
  template <class Context, class T>
  const T* upload(Context& ctx, std::span<const T> values) {
    if (values.empty()) return nullptr;
    auto scratch = ctx.scratch(values.size_bytes());
    return static_cast<const T*>(backend_.table(values.data(), values.size_bytes(), scratch.data(), ctx.resource));
  }

  stage_assignment assignment_;
  model_options options_;
  Backend backend_;
  std::size_t layers_;
  typename Backend::array parameters_;  // layers_ x (W, b) (at least one value: every stage joins the sums)
  typename Backend::array gradients_;   // the same shape
  typename Backend::array loss_;        // the step's loss so far (LLM last stage)
  typename Backend::array squares_;     // partial sums of squared gradients, then their total
  gradient_buckets buckets_;            // `gradients_` as the executor sums it
  std::vector<gradient_buffer> parameter_buckets_;  // `parameters_` in the same buckets
  std::vector<row_info> rows_;          // host staging of the row tables
  std::vector<handoff_source> sources_;
};

}  // namespace dflop::cuda_trainer
