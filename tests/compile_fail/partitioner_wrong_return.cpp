// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: partition returns the stage sizes as a vector, not a
// dflop::layer_partition.
#include <dflop/pipeline.hpp>

#include <vector>

struct partitioner_returning_sizes {
  static constexpr std::string_view name() noexcept { return "sizes"; }
  std::vector<std::size_t> partition(std::span<const double> costs, std::size_t stages) const {
    return std::vector<std::size_t>(stages, costs.size() / stages);
  }
};
using broken = dflop::pipeline<dflop::flops_cost_model, partitioner_returning_sizes>;
broken::planner_type* unused = nullptr;
