// SPDX-License-Identifier: Apache-2.0
//! \file
//! Where a plan's stages sit in the cluster, and so which link (NVLink inside a
//! node, the network across nodes) each transfer and all-reduce uses. GPU g is
//! world rank g of the configuration's `world_layout`.
#pragma once

#include <dflop/model/gpu_spec.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/world_layout.hpp>
#include <dflop/sim/costs.hpp>

namespace dflop {

//! Maps (module, replica, stage) to GPUs and nodes for one configuration.
class rank_layout {
public:
  rank_layout(const parallel_config& config, const cluster_spec& cluster) : world_(config), cluster_(cluster) {}

  //! Who runs what: GPU g runs world rank g.
  [[nodiscard]] const world_layout& world() const noexcept { return world_; }

  //! First GPU (TP rank 0) of a module's stage in a replica.
  [[nodiscard]] int first_gpu(module_kind kind, int replica, int stage) const noexcept {
    return world_.rank_of(kind, static_cast<std::uint32_t>(stage), static_cast<std::uint32_t>(replica), 0);
  }

  //! Node holding a GPU.
  [[nodiscard]] int node_of(int gpu) const noexcept { return gpu / cluster_.gpus_per_node; }

  //! The link between two GPUs: NVLink when they share a node, else the network.
  [[nodiscard]] link link_between(int gpu_a, int gpu_b) const noexcept {
    const bool same_node = node_of(gpu_a) == node_of(gpu_b);
    return {same_node ? cluster_.gpu.intra_node_bandwidth : cluster_.gpu.inter_node_bandwidth, cluster_.gpu.latency};
  }

  //! The link a module stage's gradient all-reduce runs over: the network as
  //! soon as its data-parallel group spans nodes.
  [[nodiscard]] link gradient_link(module_kind kind, int stage) const noexcept {
    return link_between(first_gpu(kind, 0, stage), first_gpu(kind, world_.degrees(kind).dp - 1, stage));
  }

private:
  world_layout world_;
  cluster_spec cluster_;
};

//! Seconds to move `bytes` over `over` (bandwidth + one latency); 0 bytes cost nothing.
[[nodiscard]] inline double transfer_seconds(double bytes, const link& over) noexcept {
  if (bytes <= 0) return 0;
  return bytes / over.bandwidth + over.latency;
}

}  // namespace dflop
