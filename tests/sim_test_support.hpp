// SPDX-License-Identifier: Apache-2.0
// Random multimodal iterations for the simulator's property tests.
#pragma once

#include <dflop/sim/multimodal.hpp>
#include <dflop/util/random.hpp>

#include <cstddef>
#include <cstdint>

namespace dflop::test {

//! A random multimodal iteration of `m` slots: 1-2 encoder stages, 1 to
//! `max_encoder_replicas` encoder replicas, 1-3 LLM stages, 1 to
//! `max_llm_replicas` LLM replicas, weight passes, transfers, gradient syncs
//! (half of them in buckets) and sparse hand-offs (each LLM microbatch fed by one
//! or two encoder replicas).
inline multimodal_costs random_multimodal(random_generator& random, std::uint32_t m, int max_encoder_replicas = 2,
                                          int max_llm_replicas = 3) {
  multimodal_costs c;
  c.microbatches = m;
  c.encoder.stages = static_cast<std::uint32_t>(random.between(1, 2));
  c.encoder.replicas = static_cast<std::uint32_t>(random.between(1, max_encoder_replicas));
  c.llm.stages = static_cast<std::uint32_t>(random.between(1, 3));
  c.llm.replicas = static_cast<std::uint32_t>(random.between(1, max_llm_replicas));
  for (module_costs* module : {&c.encoder, &c.llm}) {
    const std::size_t n = static_cast<std::size_t>(module->replicas) * m * module->stages;
    for (std::size_t i = 0; i < n; ++i) {
      const double f = random.lognormal(0, 0.8);
      module->forward.push_back(f);
      module->backward.push_back(f * random.uniform(0.8, 1.4));
      module->weight.push_back(f * random.uniform(0.6, 1.0));
      module->transfer.push_back(random.uniform(0, 0.1));
    }
    for (std::uint32_t s = 0; s < module->stages; ++s) module->gradient_bytes.push_back(random.uniform(0, 4e9));
    module->gradient_link = dflop::link{random.uniform(1e9, 4e10), 1e-5};
  }
  // Half the instances reduce in buckets overlapped with the last backward.
  if (random.between(0, 1) == 1) c.gradient_bucket_bytes = random.uniform(1e8, 2e9);
  c.handoffs.assign(static_cast<std::size_t>(c.encoder.replicas) * m * c.llm.replicas, handoff{});
  for (std::uint32_t k = 0; k < m; ++k)
    for (std::uint32_t r = 0; r < c.llm.replicas; ++r) {
      const auto e = static_cast<std::uint32_t>(random.between(0, static_cast<int>(c.encoder.replicas) - 1));
      c.handoffs[c.handoff_at(e, k, r)] = {true, random.uniform(0, 0.2)};
      c.handoffs[c.handoff_at(random.between(0, 1) == 0 ? e : 0, k, r)].feeds = true;
    }
  return c;
}

}  // namespace dflop::test
