// SPDX-License-Identifier: Apache-2.0
//! \file
//! Splitting a module's layers into pipeline stages: contiguous blocks that
//! minimise the slowest stage. The reference system splits evenly by layer
//! count, blind to embedding, projector and LM-head costs that sit on the first
//! or last stage; this partition prices every layer as it really costs.
#pragma once

#include <dflop/error.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <numeric>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! Stage boundaries over a sequence of layers: stage i holds layers
//! [`first_layer[i]`, `first_layer[i + 1]`), with a final sentinel equal to the layer count.
struct layer_partition {
  std::vector<std::size_t> first_layer;  //!< stages + 1 boundaries; front 0, back = layer count
  double slowest_stage_cost = 0;         //!< max over stages of the summed layer costs

  //! Number of stages.
  [[nodiscard]] std::size_t stages() const noexcept { return first_layer.empty() ? 0 : first_layer.size() - 1; }
  //! Layers on stage `stage`.
  [[nodiscard]] std::size_t layers_on(std::size_t stage) const { return first_layer[stage + 1] - first_layer[stage]; }

  friend bool operator==(const layer_partition&, const layer_partition&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const layer_partition& partition) {
  out << "layer_partition{";
  for (std::size_t stage = 0; stage < partition.stages(); ++stage)
    out << (stage ? " | " : "") << "[" << partition.first_layer[stage] << "," << partition.first_layer[stage + 1] << ")";
  return out << ", slowest=" << partition.slowest_stage_cost << "}";
}

//! Exact min-max contiguous partition of `layer_costs` into `stages` non-empty
//! blocks (dynamic programming, O(stages x layers^2), fine for the <= a few
//! hundred "layers" a module has). Among optimal partitions it returns the one
//! whose earlier stages are as long as possible, so results are deterministic.
//! Throws `input_error` for stages == 0, more stages than layers, or a negative
//! or non-finite cost.
[[nodiscard]] inline layer_partition partition_layers(std::span<const double> layer_costs, std::size_t stages) {
  const std::size_t layers = layer_costs.size();
  if (stages == 0) throw input_error("partition_layers", 0, "need at least one stage");
  if (stages > layers)
    throw input_error("partition_layers", 0,
                      std::to_string(stages) + " stages cannot each get a layer out of " + std::to_string(layers));
  for (std::size_t i = 0; i < layers; ++i)
    if (!(layer_costs[i] >= 0) || layer_costs[i] == std::numeric_limits<double>::infinity())
      throw input_error("partition_layers", 0, "layer " + std::to_string(i) + " has a negative or non-finite cost");

  std::vector<double> prefix(layers + 1, 0.0);
  std::partial_sum(layer_costs.begin(), layer_costs.end(), prefix.begin() + 1);
  const auto block = [&](std::size_t begin, std::size_t end) { return prefix[end] - prefix[begin]; };

  // best[k][j]: least possible slowest stage when the last j layers form k stages.
  // Building from the back lets the reconstruction walk forwards and prefer long early stages.
  constexpr double infinity = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(layers + 1, infinity));
  best[0][0] = 0;
  for (std::size_t k = 1; k <= stages; ++k)
    for (std::size_t j = k; j <= layers; ++j) {
      const std::size_t begin = layers - j;
      for (std::size_t length = 1; length <= j - (k - 1); ++length) {
        const double candidate = std::max(block(begin, begin + length), best[k - 1][j - length]);
        best[k][j] = std::min(best[k][j], candidate);
      }
    }

  layer_partition result;
  result.slowest_stage_cost = best[stages][layers];
  result.first_layer.push_back(0);
  std::size_t begin = 0;
  for (std::size_t k = stages; k >= 1; --k) {
    const std::size_t remaining = layers - begin;
    std::size_t chosen = 1;
    for (std::size_t length = remaining - (k - 1); length >= 1; --length)
      if (std::max(block(begin, begin + length), best[k - 1][remaining - length]) <= result.slowest_stage_cost) {
        chosen = length;
        break;
      }
    begin += chosen;
    result.first_layer.push_back(begin);
  }
  return result;
}

//! The reference system's split: layer counts as even as possible (earlier
//! stages take the remainder), priced with `layer_costs`.
[[nodiscard]] inline layer_partition partition_layers_evenly(std::span<const double> layer_costs, std::size_t stages) {
  const std::size_t layers = layer_costs.size();
  if (stages == 0 || stages > layers)
    throw input_error("partition_layers_evenly", 0,
                      std::to_string(stages) + " stages for " + std::to_string(layers) + " layers");
  layer_partition result;
  result.first_layer.push_back(0);
  for (std::size_t stage = 0; stage < stages; ++stage) {
    const std::size_t length = layers / stages + (stage < layers % stages ? 1 : 0);
    const std::size_t begin = result.first_layer.back();
    result.first_layer.push_back(begin + length);
    result.slowest_stage_cost = std::max(
        result.slowest_stage_cost, std::accumulate(layer_costs.begin() + static_cast<std::ptrdiff_t>(begin),
                                                   layer_costs.begin() + static_cast<std::ptrdiff_t>(begin + length), 0.0));
  }
  return result;
}

}  // namespace dflop
