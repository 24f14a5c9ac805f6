// SPDX-License-Identifier: Apache-2.0
//! \file
//! The analytic cost model: FLOPs (flops.hpp) over an achieved-throughput curve,
//! plus tensor-parallel all-reduces over the intra-node links. Needs no profiling.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/flops.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/cost/throughput_curve.hpp>
#include <dflop/error.hpp>
#include <dflop/model/gpu_spec.hpp>
#include <dflop/model/multimodal_spec.hpp>

#include <span>
#include <string>

namespace dflop {

//! Knobs of `flops_cost_model`.
struct flops_cost_options {
  throughput_curve curve;               //!< achieved fraction of peak vs work
  bool recompute_activations = false;   //!< full recomputation: backward also redoes the forward
  double activation_bytes = 2;          //!< bytes per element in TP all-reduces (bf16)

  friend bool operator==(const flops_cost_options&, const flops_cost_options&) = default;
};

//! Time of one part at TP degree t for a microbatch of shape S:
//! - compute: forward = `curve.seconds(F / t)` with F the part's forward FLOPs (flops.hpp);
//!   backward = 2 such passes (input and weight gradients), 3 with recomputation;
//! - TP communication (t > 1): ring all-reduces of N x hidden activations over the
//!   intra-node bandwidth, each `2 (t-1)/t x bytes / bandwidth + 2 (t-1) x latency`
//!   (Megatron tensor parallelism): a layer does 2 in forward and 2 in backward
//!   (+2 with recomputation), the LLM embedding 1 in forward, the projector and LM head
//!   1 in forward and 1 in backward, the patch embedding none.
class flops_cost_model {
public:
  //! \param model shapes  \param gpu peak FLOP/s, bandwidth, latency  \param options curve and recomputation
  flops_cost_model(multimodal_spec model, gpu_spec gpu, flops_cost_options options = {})
      : model_(std::move(model)), gpu_(std::move(gpu)), options_(options) {
    if (!(gpu_.peak_flops > 0)) throw error("flops_cost_model: GPU '" + gpu_.name + "' has no positive peak FLOP/s");
    if (!(options_.curve.max_efficiency > 0 && options_.curve.max_efficiency <= 1) ||
        !(options_.curve.half_saturation_flops >= 0))
      throw error("flops_cost_model: max_efficiency must be in (0, 1] and half_saturation_flops >= 0");
  }

  //! See `cost_model`.
  [[nodiscard]] module_cost estimate_time(module_kind kind, int tp, std::span<const sample> microbatch) const {
    return estimate_parts(*this, kind, tp, microbatch);
  }

  //! The time of one part for a microbatch of `shape` at TP degree `tp`.
  [[nodiscard]] pass_time estimate_part(module_piece piece, int tp, const microbatch_shape& shape) const {
    if (tp < 1) throw error("flops_cost_model: TP degree must be >= 1, got " + std::to_string(tp));
    if (shape.tokens <= 0) return {};
    const double flops = part_forward_flops(model_, piece, shape) / tp;
    const double pass = options_.curve.seconds(flops, gpu_.peak_flops);
    pass_time time{pass, backward_flops_ratio(options_.recompute_activations) * pass};
    const auto [forward_reduces, backward_reduces] = all_reduce_counts(piece);
    const double reduce = all_reduce_seconds(shape.tokens * output_hidden(piece) * options_.activation_bytes, tp);
    time.forward += forward_reduces * reduce;
    time.backward += backward_reduces * reduce;
    return time;
  }

  //! Seconds of one ring all-reduce of `bytes` over `tp` GPUs of a node (0 when tp == 1).
  [[nodiscard]] double all_reduce_seconds(double bytes, int tp) const noexcept {
    if (tp <= 1) return 0.0;
    const double steps = 2.0 * (tp - 1);
    return steps / tp * bytes / gpu_.intra_node_bandwidth + steps * gpu_.latency;
  }

  //! The model priced.
  [[nodiscard]] const multimodal_spec& model() const noexcept { return model_; }
  //! The GPU priced on.
  [[nodiscard]] const gpu_spec& gpu() const noexcept { return gpu_; }
  //! The options in use.
  [[nodiscard]] const flops_cost_options& options() const noexcept { return options_; }

private:
  struct reduce_counts {
    double forward;
    double backward;
  };
  [[nodiscard]] reduce_counts all_reduce_counts(module_piece piece) const noexcept {
    switch (piece.part) {
      case module_part::layer: return {2, options_.recompute_activations ? 4.0 : 2.0};
      case module_part::embedding: return piece.kind == module_kind::llm ? reduce_counts{1, 0} : reduce_counts{0, 0};
      case module_part::head: return {1, 1};
    }
    return {0, 0};
  }
  [[nodiscard]] double output_hidden(module_piece piece) const noexcept {
    if (piece.kind == module_kind::encoder && piece.part != module_part::head)
      return static_cast<double>(model_.encoder.hidden);
    return static_cast<double>(model_.llm.hidden);
  }

  multimodal_spec model_;
  gpu_spec gpu_;
  flops_cost_options options_;
};

static_assert(cost_model<flops_cost_model>);

}  // namespace dflop
