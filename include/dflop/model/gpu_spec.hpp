// SPDX-License-Identifier: Apache-2.0
//! \file
//! What a GPU can do, as the cost and memory models need it, and the built-in
//! GPUs (public datasheet figures).
#pragma once

#include <dflop/error.hpp>

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace dflop {

//! One accelerator and its links. Units are SI base units: FLOP/s, bytes,
//! bytes/s (one direction), seconds.
struct gpu_spec {
  std::string name;                   //!< e.g. "h100-80gb"
  double peak_flops = 0;              //!< dense bf16 tensor-core peak, FLOP/s (no sparsity)
  std::int64_t memory_bytes = 0;      //!< device memory capacity
  double intra_node_bandwidth = 0;    //!< GPU-to-GPU inside a node (NVLink), bytes/s per direction
  double inter_node_bandwidth = 0;    //!< per GPU across nodes (its NIC), bytes/s per direction
  double latency = 0;                 //!< per-message latency of a collective step or p2p send, seconds

  friend bool operator==(const gpu_spec&, const gpu_spec&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const gpu_spec& spec) {
  return out << "gpu_spec{name=" << spec.name << ", peak_flops=" << spec.peak_flops
             << ", memory_bytes=" << spec.memory_bytes << ", intra_node_bandwidth=" << spec.intra_node_bandwidth
             << ", inter_node_bandwidth=" << spec.inter_node_bandwidth << ", latency=" << spec.latency << "}";
}

//! Built-in GPUs, SXM parts, from NVIDIA datasheets:
//! - h100-80gb: 989 TFLOP/s bf16 dense, 80 GiB HBM3, NVLink 4 900 GB/s total = 450 GB/s per
//!   direction, one 400 Gb/s (50 GB/s) NDR NIC per GPU;
//! - h200-141gb: same compute and links as H100, 141 GiB HBM3e;
//! - a100-80gb: 312 TFLOP/s bf16 dense, 80 GiB HBM2e, NVLink 3 600 GB/s total = 300 GB/s per
//!   direction, one 200 Gb/s (25 GB/s) HDR NIC per GPU.
//! Memory is counted in GiB (nvidia-smi shows slightly less usable); latency is a
//! typical 5 us per collective step.
[[nodiscard]] inline const std::vector<gpu_spec>& gpu_presets() {
  constexpr std::int64_t gib = std::int64_t{1} << 30;
  static const std::vector<gpu_spec> presets{
      {"h100-80gb", 989e12, 80 * gib, 450e9, 50e9, 5e-6},
      {"h200-141gb", 989e12, 141 * gib, 450e9, 50e9, 5e-6},
      {"a100-80gb", 312e12, 80 * gib, 300e9, 25e9, 5e-6},
  };
  return presets;
}

//! The built-in GPU called `name`; `input_error` listing the known names otherwise.
[[nodiscard]] inline gpu_spec find_gpu(std::string_view name, const std::string& source = "gpu") {
  std::string known;
  for (const auto& spec : gpu_presets()) {
    if (spec.name == name) return spec;
    if (!known.empty()) known.append(", ");
    known.append(spec.name);
  }
  std::string reason;
  reason.append("unknown GPU '").append(name).append("' (known: ").append(known).append(")");
  throw input_error(source, 0, reason);
}

}  // namespace dflop
