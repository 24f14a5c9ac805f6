// SPDX-License-Identifier: Apache-2.0
//! \file
//! The model dflop-cuda-trainer trains: small, but shaped by the samples like a
//! real vision-language model, so a plan's packing, hand-off and gradient sums
//! all carry real numbers.
//!
//! - Every activation is a matrix of rows of `hidden` values. A sample has
//!   ceil(encoder_tokens / tokens_per_row) encoder rows (none for text) and
//!   max(1, ceil(llm_tokens / tokens_per_row)) LLM rows.
//! - Encoder: its first stage embeds each row from (sample, row); every layer is
//!   a residual block y = x + tanh(x W + b) per row (signals and gradients reach
//!   through dozens of layers). Its last stage's output, the hand-off, is the
//!   sample's encoder rows: one block per sample, as the executor requires.
//! - LLM: its first stage embeds each text row and adds the sample's encoder
//!   rows onto them (encoder row u onto text row u mod rows, divided by the most
//!   that fold onto one row, ceil(encoder rows / text rows)); the same layers;
//!   the last stage's loss is 0.5 |y - target|^2 summed over the microbatch's rows.
//! - Layer l of a module has the same initial weights whatever stage holds it, so
//!   a batch's loss does not depend on the plan: every method and every split of
//!   the layers gives the same loss, which `reference.hpp` computes on the host.
//!
//! The functors below are the kernels' bodies: `operator()(i)` computes element
//! i. They are `__host__ __device__` under nvcc, so the CUDA backend launches
//! them as kernels and the host backend runs the same code in loops (the CPU
//! check of the stage).
#pragma once

#include <dflop/model/module_kind.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <math.h>
#include <vector>

#if defined(__CUDACC__)
#define DFLOP_TRAINER_HOST_DEVICE __host__ __device__
#else
#define DFLOP_TRAINER_HOST_DEVICE
#endif

namespace dflop::cuda_trainer {

//! The model's size.
struct model_options {
  std::uint32_t hidden = 64;         //!< values per activation row (every layer is hidden x hidden)
  std::int64_t tokens_per_row = 256;  //!< tokens one activation row stands for
};

//! Encoder rows of `s`: ceil(encoder_tokens / tokens_per_row), none for text.
[[nodiscard]] inline std::uint32_t encoder_rows(const sample& s, const model_options& o) {
  if (s.encoder_tokens <= 0) return 0;
  return static_cast<std::uint32_t>((s.encoder_tokens + o.tokens_per_row - 1) / o.tokens_per_row);
}
//! LLM rows of `s`: max(1, ceil(llm_tokens / tokens_per_row)).
[[nodiscard]] inline std::uint32_t llm_rows(const sample& s, const model_options& o) {
  return static_cast<std::uint32_t>(std::max<std::int64_t>(1, (s.llm_tokens + o.tokens_per_row - 1) / o.tokens_per_row));
}
//! Rows of `s` in `module`'s activations.
[[nodiscard]] inline std::uint32_t module_rows(module_kind module, const sample& s, const model_options& o) {
  return module == module_kind::encoder ? encoder_rows(s, o) : llm_rows(s, o);
}

//! Parameters of one layer: W (hidden x hidden, row-major: input x output), then b (hidden).
[[nodiscard]] inline std::size_t layer_parameters(std::uint32_t hidden) {
  return static_cast<std::size_t>(hidden) * hidden + hidden;
}

//! The initial parameters of `module`'s layer `layer` (the same on every stage
//! and rank that holds it): uniform in +-0.8 / sqrt(hidden).
[[nodiscard]] inline std::vector<double> initial_layer(module_kind module, std::int64_t layer, std::uint32_t hidden) {
  std::vector<double> values(layer_parameters(hidden));
  std::uint64_t state = 0x9E3779B97F4A7C15ULL * (2 * static_cast<std::uint64_t>(layer) + 3 +
                                                 (module == module_kind::encoder ? 0 : 1));
  const double scale = 1.6 / std::sqrt(static_cast<double>(hidden));
  for (auto& v : values) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = (static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5) * scale;
  }
  return values;
}

