// SPDX-License-Identifier: Apache-2.0
//! \file
//! A toy model for the executor: each stage is a per-token layer y = tanh(x W + b)
//! over a microbatch's tokens (a sample of L LLM tokens has max(1, L / divisor)
//! toy tokens), the last stage's loss is 0.5 |y - target|^2. Variable shapes,
//! real gradients, split weight pass: enough to check a pipeline bit for bit.
//! The stages read only the context's microbatch, buffers and memory, so either
//! executor drives them (the multimodal one's `ctx.stage` is the pipeline
//! position, which for an LLM-only layout is the model stage).
#pragma once

#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/workload/sample.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dflop::toy {

//! Toy tokens of one sample: max(1, llm_tokens / divisor).
[[nodiscard]] inline std::size_t tokens(const sample& s, std::int64_t divisor) noexcept {
  return static_cast<std::size_t>(s.llm_tokens / divisor > 0 ? s.llm_tokens / divisor : 1);
}

//! Toy tokens of a microbatch: the sum over its samples.
[[nodiscard]] inline std::size_t tokens(const microbatch_view& mb, std::int64_t divisor) {
  std::size_t total = 0;
  for (const auto& s : mb) total += tokens(s, divisor);
  return total;
}

//! One per-token tanh layer; stage 0 embeds the samples itself, the last computes the loss.
class mlp_stage {
public:
  //! Model stage `stage` of `stages`, width `hidden`; weights drawn from `seed`.
  mlp_stage(std::uint32_t stage, std::uint32_t stages, std::size_t hidden = 8, std::int64_t divisor = 256,
            std::uint64_t seed = 1)
      : stage_(stage), stages_(stages), hidden_(hidden), divisor_(divisor), weights_(hidden * hidden + hidden),
        gradients_(weights_.size(), 0.0) {
    std::uint64_t state = seed * 0x9E3779B97F4A7C15ULL + stage + 1;
    for (auto& w : weights_) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      w = (static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5) * 1.6 / std::sqrt(static_cast<double>(hidden));
    }
  }

  //! Bytes of the activation this stage receives (none on stage 0).
  [[nodiscard]] std::size_t input_bytes(const microbatch_view& mb) const {
    return stage_ == 0 ? 0 : tokens(mb, divisor_) * hidden_ * sizeof(double);
  }
  //! Bytes of the activation this stage sends (none on the last stage).
  [[nodiscard]] std::size_t output_bytes(const microbatch_view& mb) const {
    return stage_ + 1 == stages_ ? 0 : tokens(mb, divisor_) * hidden_ * sizeof(double);
  }

  //! y = tanh(x W + b); stashes y (and x on stage 0); the last stage writes the loss.
  template <class Context>
  void forward(Context& ctx) {
    const std::size_t n = tokens(ctx.samples, divisor_) * hidden_;
    auto y = as_span<double>(ctx.stash(n * sizeof(double)));
    std::span<const double> x = as_span<double>(ctx.input);
    if (stage_ == 0) {
      auto embedded = as_span<double>(ctx.stash(n * sizeof(double)));
      embed(ctx.samples, embedded);
      x = embedded;
    }
    layer(x, y);
    if (stage_ + 1 == stages_) {
      double loss = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double d = y[i] - target(i);
        loss += 0.5 * d * d;
      }
      ctx.loss = loss;
    } else {
      auto out = as_span<double>(ctx.output);
      for (std::size_t i = 0; i < n; ++i) out[i] = y[i];
    }
  }

  //! Input gradient dpre W^T with dpre = dy (1 - y^2); stashes dpre for the weight pass.
  template <class Context>
  void backward(Context& ctx) {
    auto y = as_span<double>(ctx.stashed(0));
    const std::size_t n = y.size();
    auto dpre = as_span<double>(ctx.stash(n * sizeof(double)));
    auto dy = as_span<double>(ctx.output_grad);
    for (std::size_t i = 0; i < n; ++i) {
      const double g = stage_ + 1 == stages_ ? y[i] - target(i) : dy[i];
      dpre[i] = g * (1.0 - y[i] * y[i]);
    }
    if (stage_ == 0) return;
    auto dx = as_span<double>(ctx.input_grad);
    const std::size_t rows = n / hidden_;
    for (std::size_t t = 0; t < rows; ++t)
      for (std::size_t i = 0; i < hidden_; ++i) {
        double sum = 0;
        for (std::size_t o = 0; o < hidden_; ++o) sum += dpre[t * hidden_ + o] * weights_[i * hidden_ + o];
        dx[t * hidden_ + i] = sum;
      }
  }

  //! Weight gradient: dW += x^T dpre, db += sum dpre (in token order). In the
  //! step's last gradient-producing op the gradients are then final: their
  //! data-parallel sum may start at once (`gradients_ready`), while other stages
  //! still run.
  template <class Context>
  void weight(Context& ctx) {
    std::span<const double> x = stage_ == 0 ? as_span<double>(ctx.stashed(1)) : as_span<double>(ctx.input);
    auto dpre = as_span<double>(ctx.stashed(stage_ == 0 ? 2 : 1));
    const std::size_t rows = dpre.size() / hidden_;
    for (std::size_t t = 0; t < rows; ++t)
      for (std::size_t i = 0; i < hidden_; ++i)
        for (std::size_t o = 0; o < hidden_; ++o)
          gradients_[i * hidden_ + o] += x[t * hidden_ + i] * dpre[t * hidden_ + o];
    for (std::size_t t = 0; t < rows; ++t)
      for (std::size_t o = 0; o < hidden_; ++o) gradients_[hidden_ * hidden_ + o] += dpre[t * hidden_ + o];
    if constexpr (requires { ctx.final_gradients; })  // executor contexts (the profiler's has no reduction)
      if (ctx.final_gradients) ctx.gradients_ready(gradient_buffer::of(std::span<double>(gradients_)));
  }

  //! The gradient of W then b, summed over replicas by the executor.
  [[nodiscard]] std::span<double> gradients() noexcept { return gradients_; }
  //! W then b.
  [[nodiscard]] std::span<const double> weights() const noexcept { return weights_; }

  //! Plain SGD: weights -= rate * gradients, then zeroes the gradients.
  void apply(double rate) {
    for (std::size_t i = 0; i < weights_.size(); ++i) weights_[i] -= rate * gradients_[i];
    for (auto& g : gradients_) g = 0;
  }

