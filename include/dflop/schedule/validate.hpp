// SPDX-License-Identifier: Apache-2.0
//! \file
//! Checks that a schedule can run: every operation exactly once on the rank that
//! holds its stage, and an execution order in which every rank makes progress
//! (no deadlock). Linear in the number of operations.
#pragma once

#include <dflop/schedule/op.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dflop {

namespace detail {

inline std::string describe_at(std::uint32_t rank, std::size_t index, const pipeline_op& op) {
  std::string text("rank ");
  text.append(std::to_string(rank)).append(" op ").append(std::to_string(index)).append(" (");
  text.append(to_string(op)).append(" stage ").append(std::to_string(op.stage)).append(")");
  return text;
}

//! Dense index of (kind, microbatch, stage) in [0, kinds * m * stages).
inline std::size_t op_slot(const pipeline_schedule& schedule, const pipeline_op& op) noexcept {
  return (static_cast<std::size_t>(op.kind) * schedule.microbatches + op.microbatch) * schedule.stages() + op.stage;
}

}  // namespace detail

//! Throws `schedule_error` unless `schedule` is complete (each of the
//! kinds x microbatches x stages operations exactly once, on rank stage % ranks,
//! with chunk stage / ranks) and deadlock-free (the ranks, each running its list
//! in order, can all finish when every operation waits for its `dependencies`).
//! The message names the offending rank, position and operation; for a deadlock,
//! what each stuck rank waits for.
inline void validate(const pipeline_schedule& schedule) {
  if (schedule.ranks == 0 || schedule.chunks == 0 || schedule.microbatches == 0)
    throw schedule_error("schedule '" + schedule.name + "': needs ranks, chunks and microbatches >= 1");
  if (schedule.rank_ops.size() != schedule.ranks)
    throw schedule_error("schedule '" + schedule.name + "': has " + std::to_string(schedule.rank_ops.size()) +
                         " op lists for " + std::to_string(schedule.ranks) + " ranks");
  constexpr auto none = std::numeric_limits<std::size_t>::max();
  const std::size_t slots = 3 * static_cast<std::size_t>(schedule.microbatches) * schedule.stages();
  std::vector<std::size_t> where(slots, none);  // rank * 2^32 + index of each op seen
  std::size_t seen = 0;
  const auto fail = [&](std::uint32_t rank, std::size_t index, const pipeline_op& op, const char* why) {
    std::string text("schedule '");
    text.append(schedule.name).append("': ").append(detail::describe_at(rank, index, op)).append(": ").append(why);
    throw schedule_error(text);
  };
  for (std::uint32_t rank = 0; rank < schedule.ranks; ++rank) {
    const auto& ops = schedule.rank_ops[rank];
    for (std::size_t index = 0; index < ops.size(); ++index) {
      const auto& op = ops[index];
      if (op.kind == op_kind::weight && !schedule.split_backward)
        fail(rank, index, op, "weight-gradient op in a schedule whose backward is not split");
      if (op.kind != op_kind::forward && op.kind != op_kind::backward && op.kind != op_kind::weight)
        fail(rank, index, op, "unknown op kind");
      if (op.microbatch >= schedule.microbatches) fail(rank, index, op, "microbatch out of range");
      if (op.stage >= schedule.stages()) fail(rank, index, op, "stage out of range");
      if (schedule.rank_of(op.stage) != rank) fail(rank, index, op, "stage belongs to another rank");
      if (op.chunk != op.stage / schedule.ranks) fail(rank, index, op, "chunk does not match the stage");
      auto& slot = where[detail::op_slot(schedule, op)];
      if (slot != none) {
        const auto first_rank = static_cast<std::uint32_t>(slot >> 32);
        const std::size_t first_index = slot & 0xffffffffU;
        std::string why("appears twice (first at ");
        why.append(detail::describe_at(first_rank, first_index, op)).append(")");
        fail(rank, index, op, why.c_str());
      }
      slot = (static_cast<std::size_t>(rank) << 32) | index;
      ++seen;
    }
  }
  if (seen != schedule.op_count()) {
    for (std::uint32_t kind = 0; kind < schedule.kinds(); ++kind)
      for (std::uint32_t j = 0; j < schedule.microbatches; ++j)
        for (std::uint32_t stage = 0; stage < schedule.stages(); ++stage) {
          const pipeline_op op{static_cast<op_kind>(kind), j, stage, stage / schedule.ranks};
          if (where[detail::op_slot(schedule, op)] == none) {
            std::string text("schedule '");
            text.append(schedule.name).append("': op ").append(to_string(op)).append(" of stage ");
            text.append(std::to_string(stage)).append(" is missing (rank ").append(std::to_string(schedule.rank_of(stage)));
            text.append(")");
            throw schedule_error(text);
          }
        }
  }

  // Deadlock check: run every rank as far as its next op's dependencies allow; a
  // finished op wakes the ranks of its dependents. Each op is visited once.
  std::vector<std::uint8_t> done(slots, 0);
  std::vector<std::size_t> cursor(schedule.ranks, 0);
  std::vector<std::uint32_t> ready;
  std::vector<std::uint8_t> queued(schedule.ranks, 1);
  ready.reserve(schedule.ranks);
  for (std::uint32_t rank = schedule.ranks; rank-- > 0;) ready.push_back(rank);
  std::size_t finished = 0;
  while (!ready.empty()) {
    const std::uint32_t rank = ready.back();
    ready.pop_back();
    queued[rank] = 0;
    const auto& ops = schedule.rank_ops[rank];
    while (cursor[rank] < ops.size()) {
      const auto& op = ops[cursor[rank]];
      bool runnable = true;
      for (const auto& need : dependencies(schedule, op))
        if (!done[detail::op_slot(schedule, need)]) runnable = false;
      if (!runnable) break;
      done[detail::op_slot(schedule, op)] = 1;
      ++cursor[rank];
      ++finished;
      for (const auto& next : dependents(schedule, op)) {
        const std::uint32_t other = schedule.rank_of(next.stage);
        if (other != rank && !queued[other]) {
          queued[other] = 1;
          ready.push_back(other);
        }
      }
    }
  }
  if (finished != seen) {
    std::string text("schedule '");
    text.append(schedule.name).append("': deadlock:");
    std::uint32_t listed = 0;
    for (std::uint32_t rank = 0; rank < schedule.ranks && listed < 8; ++rank) {
      const auto& ops = schedule.rank_ops[rank];
      if (cursor[rank] >= ops.size()) continue;
      const auto& op = ops[cursor[rank]];
      text.append(listed++ == 0 ? " " : "; ").append(detail::describe_at(rank, cursor[rank], op)).append(" waits for");
      for (const auto& need : dependencies(schedule, op))
        if (!done[detail::op_slot(schedule, need)])
          text.append(" ").append(to_string(need)).append(" stage ").append(std::to_string(need.stage));
    }
    throw schedule_error(text);
  }
}

}  // namespace dflop
