// SPDX-License-Identifier: Apache-2.0
//! \file
//! A pipeline schedule as data: for every pipeline rank, the ordered list of
//! operations (forward, backward, weight-gradient) it runs. The simulator and the
//! executor walk the same lists, so what is predicted is what runs.
#pragma once

#include <dflop/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace dflop {

//! A schedule that is malformed (an op missing, repeated or on the wrong rank), that
//! deadlocks, or that cannot be built for the requested shape.
class schedule_error : public error {
public:
  using error::error;
};

//! What an operation computes for one microbatch on one model stage.
enum class op_kind : std::uint8_t {
  forward,   //!< F: the stage's forward pass; keeps the activations for the backward
  backward,  //!< B: the input gradient (plus the weight gradient when the schedule does not split it off)
  weight,    //!< W: the weight gradient, only in schedules that split the backward (zero bubble)
};

//! One letter per kind: "F", "B", "W".
[[nodiscard]] constexpr char kind_letter(op_kind kind) noexcept {
  return kind == op_kind::forward ? 'F' : kind == op_kind::backward ? 'B' : 'W';
}

//! One operation: a kind applied to a microbatch on a model stage.
//! A model stage is a contiguous block of layers; with interleaving, rank r holds
//! the chunks c = 0..v-1, that is the stages c * ranks + r (Megatron's layout).
struct pipeline_op {
  op_kind kind = op_kind::forward;  //!< F, B or W
  std::uint32_t microbatch = 0;     //!< position of the microbatch in the iteration, 0-based
  std::uint32_t stage = 0;          //!< model stage in pipeline order, 0-based (chunk * ranks + rank)
  std::uint32_t chunk = 0;          //!< which of its rank's model chunks the stage is (0 without interleaving)

  friend bool operator==(const pipeline_op&, const pipeline_op&) = default;
};

//! Short name used in timelines and traces: "F3", "B3", "W3" (microbatch 3).
[[nodiscard]] inline std::string to_string(const pipeline_op& op) {
  std::string text(1, kind_letter(op.kind));
  text.append(std::to_string(op.microbatch));
  return text;
}

//! Prints "F3@s2" (kind, microbatch, model stage).
inline std::ostream& operator<<(std::ostream& out, const pipeline_op& op) {
  return out << to_string(op) << "@s" << op.stage;
}

//! The size of a pipeline to schedule: ranks (pipeline stages) and microbatches.
struct schedule_shape {
  std::uint32_t ranks = 1;         //!< pipeline ranks S (model stages per rank, `chunks`, are the policy's business)
  std::uint32_t microbatches = 1;  //!< microbatches m per iteration

  friend bool operator==(const schedule_shape&, const schedule_shape&) = default;
};

//! A complete schedule: for every rank, the operations it runs, in order.
struct pipeline_schedule {
  std::string name;                               //!< policy that produced it ("1f1b", ...)
  std::uint32_t ranks = 0;                        //!< pipeline ranks S
  std::uint32_t chunks = 1;                       //!< model chunks per rank v (1 without interleaving)
  std::uint32_t microbatches = 0;                 //!< microbatches m
  bool split_backward = false;                    //!< backward split into B (input grad) and W (weight grad)
  std::vector<std::vector<pipeline_op>> rank_ops;  //!< rank_ops[r]: rank r's operations in execution order

  //! Number of model stages, ranks * chunks.
  [[nodiscard]] std::uint32_t stages() const noexcept { return ranks * chunks; }
  //! The rank that holds model stage `stage`.
  [[nodiscard]] std::uint32_t rank_of(std::uint32_t stage) const noexcept { return stage % ranks; }
  //! Kinds of operation per (microbatch, stage): 3 when the backward is split, else 2.
  [[nodiscard]] std::uint32_t kinds() const noexcept { return split_backward ? 3U : 2U; }
  //! Total number of operations a complete schedule holds.
  [[nodiscard]] std::size_t op_count() const noexcept {
    return static_cast<std::size_t>(kinds()) * microbatches * stages();
  }

  friend bool operator==(const pipeline_schedule&, const pipeline_schedule&) = default;
};

//! Up to three operations an operation is linked to (a tiny fixed-capacity list).
struct op_links {
  std::array<pipeline_op, 3> ops{};  //!< the linked operations, [0, count)
  std::uint32_t count = 0;           //!< how many are valid

  //! Iteration over the valid entries.
  [[nodiscard]] const pipeline_op* begin() const noexcept { return ops.data(); }
  //! End of the valid entries.
  [[nodiscard]] const pipeline_op* end() const noexcept { return ops.data() + count; }
  //! Appends one link.
  void push(const pipeline_op& op) noexcept { ops[count++] = op; }
};

namespace detail {
inline pipeline_op make_op(const pipeline_schedule& schedule, op_kind kind, std::uint32_t microbatch,
                           std::uint32_t stage) noexcept {
  return {kind, microbatch, stage, stage / schedule.ranks};
}
}  // namespace detail

//! The operations `op` directly needs (data dependencies), besides its rank's
//! previous operation. F(s) needs F(s-1)'s activation; B(s) needs its own F(s) and
//! B(s+1)'s gradient (the last stage starts its backward from its own forward);
//! W(s) needs B(s). An executor receives a message for every one on another rank.
[[nodiscard]] inline op_links dependencies(const pipeline_schedule& schedule, const pipeline_op& op) noexcept {
  op_links links;
  const std::uint32_t last = schedule.stages() - 1;
  switch (op.kind) {
    case op_kind::forward:
      if (op.stage > 0) links.push(detail::make_op(schedule, op_kind::forward, op.microbatch, op.stage - 1));
      break;
    case op_kind::backward:
      links.push(detail::make_op(schedule, op_kind::forward, op.microbatch, op.stage));
      if (op.stage < last) links.push(detail::make_op(schedule, op_kind::backward, op.microbatch, op.stage + 1));
      break;
    case op_kind::weight:
      links.push(detail::make_op(schedule, op_kind::backward, op.microbatch, op.stage));
      break;
  }
  return links;
}

//! The operations that directly need `op` (the reverse of `dependencies`). An
//! executor sends a message (activation or gradient) for every one on another rank.
[[nodiscard]] inline op_links dependents(const pipeline_schedule& schedule, const pipeline_op& op) noexcept {
  op_links links;
  const std::uint32_t last = schedule.stages() - 1;
  switch (op.kind) {
    case op_kind::forward:
      if (op.stage < last) links.push(detail::make_op(schedule, op_kind::forward, op.microbatch, op.stage + 1));
      links.push(detail::make_op(schedule, op_kind::backward, op.microbatch, op.stage));
      break;
    case op_kind::backward:
      if (op.stage > 0) links.push(detail::make_op(schedule, op_kind::backward, op.microbatch, op.stage - 1));
      if (schedule.split_backward) links.push(detail::make_op(schedule, op_kind::weight, op.microbatch, op.stage));
      break;
    case op_kind::weight:
      break;
  }
  return links;
}

//! Whether `from` and `to` run on different ranks, so the link between them is a
//! message (send on `from`'s rank after it, receive on `to`'s rank before it).
[[nodiscard]] inline bool crosses_ranks(const pipeline_schedule& schedule, const pipeline_op& from,
                                        const pipeline_op& to) noexcept {
  return schedule.rank_of(from.stage) != schedule.rank_of(to.stage);
}

}  // namespace dflop
