// SPDX-License-Identifier: Apache-2.0
// Test helpers for the executor: a stage that sleeps for its simulated cost, and
// the cost table that both it and the simulator read.
#pragma once

#include "gradient_difference.hpp"
#include <dflop/util/precise_sleep.hpp>

#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/sim/costs.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

namespace dflop::test {

// Costs that follow each microbatch's LLM tokens: F = f x share, B = 2 F (W = F
// when `weight`), with share = tokens / mean tokens; a few milliseconds per op.
inline pipeline_costs token_costs(const step_batch& batch, std::uint32_t m, std::uint32_t stages, double f,
                                  bool weight) {
  std::vector<double> tokens(m);
  double total = 0;
  for (std::uint32_t j = 0; j < m; ++j) total += tokens[j] = static_cast<double>(batch.view(0, j, m).llm_tokens());
  pipeline_costs costs = pipeline_costs::uniform(m, stages, 0, 0);
  if (weight) costs.weight.assign(costs.forward.size(), 0.0);
  for (std::uint32_t j = 0; j < m; ++j)
    for (std::uint32_t s = 0; s < stages; ++s) {
      const double share = std::clamp(tokens[j] * m / total, 0.5, 2.0);
      costs.forward[costs.at(j, s)] = f * share;
      costs.backward[costs.at(j, s)] = (weight ? 1.0 : 2.0) * f * share;
      if (weight) costs.weight[costs.at(j, s)] = f * share;
    }
  return costs;
}

// Sleeps for its op's cost; moves a small activation so messages are real.
class sleep_stage {
public:
  sleep_stage(const pipeline_costs* costs, std::uint32_t stage) : costs_(costs), stage_(stage) {}
  std::size_t input_bytes(const microbatch_view& mb) const { return stage_ == 0 ? 0 : 8 * mb.size(); }
  std::size_t output_bytes(const microbatch_view& mb) const {
    return stage_ + 1 == costs_->stages ? 0 : 8 * mb.size();
  }
  void forward(stage_context& ctx) { sleep(costs_->forward[costs_->at(ctx.microbatch, stage_)]); }
  void backward(stage_context& ctx) { sleep(costs_->backward[costs_->at(ctx.microbatch, stage_)]); }
  void weight(stage_context& ctx) {
    if (!costs_->weight.empty()) sleep(costs_->weight[costs_->at(ctx.microbatch, stage_)]);
  }
  std::span<double> gradients() { return gradient_; }

private:
  static void sleep(double seconds) { sleep_precisely(seconds); }
  const pipeline_costs* costs_;
  std::uint32_t stage_;
  std::vector<double> gradient_ = std::vector<double>(1, 0.0);
};

// Median of a few values.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace dflop::test