//! How many of a sample's `encoded` encoder rows fold onto one of its `rows` text rows at most.
DFLOP_TRAINER_HOST_DEVICE inline std::uint32_t fold(std::uint32_t encoded, std::uint32_t rows) {
  return encoded == 0 ? 1 : (encoded + rows - 1) / rows;
}

//! One activation row: whose it is, and (LLM first stage) where its sample's encoder rows are.
struct row_info {
  std::uint32_t sample = 0;         //!< batch index of the row's sample
  std::uint32_t row = 0;            //!< row within the sample
  std::uint32_t rows = 0;           //!< the sample's rows in this activation
  std::uint32_t first_encoder = 0;  //!< LLM first stage: the sample's first row in the hand-off input
  std::uint32_t encoder_count = 0;  //!< and its encoder rows
};

//! Encoder embedding of element k of (sample, row).
DFLOP_TRAINER_HOST_DEVICE inline double encoder_embedding(std::uint32_t sample, std::uint32_t row, std::uint32_t k) {
  return ::cos(0.29 * sample + 0.07 * row + 0.5 * k);
}
//! LLM (text) embedding of element k of (sample, row).
DFLOP_TRAINER_HOST_DEVICE inline double llm_embedding(std::uint32_t sample, std::uint32_t row, std::uint32_t k) {
  return ::sin(0.37 * sample + 0.11 * row + 1.0 * k);
}
//! Target of element k of the LLM's output row (sample, row).
DFLOP_TRAINER_HOST_DEVICE inline double target(std::uint32_t sample, std::uint32_t row, std::uint32_t k) {
  return 0.5 * ::sin(0.05 * (7.0 * sample + row) + 1.0 * k);
}

//! x[i] = the encoder embedding (i over rows x hidden).
struct embed_encoder {
  const row_info* rows;
  double* x;
  std::uint32_t hidden;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t i) const {
    const row_info& r = rows[i / hidden];
    x[i] = encoder_embedding(r.sample, r.row, static_cast<std::uint32_t>(i % hidden));
  }
};

//! x[i] = the text embedding plus the sample's encoder rows u = row, row + rows, ...
//! of `handoff` (null: no encoder), over their fold.
struct embed_llm {
  const row_info* rows;
  const double* handoff;
  double* x;
  std::uint32_t hidden;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t i) const {
    const row_info& r = rows[i / hidden];
    const std::size_t k = i % hidden;
    double encoded = 0;
    if (handoff != nullptr)
      for (std::uint32_t u = r.row; u < r.encoder_count; u += r.rows)
        encoded += handoff[(static_cast<std::size_t>(r.first_encoder) + u) * hidden + k];
    x[i] = llm_embedding(r.sample, r.row, static_cast<std::uint32_t>(k)) + encoded / fold(r.encoder_count, r.rows);
  }
};

//! y = x + tanh(x W + b), element i = (row, output).
struct residual_forward {
  const double* x;
  const double* parameters;
  double* y;
  std::uint32_t hidden;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t row = i / hidden;
    const std::size_t out = i % hidden;
    const std::size_t h = hidden;
    double sum = parameters[h * h + out];
    for (std::size_t k = 0; k < h; ++k) sum += x[row * h + k] * parameters[k * h + out];
    y[i] = x[i] + ::tanh(sum);
  }
};

//! loss_rows[r] = 0.5 |y[r] - target[r]|^2 (element r = one row).
struct row_loss {
  const row_info* rows;
  const double* y;
  double* loss_rows;
  std::uint32_t hidden;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t r) const {
    double sum = 0;
    for (std::uint32_t k = 0; k < hidden; ++k) {
      const double d = y[r * hidden + k] - target(rows[r].sample, rows[r].row, k);
      sum += 0.5 * d * d;
    }
    loss_rows[r] = sum;
  }
};

