// SPDX-License-Identifier: Apache-2.0
//! \file
//! Reads a pipeline's per-op costs from a CSV table with columns
//! `microbatch,stage,forward,backward` and optionally `weight` (and `transfer`),
//! one row per (microbatch, stage), both numbered from 0 without gaps.
#pragma once

#include <dflop/error.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/util/csv.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dflop {

//! Builds `pipeline_costs` (stages = the table's stages) from `table`. Throws
//! `input_error` naming the source and line for a missing column (the header
//! line), a bad or negative number, a repeated (microbatch, stage) pair, a gap in
//! the microbatch or stage numbering, or a microbatch lacking a stage. With
//! `require_weight`, the `weight` column must exist.
[[nodiscard]] inline pipeline_costs read_pipeline_costs(const csv_table& table, bool require_weight = false) {
  const std::size_t microbatch_column = table.require_column("microbatch");
  const std::size_t stage_column = table.require_column("stage");
  const std::size_t forward_column = table.require_column("forward");
  const std::size_t backward_column = table.require_column("backward");
  const auto weight_column = require_weight ? std::optional(table.require_column("weight")) : table.find_column("weight");
  const auto transfer_column = table.find_column("transfer");
  if (table.rows.empty()) throw input_error(table.source, 1, "no cost rows after the header");

  constexpr long long limit = 1 << 20;
  long long microbatches = 0;
  long long stages = 0;
  for (const auto& row : table.rows) {
    const long long j = table.integer(row, microbatch_column);
    const long long s = table.integer(row, stage_column);
    if (j >= limit || s >= limit) throw input_error(table.source, row.line, "microbatch or stage number too large");
    microbatches = std::max(microbatches, j + 1);
    stages = std::max(stages, s + 1);
  }
  const auto m = static_cast<std::uint32_t>(microbatches);
  const auto S = static_cast<std::uint32_t>(stages);
  if (static_cast<std::size_t>(m) * S > (std::size_t{1} << 26))
    throw input_error(table.source, 0, "too many (microbatch, stage) pairs");
  const std::size_t n = static_cast<std::size_t>(m) * S;
  std::vector<std::size_t> line_of(n, 0);
  std::vector<std::size_t> first_line_of_microbatch(m, 0);
  std::vector<std::size_t> first_line_of_stage(S, 0);
  pipeline_costs costs;
  costs.microbatches = m;
  costs.stages = S;
  costs.forward.assign(n, 0.0);
  costs.backward.assign(n, 0.0);
  if (weight_column) costs.weight.assign(n, 0.0);
  if (transfer_column) costs.transfer.assign(n, 0.0);
  for (const auto& row : table.rows) {
    const auto j = static_cast<std::uint32_t>(table.integer(row, microbatch_column));
    const auto s = static_cast<std::uint32_t>(table.integer(row, stage_column));
    const std::size_t at = costs.at(j, s);
    if (line_of[at] != 0)
      throw input_error(table.source, row.line,
                        "microbatch " + std::to_string(j) + ", stage " + std::to_string(s) +
                            " given twice (first on line " + std::to_string(line_of[at]) + ")");
    line_of[at] = row.line;
    if (first_line_of_microbatch[j] == 0) first_line_of_microbatch[j] = row.line;
    if (first_line_of_stage[s] == 0) first_line_of_stage[s] = row.line;
    costs.forward[at] = table.number(row, forward_column);
    costs.backward[at] = table.number(row, backward_column);
    if (weight_column) costs.weight[at] = table.number(row, *weight_column);
    if (transfer_column) costs.transfer[at] = table.number(row, *transfer_column);
  }
  // Gaps: a number below the largest that never appears; name the row that implies it.
  const auto check_gaps = [&](const std::vector<std::size_t>& first_line, const char* what, std::uint32_t count) {
    for (std::uint32_t i = 0; i < count; ++i)
      if (first_line[i] == 0) {
        std::size_t line = 0;
        for (std::uint32_t k = i + 1; k < count && line == 0; ++k) line = first_line[k];
        throw input_error(table.source, line,
                          std::string("gap in ") + what + " numbering: " + what + " " + std::to_string(i) +
                              " has no rows (numbers must run 0.." + std::to_string(count - 1) + ")");
      }
  };
  check_gaps(first_line_of_microbatch, "microbatch", m);
  check_gaps(first_line_of_stage, "stage", S);
  for (std::uint32_t j = 0; j < m; ++j)
    for (std::uint32_t s = 0; s < S; ++s)
      if (line_of[costs.at(j, s)] == 0)
        throw input_error(table.source, first_line_of_microbatch[j],
                          "microbatch " + std::to_string(j) + " has no row for stage " + std::to_string(s));
  return costs;
}

}  // namespace dflop
