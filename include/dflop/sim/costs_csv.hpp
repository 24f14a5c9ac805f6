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
#include <map>
#include <optional>
#include <string>
#include <utility>
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

  // Validated on the rows alone before any table is allocated: a file of two
  // rows naming microbatch 77777 and stage 771 must not reserve 60 million costs.
  constexpr long long limit = 1 << 20;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::size_t> line_of;  // (microbatch, stage) -> its line
  std::map<std::uint32_t, std::size_t> first_line_of_microbatch, first_line_of_stage;
  for (const auto& row : table.rows) {
    const long long j = table.integer(row, microbatch_column);
    const long long s = table.integer(row, stage_column);
    if (j >= limit || s >= limit) throw input_error(table.source, row.line, "microbatch or stage number too large");
    const auto pair = std::pair{static_cast<std::uint32_t>(j), static_cast<std::uint32_t>(s)};
    if (const auto [at, inserted] = line_of.emplace(pair, row.line); !inserted)
      throw input_error(table.source, row.line,
                        "microbatch " + std::to_string(j) + ", stage " + std::to_string(s) +
                            " given twice (first on line " + std::to_string(at->second) + ")");
    first_line_of_microbatch.emplace(pair.first, row.line);
    first_line_of_stage.emplace(pair.second, row.line);
  }
  const std::uint32_t m = first_line_of_microbatch.rbegin()->first + 1;
  const std::uint32_t S = first_line_of_stage.rbegin()->first + 1;
  // Gaps: a number below the largest that never appears; name the row that implies it.
  const auto check_gaps = [&](const std::map<std::uint32_t, std::size_t>& first_line, const char* what,
                              std::uint32_t count) {
    std::uint32_t expected = 0;
    for (const auto& [number, line] : first_line) {
      if (number != expected)
        throw input_error(table.source, line,
                          std::string("gap in ") + what + " numbering: " + what + " " + std::to_string(expected) +
                              " has no rows (numbers must run 0.." + std::to_string(count - 1) + ")");
      ++expected;
    }
  };
  check_gaps(first_line_of_microbatch, "microbatch", m);
  check_gaps(first_line_of_stage, "stage", S);
  // Every microbatch has every stage: the pairs, in order, run (0,0), (0,1), ..., (m-1,S-1).
  std::pair<std::uint32_t, std::uint32_t> expected{0, 0};
  for (const auto& entry : line_of) {
    if (entry.first != expected) break;
    expected = expected.second + 1 == S ? std::pair{expected.first + 1, 0u} : std::pair{expected.first, expected.second + 1};
  }
  if (line_of.size() != static_cast<std::size_t>(m) * S)
    throw input_error(table.source, first_line_of_microbatch.at(expected.first),
                      "microbatch " + std::to_string(expected.first) + " has no row for stage " +
                          std::to_string(expected.second));

  pipeline_costs costs;
  costs.microbatches = m;
  costs.stages = S;
  const std::size_t n = line_of.size();
  costs.forward.assign(n, 0.0);
  costs.backward.assign(n, 0.0);
  if (weight_column) costs.weight.assign(n, 0.0);
  if (transfer_column) costs.transfer.assign(n, 0.0);
  for (const auto& row : table.rows) {
    const auto at = costs.at(static_cast<std::uint32_t>(table.integer(row, microbatch_column)),
                             static_cast<std::uint32_t>(table.integer(row, stage_column)));
    costs.forward[at] = table.number(row, forward_column);
    costs.backward[at] = table.number(row, backward_column);
    if (weight_column) costs.weight[at] = table.number(row, *weight_column);
    if (transfer_column) costs.transfer[at] = table.number(row, *transfer_column);
  }
  return costs;
}

}  // namespace dflop
