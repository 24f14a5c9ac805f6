// SPDX-License-Identifier: Apache-2.0
//! \file
//! `dflop.simulate`: one pipeline schedule over per-op costs, as `dflop
//! simulate` runs it (same steps, same JSON fields), with the costs from the
//! CLI's CSV file or from (microbatches x stages) float64 arrays.
#pragma once

#include "common.hpp"

#include <dflop/error.hpp>
#include <dflop/schedule.hpp>
#include <dflop/sim.hpp>
#include <dflop/util/csv.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dflop::python {

namespace detail {

//! A (microbatches x stages) float64 table copied into `into`; sets the shape on first use.
inline void read_table(const py::object& array, const char* name, pipeline_costs& costs, std::vector<double>& into) {
  if (array.is_none()) return;
  const py::buffer_info info = py::reinterpret_borrow<py::buffer>(array).request();
  if (info.itemsize != 8 || (info.format != "d" && info.format != "<d" && info.format != "=d") || info.ndim != 2)
    throw input_error(name, 0, "must be a 2-D float64 array (microbatches x stages)");
  const auto rows = static_cast<std::uint32_t>(info.shape[0]);
  const auto columns = static_cast<std::uint32_t>(info.shape[1]);
  if (costs.stages == 0) {
    costs.microbatches = rows;
    costs.stages = columns;
  } else if (rows != costs.microbatches || columns != costs.stages) {
    throw input_error(name, 0, "is " + std::to_string(rows) + " x " + std::to_string(columns) + ", forward is " +
                                   std::to_string(costs.microbatches) + " x " + std::to_string(costs.stages));
  }
  into.resize(static_cast<std::size_t>(rows) * columns);
  for (std::uint32_t j = 0; j < rows; ++j)
    for (std::uint32_t s = 0; s < columns; ++s) {
      const auto* at = static_cast<const char*>(info.ptr) + j * info.strides[0] + s * info.strides[1];
      const double value = *reinterpret_cast<const double*>(at);
      if (!(value >= 0) || !std::isfinite(value))
        throw input_error(name, j + 1, "microbatch " + std::to_string(j) + ", stage " + std::to_string(s) +
                                           ": cost " + std::to_string(value) + " is negative or not finite");
      into[costs.at(j, s)] = value;
    }
}

//! What `dflop simulate --json` prints, plus the microbatch order used.
inline nlohmann::ordered_json simulate_json(const std::string& schedule_name, pipeline_costs per_rank,
                                            std::uint32_t chunks, const std::string& order_name, std::size_t budget,
                                            double transfer, const std::string& source) {
  if (std::find(schedule_names.begin(), schedule_names.end(), schedule_name) == schedule_names.end())
    throw input_error("schedule", 0, "unknown schedule '" + schedule_name + "' (known: gpipe, 1f1b, interleaved, zb-h1)");
  const auto policy = parse_order_policy(order_name);
  if (!policy) throw input_error("order", 0, "unknown order '" + order_name + "' (known: identity, johnson, neh)");
  const bool interleaved = schedule_name == interleaved_1f1b::name();
  if (chunks == 0) chunks = interleaved ? 2U : 1U;
  if (chunks != 1 && !interleaved) throw input_error("chunks", 0, "only the 'interleaved' schedule takes chunks");
  if (transfer < 0 || !std::isfinite(transfer)) throw input_error("transfer", 0, "must be finite and >= 0");
  if (transfer > 0) per_rank.transfer.assign(per_rank.forward.size(), transfer);
  const schedule_shape shape{per_rank.stages, per_rank.microbatches};
  pipeline_schedule schedule;
  try {
    schedule = make_schedule(schedule_name, shape, chunks);
  } catch (const schedule_error& e) {
    throw input_error(source, 0, e.what());
  }
  const auto costs = spread_over_chunks(per_rank, chunks);
  pipeline_simulator simulator;
  const auto ordered = order_microbatches(*policy, schedule, costs, simulator, budget, std::max(1U, shape.ranks / 2));
  const auto result = simulator.simulate(schedule, costs, ordered.order);
  nlohmann::ordered_json report;
  report["makespan"] = result.makespan;
  report["bubble_fraction"] = result.bubble_fraction;
  report["stage_busy"] = result.busy;
  report["ops"] = schedule.op_count();
  report["order"] = ordered.order;
  return report;
}

}  // namespace detail

//! Adds simulate().
inline void bind_simulate(py::module_& module) {
  module.def(
      "simulate",
      [](const std::string& schedule, py::object costs, py::object forward, py::object backward, py::object weight,
         std::uint32_t chunks, const std::string& order, std::size_t budget, double transfer) {
        const bool split = schedule == zero_bubble_h1::name();
        pipeline_costs per_rank;
        std::string source = "forward";
        if (!costs.is_none()) {
          if (!forward.is_none() || !backward.is_none() || !weight.is_none())
            throw input_error("costs", 0, "give either a CSV file or the forward/backward/weight arrays, not both");
          source = py::str(py::module_::import("os").attr("fspath")(costs)).cast<std::string>();
          per_rank = read_pipeline_costs(read_csv_file(source), split);
        } else {
          if (forward.is_none() || backward.is_none())
            throw input_error("forward", 0, "without a costs file, forward and backward arrays are required");
          detail::read_table(forward, "forward", per_rank, per_rank.forward);
          detail::read_table(backward, "backward", per_rank, per_rank.backward);
          detail::read_table(weight, "weight", per_rank, per_rank.weight);
          if (split && per_rank.weight.empty()) throw input_error("weight", 0, "zb-h1 needs the weight array");
        }
        nlohmann::ordered_json report;
        {
          py::gil_scoped_release unlocked;
          report = detail::simulate_json(schedule, std::move(per_rank), chunks, order, budget, transfer, source);
        }
        return py::module_::import("json").attr("loads")(report.dump());
      },
      py::arg("schedule"), py::arg("costs") = py::none(), py::kw_only(), py::arg("forward") = py::none(),
      py::arg("backward") = py::none(), py::arg("weight") = py::none(), py::arg("chunks") = 0,
      py::arg("order") = "identity", py::arg("budget") = 1000, py::arg("transfer") = 0.0,
      "Simulates one pipeline schedule (gpipe, 1f1b, interleaved, zb-h1) over per-op costs and returns what "
      "`dflop simulate --json` prints: makespan, bubble_fraction, stage_busy, ops, plus order (position -> "
      "microbatch). Costs: the CLI's CSV file (`costs`, columns microbatch,stage,forward,backward[,weight]"
      "[,transfer]) or float64 arrays of microbatches x stages (forward, backward, weight for zb-h1; copied). "
      "chunks: model chunks per rank for interleaved (default 2); order: identity, johnson or neh (budget: "
      "simulations neh may spend); transfer: seconds per hop between ranks.");
}

}  // namespace dflop::python
