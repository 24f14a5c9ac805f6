// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: a partitioner that needs a constructor argument (the
// pipeline default-constructs its policies).
#include <dflop/pipeline.hpp>

struct weighted_partitioner {
  explicit weighted_partitioner(double weight) : weight(weight) {}
  static constexpr std::string_view name() noexcept { return "weighted"; }
  dflop::layer_partition partition(std::span<const double> costs, std::size_t stages) const {
    return dflop::partition_layers(costs, stages);
  }
  double weight;
};
using broken = dflop::pipeline<dflop::flops_cost_model, weighted_partitioner>;
broken::planner_type* unused = nullptr;
