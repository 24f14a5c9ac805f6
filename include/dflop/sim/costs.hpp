// SPDX-License-Identifier: Apache-2.0
//! \file
//! What one pipeline's operations cost: per (microbatch, model stage) forward,
//! backward and weight-gradient times, and the time to pass a stage's output to the
//! next stage. Plain tables, filled from a cost model or given by a user.
#pragma once

#include <dflop/error.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dflop {

//! A link's speed: time(bytes) = latency + bytes / bandwidth.
struct link {
  double bandwidth = std::numeric_limits<double>::infinity();  //!< bytes per second
  double latency = 0;                                          //!< seconds per message

  //! Seconds to move `bytes` over this link (0 bytes still pays the latency).
  [[nodiscard]] double seconds(double bytes) const noexcept { return latency + bytes / bandwidth; }

  friend bool operator==(const link&, const link&) = default;
};

//! Ring all-reduce of `bytes` among `participants`: 2 (d-1)/d x bytes / bandwidth +
//! latency; 0 when there is one participant (nothing to reduce).
[[nodiscard]] inline double ring_allreduce_seconds(double bytes, std::uint32_t participants, const link& over) noexcept {
  if (participants <= 1) return 0;
  const double d = participants;
  return 2.0 * (d - 1.0) / d * bytes / over.bandwidth + over.latency;
}

//! Seconds of a ring reduce-scatter (or all-gather) of `bytes` over
//! `participants`: half a ring all-reduce's traffic, (d - 1) / d of the bytes
//! through each link, plus one latency.
[[nodiscard]] inline double ring_reduce_scatter_seconds(double bytes, std::uint32_t participants,
                                                        const link& over) noexcept {
  if (participants <= 1) return 0;
  const double d = participants;
  return (d - 1.0) / d * bytes / over.bandwidth + over.latency;
}

//! Seconds of one data-parallel gradient reduction of `bytes` over `participants`:
//! a reduce-scatter under the distributed optimizer (`sharded`), else an all-reduce.
[[nodiscard]] inline double gradient_reduction_seconds(double bytes, std::uint32_t participants, const link& over,
                                                       bool sharded) noexcept {
  return sharded ? ring_reduce_scatter_seconds(bytes, participants, over)
                 : ring_allreduce_seconds(bytes, participants, over);
}

//! Costs of one pipeline replica, indexed [microbatch * stages + stage] with
//! `stage` the model stage (with interleaving, chunk * ranks + rank). Times in any
//! unit (seconds by convention). `weight` and `transfer` may be left empty (zeros).
struct pipeline_costs {
  std::uint32_t microbatches = 0;  //!< m
  std::uint32_t stages = 0;        //!< model stages (ranks x chunks)
  std::vector<double> forward;     //!< F times
  std::vector<double> backward;    //!< input-gradient times (the whole backward when no W is given)
  std::vector<double> weight;      //!< weight-gradient times (added to B when the schedule does not split)
  std::vector<double> transfer;    //!< time to send stage s's output to stage s+1 (and the gradient back)

  //! Index of (microbatch, stage) in the tables.
  [[nodiscard]] std::size_t at(std::uint32_t microbatch, std::uint32_t stage) const noexcept {
    return static_cast<std::size_t>(microbatch) * stages + stage;
  }

  //! Every op of a kind costs the same: the closed-form case.
  [[nodiscard]] static pipeline_costs uniform(std::uint32_t microbatches, std::uint32_t stages, double forward,
                                              double backward, double weight = 0, double transfer = 0) {
    const std::size_t n = static_cast<std::size_t>(microbatches) * stages;
    pipeline_costs costs{microbatches, stages, std::vector<double>(n, forward), std::vector<double>(n, backward), {}, {}};
    if (weight != 0) costs.weight.assign(n, weight);
    if (transfer != 0) costs.transfer.assign(n, transfer);
    return costs;
  }

  //! Throws `dflop::error` when a table has the wrong size or a negative entry.
  void check() const {
    const std::size_t n = static_cast<std::size_t>(microbatches) * stages;
    const auto check_table = [&](const std::vector<double>& table, const char* what, bool optional) {
      if (table.size() != n && !(optional && table.empty()))
        throw error(std::string("pipeline_costs: table '") + what + "' has " + std::to_string(table.size()) +
                    " entries, expected " + std::to_string(n));
      for (double value : table)
        if (!(value >= 0)) throw error(std::string("pipeline_costs: table '") + what + "' has a negative or NaN entry");
    };
    check_table(forward, "forward", false);
    check_table(backward, "backward", false);
    check_table(weight, "weight", true);
    check_table(transfer, "transfer", true);
  }

  friend bool operator==(const pipeline_costs&, const pipeline_costs&) = default;
};

//! Spreads per-rank costs over `chunks` model chunks per rank: model stage
//! c * ranks + r gets 1/chunks of rank r's time (transfers are per hop and copied).
//! Lets the same per-rank table drive interleaved and plain schedules.
[[nodiscard]] inline pipeline_costs spread_over_chunks(const pipeline_costs& per_rank, std::uint32_t chunks) {
  if (chunks <= 1) return per_rank;
  pipeline_costs out;
  out.microbatches = per_rank.microbatches;
  out.stages = per_rank.stages * chunks;
  const std::size_t n = static_cast<std::size_t>(out.microbatches) * out.stages;
  const auto spread = [&](const std::vector<double>& table, std::vector<double>& into, bool divide) {
    if (table.empty()) return;
    into.resize(n);
    for (std::uint32_t j = 0; j < out.microbatches; ++j)
      for (std::uint32_t c = 0; c < chunks; ++c)
        for (std::uint32_t r = 0; r < per_rank.stages; ++r)
          into[out.at(j, c * per_rank.stages + r)] = table[per_rank.at(j, r)] / (divide ? chunks : 1.0);
  };
  spread(per_rank.forward, out.forward, true);
  spread(per_rank.backward, out.backward, true);
  spread(per_rank.weight, out.weight, true);
  spread(per_rank.transfer, out.transfer, false);
  return out;
}

}  // namespace dflop
