// SPDX-License-Identifier: Apache-2.0
//! A batch scheduler over the small test model, for tests that schedule batches
//! with a memory model of their own.
#pragma once

#include "plan_test_support.hpp"

#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/pack/refined_packer.hpp>

namespace dflop::test {

//! The small model on 8 H100s (one node) priced by FLOPs, with memory model
//! `Memory` (default-constructed), and a batch scheduler over them.
template <class Memory>
struct small_scheduler {
  multimodal_spec model = small_model();
  cluster_spec cluster = small_cluster(8, 8);
  flops_cost_model cost{model, cluster.gpu};
  Memory memory;
  batch_scheduler<flops_cost_model, Memory, refined_packer> scheduler{model, cluster, cost, memory};
  small_scheduler() = default;
  small_scheduler(const small_scheduler&) = delete;  // the scheduler points at the members
  small_scheduler& operator=(const small_scheduler&) = delete;
};

}  // namespace dflop::test
