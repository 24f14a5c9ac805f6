// SPDX-License-Identifier: Apache-2.0
//! \file
//! The trainer's model on the host, written out sample by sample (no stages, no
//! plan, no shared kernels): a global batch's loss and gradient norm at the
//! initial weights. Every method of every plan must give both (to rounding) on
//! its first step.
#pragma once

#include "model.hpp"

#include <dflop/model/multimodal_spec.hpp>
#include <dflop/workload/sample.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dflop::cuda_trainer {

//! A batch's loss and the norm of its gradient over every layer of both modules.
struct reference_figures {
  double loss = 0;
  double gradient_norm = 0;
};

//! The loss and gradient norm of `batch` (sample i has batch index i) through
//! `model`'s layer counts at the initial weights.
[[nodiscard]] inline reference_figures reference_step(std::span<const sample> batch, const multimodal_spec& model,
                                                      const model_options& options) {
  const std::size_t h = options.hidden;
  struct layer_state {
    std::vector<double> weights;
    std::vector<double> gradients;
  };
  const auto make = [&](module_kind module, std::int64_t layers) {
    std::vector<layer_state> out;
    for (std::int64_t l = 0; l < layers; ++l)
      out.push_back({initial_layer(module, l, options.hidden), std::vector<double>(layer_parameters(options.hidden))});
    return out;
  };
  auto encoder = make(module_kind::encoder, model.encoder.layers);
  auto llm = make(module_kind::llm, model.llm.layers);

  // Forward through `layers`: inputs[l] and tanh values[l] of every layer, x ends as the output.
  struct trace {
    std::vector<std::vector<double>> inputs, tanhs;
  };
  const auto forward = [&](const std::vector<layer_state>& layers, std::vector<double>& x) {
    trace t;
    for (const auto& layer : layers) {
      const auto& w = layer.weights;
      std::vector<double> tanhs(x.size());
      for (std::size_t r = 0; r < x.size() / h; ++r)
        for (std::size_t o = 0; o < h; ++o) {
          double sum = w[h * h + o];
          for (std::size_t k = 0; k < h; ++k) sum += x[r * h + k] * w[k * h + o];
          tanhs[r * h + o] = std::tanh(sum);
        }
      t.inputs.push_back(x);
      for (std::size_t j = 0; j < x.size(); ++j) x[j] += tanhs[j];
      t.tanhs.push_back(std::move(tanhs));
    }
    return t;
  };
  // Backward: dy (the output's gradient) becomes the input's; weight gradients accumulate.
  const auto backward = [&](std::vector<layer_state>& layers, const trace& t, std::vector<double>& dy) {
    for (std::size_t l = layers.size(); l-- > 0;) {
      auto& layer = layers[l];
      const auto& x = t.inputs[l];
      std::vector<double> dpre(dy.size());
      for (std::size_t j = 0; j < dy.size(); ++j) dpre[j] = dy[j] * (1 - t.tanhs[l][j] * t.tanhs[l][j]);
      for (std::size_t r = 0; r < dy.size() / h; ++r)
        for (std::size_t o = 0; o < h; ++o) {
          layer.gradients[h * h + o] += dpre[r * h + o];
          for (std::size_t k = 0; k < h; ++k) {
            layer.gradients[k * h + o] += x[r * h + k] * dpre[r * h + o];
            dy[r * h + k] += dpre[r * h + o] * layer.weights[k * h + o];
          }
        }
    }
  };

  reference_figures out;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto index = static_cast<std::uint32_t>(i);
    const std::uint32_t encoded = encoder_rows(batch[i], options);
    std::vector<double> e(encoded * h);
    for (std::uint32_t r = 0; r < encoded; ++r)
      for (std::uint32_t k = 0; k < h; ++k) e[r * h + k] = encoder_embedding(index, r, k);
    const trace encoder_trace = forward(encoder, e);
    const std::uint32_t rows = llm_rows(batch[i], options);
    const double folds = fold(encoded, rows);
    std::vector<double> x(rows * h);
    for (std::uint32_t r = 0; r < rows; ++r)
      for (std::uint32_t k = 0; k < h; ++k) x[r * h + k] = llm_embedding(index, r, k);
    std::vector<double> folded(rows * h, 0.0);
    for (std::uint32_t u = 0; u < encoded; ++u)
      for (std::uint32_t k = 0; k < h; ++k) folded[(u % rows) * h + k] += e[u * h + k];
    for (std::size_t j = 0; j < x.size(); ++j) x[j] += folded[j] / folds;
    const trace llm_trace = forward(llm, x);
    std::vector<double> dy(x.size());
    for (std::uint32_t r = 0; r < rows; ++r)
      for (std::uint32_t k = 0; k < h; ++k) {
        const double d = x[r * h + k] - target(index, r, k);
        out.loss += 0.5 * d * d;
        dy[r * h + k] = d;
      }
    backward(llm, llm_trace, dy);
    std::vector<double> de(e.size());
    for (std::uint32_t u = 0; u < encoded; ++u)
      for (std::uint32_t k = 0; k < h; ++k) de[u * h + k] = dy[(u % rows) * h + k] / folds;
    backward(encoder, encoder_trace, de);
  }
  double squares = 0;
  for (const auto* module : {&encoder, &llm})
    for (const auto& layer : *module)
      for (double g : layer.gradients) squares += g * g;
  out.gradient_norm = std::sqrt(squares);
  return out;
}

}  // namespace dflop::cuda_trainer
