// SPDX-License-Identifier: Apache-2.0
//! \file
//! The machines a plan runs on: how many GPUs, how many per node, which GPU.
#pragma once

#include <dflop/error.hpp>
#include <dflop/model/gpu_spec.hpp>

#include <ostream>
#include <string>

namespace dflop {

//! A homogeneous cluster: `gpus` GPUs of one kind, `gpus_per_node` to a node
//! (tensor parallelism stays inside a node; other traffic may cross nodes).
struct cluster_spec {
  int gpus = 0;           //!< GPUs in all
  int gpus_per_node = 0;  //!< GPUs sharing a node's fast interconnect
  gpu_spec gpu;           //!< the GPU kind

  friend bool operator==(const cluster_spec&, const cluster_spec&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const cluster_spec& cluster) {
  return out << "cluster_spec{gpus=" << cluster.gpus << ", gpus_per_node=" << cluster.gpus_per_node
             << ", gpu=" << cluster.gpu.name << "}";
}

//! Throws `input_error` naming the field when the cluster cannot be planned for:
//! at least 2 GPUs (one per module), at least one per node, and whole nodes
//! (a GPU count that is a multiple of the node size, or a single partial node).
inline void validate_cluster(const cluster_spec& cluster) {
  if (cluster.gpus < 2)
    throw input_error("cluster_spec::gpus", 0, "need at least 2 GPUs (one for the encoder, one for the LLM), got " +
                                       std::to_string(cluster.gpus));
  if (cluster.gpus_per_node < 1)
    throw input_error("cluster_spec::gpus_per_node", 0, "must be at least 1, got " + std::to_string(cluster.gpus_per_node));
  if (cluster.gpus > cluster.gpus_per_node && cluster.gpus % cluster.gpus_per_node != 0)
    throw input_error("cluster_spec::gpus", 0, std::to_string(cluster.gpus) + " GPUs do not fill whole nodes of " +
                                       std::to_string(cluster.gpus_per_node));
  if (!(cluster.gpu.peak_flops > 0) || cluster.gpu.memory_bytes <= 0)
    throw input_error("cluster_spec::gpu", 0, "GPU '" + cluster.gpu.name + "' needs a positive peak and memory");
}

}  // namespace dflop
