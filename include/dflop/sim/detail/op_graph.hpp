// SPDX-License-Identifier: Apache-2.0
//! \file
//! The simulator's engine: a DAG of operations, each on one rank that runs its
//! operations in a fixed order, with timed dependency edges. Start of an op =
//! max(end of its rank's previous op, end of each dependency + edge delay); that is
//! a longest path, computed in one topological pass. Buffers are reused across runs.
#pragma once

#include <dflop/schedule/op.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace dflop::detail {

//! Operations numbered rank-major (rank r's ops are [rank_begin[r], rank_begin[r+1])
//! in execution order), predecessor edges in compressed rows.
struct op_graph {
  std::vector<std::uint32_t> rank_begin;  //!< size ranks + 1
  std::vector<double> duration;           //!< per op
  std::vector<std::uint32_t> pred_begin;  //!< size ops + 1, into pred_op / pred_delay
  std::vector<std::uint32_t> pred_op;     //!< predecessor op ids
  std::vector<double> pred_delay;         //!< time between a predecessor's end and this op's start

  // Workspace and results.
  std::vector<std::uint32_t> pending;     //!< unmet predecessors (edges + rank order) per op
  std::vector<std::uint32_t> succ_begin;  //!< successors in compressed rows
  std::vector<std::uint32_t> succ_op;
  std::vector<std::uint32_t> ready;       //!< ops whose predecessors are all done
  std::vector<std::uint8_t> rank_first;   //!< 1 for the first op of each rank
  std::vector<double> start;              //!< per op, after run()
  std::vector<double> end;                //!< per op, after run()
  std::vector<double> still_to_come;      //!< per op: its rank's later ops and tail (bounded runs only)
  bool reached_cutoff = false;            //!< the last run stopped at its cutoff

  //! Starts a graph with the given op counts per rank (keeps capacity).
  template <class Counts>
  void reset(const Counts& ops_per_rank) {
    rank_begin.clear();
    rank_begin.push_back(0);
    for (auto count : ops_per_rank) rank_begin.push_back(rank_begin.back() + static_cast<std::uint32_t>(count));
    const std::size_t n = rank_begin.back();
    duration.assign(n, 0.0);
    pred_begin.clear();
    pred_begin.reserve(n + 1);
    pred_begin.push_back(0);
    pred_op.clear();
    pred_delay.clear();
  }

  //! Number of ranks.
  [[nodiscard]] std::size_t ranks() const noexcept { return rank_begin.size() - 1; }
  //! Number of ops.
  [[nodiscard]] std::size_t ops() const noexcept { return rank_begin.back(); }

  //! Adds a predecessor to the op currently being described (ops are described in id order).
  void add_predecessor(std::uint32_t op, double delay) {
    pred_op.push_back(op);
    pred_delay.push_back(delay);
  }
  //! Closes the current op's predecessor list.
  void finish_op() { pred_begin.push_back(static_cast<std::uint32_t>(pred_op.size())); }

  //! Computes start and end of every op. Returns the number of ops that could run:
  //! fewer than `ops()` means a cycle (deadlock); the ops not run keep pending > 0.
  //!
  //! With a finite `cutoff`, `rank_tail[r]` being what rank r adds after its last
  //! op (its gradient sync), the run stops as soon as one op proves the makespan
  //! is at least `cutoff` (its end, plus its rank's later ops, plus the tail) and
  //! sets `reached_cutoff`: a search that only keeps orders shorter than its best
  //! so far learns "not shorter" without simulating the rest.
  std::size_t run(double cutoff = std::numeric_limits<double>::infinity(), std::span<const double> rank_tail = {}) {
    reached_cutoff = false;
    const bool bounded = cutoff < std::numeric_limits<double>::infinity();
    if (bounded) tails_after_ops(rank_tail);
    const std::size_t n = ops();
    const std::size_t edges = pred_op.size();
    rank_first.assign(n, 0);
    for (std::size_t r = 0; r + 1 < rank_begin.size(); ++r)
      if (rank_begin[r] < rank_begin[r + 1]) rank_first[rank_begin[r]] = 1;
    pending.resize(n);
    succ_begin.assign(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i) pending[i] = (pred_begin[i + 1] - pred_begin[i]) + (rank_first[i] ? 0U : 1U);
    for (std::size_t e = 0; e < edges; ++e) ++succ_begin[pred_op[e] + 1];
    for (std::size_t i = 0; i < n; ++i) succ_begin[i + 1] += succ_begin[i];
    succ_op.resize(edges);
    // Fill successors; `ready` serves as a per-op fill cursor first.
    ready.assign(succ_begin.begin(), succ_begin.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
      for (std::uint32_t e = pred_begin[i]; e < pred_begin[i + 1]; ++e)
        succ_op[ready[pred_op[e]]++] = static_cast<std::uint32_t>(i);
    ready.clear();
    for (std::size_t i = n; i-- > 0;)
      if (pending[i] == 0) ready.push_back(static_cast<std::uint32_t>(i));
    start.resize(n);
    end.resize(n);
    std::size_t done = 0;
    while (!ready.empty()) {
      const std::uint32_t op = ready.back();
      ready.pop_back();
      double begin = rank_first[op] ? 0.0 : end[op - 1];
      for (std::uint32_t e = pred_begin[op]; e < pred_begin[op + 1]; ++e)
        begin = std::max(begin, end[pred_op[e]] + pred_delay[e]);
      start[op] = begin;
      end[op] = begin + duration[op];
      ++done;
      if (bounded && end[op] + still_to_come[op] >= cutoff) {
        reached_cutoff = true;
        return done;
      }
      if (op + 1 < n && !rank_first[op + 1] && --pending[op + 1] == 0) ready.push_back(op + 1);
      for (std::uint32_t s = succ_begin[op]; s < succ_begin[op + 1]; ++s)
        if (--pending[succ_op[s]] == 0) ready.push_back(succ_op[s]);
    }
    return done;
  }

  //! Fills `still_to_come`: per op, the durations of its rank's later ops plus
  //! the rank's tail (0 where `rank_tail` is empty).
  void tails_after_ops(std::span<const double> rank_tail) {
    still_to_come.resize(ops());
    for (std::size_t r = 0; r < ranks(); ++r) {
      double after = rank_tail.empty() ? 0.0 : rank_tail[r];
      for (std::size_t i = rank_begin[r + 1]; i-- > rank_begin[r];) {
        still_to_come[i] = after;
        after += duration[i];
      }
    }
  }

  //! For a deadlocked run: the first op of each rank that did not run (or ops() when the rank finished).
  [[nodiscard]] std::vector<std::size_t> stuck_heads() const {
    std::vector<std::size_t> heads(ranks(), ops());
    for (std::size_t r = 0; r < ranks(); ++r)
      for (std::size_t i = rank_begin[r]; i < rank_begin[r + 1]; ++i)
        if (pending[i] > 0) {
          heads[r] = i;
          break;
        }
    return heads;
  }
};

}  // namespace dflop::detail
