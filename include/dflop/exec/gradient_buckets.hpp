// SPDX-License-Identifier: Apache-2.0
//! \file
//! A stage's side of overlapped gradient reduction: its gradient memory cut into
//! buckets, each said final (`stage_context::gradients_ready`) as the stage's
//! last gradient-producing op finishes it. A stage's backward finishes its
//! gradients in units (the head, then each layer, last first); consecutive
//! units are grouped until a bucket holds at least the bucket size, as DDP and
//! Megatron-LM group parameters. The simulator prices the same reduction with
//! `batch_options::gradient_bucket_bytes` (the plan's), so a stage built with the
//! plan's size runs what was predicted.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/gradient_buffer.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! [begin, end) elements of a stage's gradient memory: what one unit of its
//! backward (a layer, the head) finishes.
struct gradient_unit {
  std::size_t begin = 0;  //!< first element
  std::size_t end = 0;    //!< one past the last
};

//! A stage's gradient buckets and which unit of its backward completes each
//! (see the file comment). In the stage's last gradient-producing op, call
//! `begin_op` first, `unit_done` after each unit in order, and `rest_done` at
//! the end (units nothing flowed back through are final as they are): every
//! replica then says every bucket, in the same order, as the executor requires.
class gradient_buckets {
public:
  //! No gradients.
  gradient_buckets() = default;

  //! Buckets of at least `bucket_bytes` over `whole` (the last may hold less);
  //! `units` are ranges of `whole`, in the order the backward finishes them, each
  //! adjacent in memory to the one before (above or below it). `bucket_bytes` 0:
  //! one buffer, `whole`, summed after the step's last op (nothing is said
  //! final). Throws `dflop::error` for a negative or non-finite size, a unit
  //! outside `whole` or one not adjacent to the one before.
  gradient_buckets(const gradient_buffer& whole, std::span<const gradient_unit> units, double bucket_bytes) {
    if (!(bucket_bytes >= 0) || !std::isfinite(bucket_bytes))
      throw error("gradient_buckets: the bucket size must be finite and >= 0 bytes, got " +
                  std::to_string(bucket_bytes));
    if (bucket_bytes == 0 || units.empty()) {
      if (whole.count > 0) buffers_.push_back(whole);
      return;
    }
    const double element_bytes = static_cast<double>(element_size(whole.type));
    std::size_t low = 0, high = 0;  // the open bucket's range
    bool open = false;
    for (std::size_t u = 0; u < units.size(); ++u) {
      const gradient_unit& unit = units[u];
      if (unit.begin > unit.end || unit.end > whole.count)
        throw error("gradient_buckets: unit " + std::to_string(u) + " [" + std::to_string(unit.begin) + ", " +
                    std::to_string(unit.end) + ") is not a range of the " + std::to_string(whole.count) +
                    " gradient elements");
      if (u > 0 && unit.end != units[u - 1].begin && unit.begin != units[u - 1].end)
        throw error("gradient_buckets: unit " + std::to_string(u) + " is not adjacent to unit " +
                    std::to_string(u - 1) + " in memory (a bucket must be one range)");
      low = open ? std::min(low, unit.begin) : unit.begin;
      high = open ? std::max(high, unit.end) : unit.end;
      open = true;
      if (u + 1 == units.size() || static_cast<double>(high - low) * element_bytes >= bucket_bytes) {
        closes_.push_back(buffers_.size());
        buffers_.push_back(part(whole, low, high));
        open = false;
      } else {
        closes_.push_back(none);
      }
    }
  }

  //! The buckets, in the order they become final (what the stage's `gradients()` returns).
  [[nodiscard]] std::span<const gradient_buffer> buffers() const noexcept { return buffers_; }
  //! Whether the buckets are said final one by one (a bucket size was given).
  [[nodiscard]] bool overlapped() const noexcept { return !closes_.empty(); }

  //! A gradient-producing op starts: its units count from the first again.
  void begin_op() noexcept { done_ = 0; }
  //! The op finished its next unit: in the stage's last gradient-producing op
  //! (`ctx.final_gradients`), the bucket that unit completes is said final.
  template <class Context>
  void unit_done(const Context& ctx) {
    if (!ctx.final_gradients || done_ >= closes_.size()) return;
    const std::size_t bucket = closes_[done_++];
    if (bucket != none) ctx.gradients_ready(buffers_[bucket]);
  }
  //! The op ends: in the last one, the units not reached are final as they are.
  template <class Context>
  void rest_done(const Context& ctx) {
    while (ctx.final_gradients && done_ < closes_.size()) unit_done(ctx);
  }

private:
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

  // Elements [begin, end) of `whole`.
  static gradient_buffer part(const gradient_buffer& whole, std::size_t begin, std::size_t end) noexcept {
    return {static_cast<std::byte*>(whole.data) + begin * element_size(whole.type), end - begin, whole.type};
  }

  std::vector<gradient_buffer> buffers_;
  std::vector<std::size_t> closes_;  // per unit: the bucket it completes, or `none`
  std::size_t done_ = 0;             // units finished in the running op
};

}  // namespace dflop
