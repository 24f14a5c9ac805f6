// SPDX-License-Identifier: Apache-2.0
//! Small models, clusters and workloads that keep planner tests fast.
#pragma once

#include <dflop/model/multimodal_spec.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/workload/mixture.hpp>

namespace dflop::test {

//! A ViT and a small GQA decoder: few layers, so searches on 8 GPUs finish in milliseconds.
inline multimodal_spec small_model() {
  vit_spec encoder{"tiny-vit", 6, 768, 3072, 12, 12, 384, 14};
  llm_spec llm{"tiny-llm", 8, 2048, 5632, 16, 4, 32000};
  return combine(encoder, llm);
}

//! `gpus` H100s, `per_node` to a node.
inline cluster_spec small_cluster(int gpus, int per_node, std::int64_t memory_gib = 80) {
  gpu_spec gpu = find_gpu("h100-80gb");
  gpu.memory_bytes = memory_gib << 30;
  return {gpus, per_node, gpu};
}

//! A onevision-like mixture.
inline std::vector<sample> small_workload(std::size_t count = 400, std::uint64_t seed = 1) {
  return generate_mixture("onevision", count, seed);
}

//! `base` with its chosen configuration replaced by `encoder`, `llm` and
//! `microbatches` (layers split evenly, the cluster sized to it, no baselines,
//! no memory budget):
//! a hand-set configuration for running tests of shapes a planner may not pick.
inline plan with_configuration(plan base, module_parallelism encoder, module_parallelism llm, int microbatches) {
  const auto split = [](module_parallelism degrees, std::int64_t layers) {
    module_plan module{degrees, {0}};
    for (int s = 1; s <= degrees.pp; ++s) module.first_layer.push_back(layers * s / degrees.pp);
    return module;
  };
  base.chosen.config = {encoder, llm, microbatches};
  base.chosen.encoder = split(encoder, base.model_spec.encoder.layers);
  base.chosen.llm = split(llm, base.model_spec.llm.layers);
  base.cluster.gpus = base.chosen.config.gpus();
  base.baselines.clear();
  // The planner never checked this configuration against memory: no cap.
  base.batch.memory_budget_bytes = 0;
  return base;
}

}  // namespace dflop::test