//! *total += values[0] + ... + values[count - 1], in order (one element: deterministic).
struct accumulate {
  const double* values;
  std::size_t count;
  double* total;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t) const {
    double sum = *total;
    for (std::size_t j = 0; j < count; ++j) sum += values[j];
    *total = sum;
  }
};

//! out = y - target: the loss's gradient with respect to the last output.
struct loss_residual {
  const row_info* rows;
  const double* y;
  double* out;
  std::uint32_t hidden;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t i) const {
    const row_info& r = rows[i / hidden];
    out[i] = y[i] - target(r.sample, r.row, static_cast<std::uint32_t>(i % hidden));
  }
};

//! dpre = dy (1 - t^2) with t = y - x = tanh(x W + b): through the tanh.
struct tanh_backward {
  const double* dy;
  const double* x;
  const double* y;
  double* dpre;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t i) const {
    const double t = y[i] - x[i];
    dpre[i] = dy[i] * (1.0 - t * t);
  }
};

//! dx = dy + dpre W^T, element i = (row, input). `dx` may be `dy` (each
//! element reads only its own dy).
struct residual_input_gradient {
  const double* dy;
  const double* dpre;
  const double* parameters;
  double* dx;
  std::uint32_t hidden;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t row = i / hidden;
    const std::size_t in = i % hidden;
    const std::size_t h = hidden;
    double sum = dy[i];
    for (std::size_t o = 0; o < h; ++o) sum += dpre[row * h + o] * parameters[in * h + o];
    dx[i] = sum;
  }
};

//! gradients += (x^T dpre, column sums of dpre), element i = one parameter
//! (each sums over the rows in order: deterministic, no atomics).
struct dense_weight_gradient {
  const double* x;
  const double* dpre;
  std::size_t rows;
  double* gradients;
  std::uint32_t hidden;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t h = hidden;
    double sum = 0;
    if (i < h * h) {
      const std::size_t in = i / h;
      const std::size_t out = i % h;
      for (std::size_t r = 0; r < rows; ++r) sum += x[r * h + in] * dpre[r * h + out];
    } else {
      const std::size_t out = i - h * h;
      for (std::size_t r = 0; r < rows; ++r) sum += dpre[r * h + out];
    }
    gradients[i] += sum;
  }
};

//! Where a hand-off row went: the text row (in the microbatch's LLM rows) and the fold it was divided by.
struct handoff_source {
  std::uint32_t row = 0;
  std::uint32_t fold = 1;
};

//! out[u] = from_rows[source[u].row] / source[u].fold, element i = (u, k): the
//! gradient of each encoder row is that of the text row it was added to.
struct gather_rows {
  const handoff_source* sources;
  const double* from_rows;
  double* out;
  std::uint32_t hidden;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t i) const {
    const handoff_source& s = sources[i / hidden];
    out[i] = from_rows[static_cast<std::size_t>(s.row) * hidden + i % hidden] / s.fold;
  }
};

//! partial[c] = sum of squares of values[c * chunk, (c + 1) * chunk).
struct square_sums {
  const double* values;
  std::size_t count;
  std::size_t chunk;
  double* partial;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t c) const {
    double sum = 0;
    const std::size_t end = (c + 1) * chunk < count ? (c + 1) * chunk : count;
    for (std::size_t j = c * chunk; j < end; ++j) sum += values[j] * values[j];
    partial[c] = sum;
  }
};

//! SGD: parameters -= rate x gradients, then the gradients are zeroed.
struct sgd_step {
  double* parameters;
  double* gradients;
  double rate;
  DFLOP_TRAINER_HOST_DEVICE void operator()(std::size_t i) const {
    parameters[i] -= rate * gradients[i];
    gradients[i] = 0;
  }
};

}  // namespace dflop::cuda_trainer