private:
  [[nodiscard]] static double target(std::size_t i) { return 0.5 * std::sin(0.05 * static_cast<double>(i)); }

  void embed(const microbatch_view& mb, std::span<double> x) const {
    std::size_t row = 0;
    for (std::size_t s = 0; s < mb.size(); ++s) {
      const std::size_t count = tokens(mb[s], divisor_);
      for (std::size_t t = 0; t < count; ++t, ++row)
        for (std::size_t k = 0; k < hidden_; ++k)
          x[row * hidden_ + k] = std::sin(0.37 * static_cast<double>(mb.indices()[s]) + 0.11 * static_cast<double>(t) +
                                          static_cast<double>(k));
    }
  }

  void layer(std::span<const double> x, std::span<double> y) const {
    const std::size_t rows = y.size() / hidden_;
    for (std::size_t t = 0; t < rows; ++t)
      for (std::size_t o = 0; o < hidden_; ++o) {
        double sum = weights_[hidden_ * hidden_ + o];
        for (std::size_t i = 0; i < hidden_; ++i) sum += x[t * hidden_ + i] * weights_[i * hidden_ + o];
        y[t * hidden_ + o] = std::tanh(sum);
      }
  }

  std::uint32_t stage_;
  std::uint32_t stages_;
  std::size_t hidden_;
  std::int64_t divisor_;
  std::vector<double> weights_;
  std::vector<double> gradients_;
};

}  // namespace dflop::toy
