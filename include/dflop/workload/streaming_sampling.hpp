// SPDX-License-Identifier: Apache-2.0
//! \file
//! Drawing one global batch from a trace too large for memory: a single pass
//! with reservoir sampling (Vitter's Algorithm R), memory O(batch size). Every
//! line is still parsed and validated, so bad input is never skipped unseen;
//! only duplicate ids go unchecked, since catching them needs memory
//! proportional to the trace (validate with `read_trace` when that matters).
#pragma once

#include <dflop/error.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/sample.hpp>
#include <dflop/workload/trace.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <istream>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! Keeps a uniform random subset of `capacity` items of a stream of unknown
//! length: after n offers, each subset of min(n, capacity) items is equally
//! likely, so every item is held with probability min(1, capacity / n).
template <class Item>
class reservoir_sampler {
public:
  //! `capacity` > 0 items are kept; `seed` fixes which.
  reservoir_sampler(std::size_t capacity, std::uint64_t seed) : capacity_(capacity), random_(seed) {
    if (capacity == 0) throw input_error("batch size", 0, "must be at least 1");
    items_.reserve(capacity);
  }

  //! Offers the next item of the stream (Algorithm R: item n, 0-based, replaces
  //! a uniform slot with probability capacity / (n + 1)).
  void offer(Item item) {
    if (items_.size() < capacity_) {
      items_.push_back(std::move(item));
    } else {
      const std::uint64_t slot = random_.below(seen_ + 1);
      if (slot < capacity_) items_[slot] = std::move(item);
    }
    ++seen_;
  }

  //! The items held now, in reservoir slot order (not shuffled, not sorted).
  [[nodiscard]] const std::vector<Item>& items() const noexcept { return items_; }
  //! Moves the held items out; the sampler is left empty of items.
  [[nodiscard]] std::vector<Item> take() noexcept { return std::move(items_); }
  //! How many items were offered.
  [[nodiscard]] std::uint64_t seen() const noexcept { return seen_; }
  //! How many items are kept at most.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

private:
  std::size_t capacity_;
  random_generator random_;
  std::vector<Item> items_;
  std::uint64_t seen_ = 0;
};

//! One batch of `batch_size` distinct samples (without replacement) drawn
//! uniformly from the trace on `in` in a single pass. Throws `input_error` for
//! a bad line (naming it) or a trace holding fewer than `batch_size` samples.
[[nodiscard]] inline std::vector<sample> stream_sample_batch(std::istream& in, const std::string& source,
                                                             std::size_t batch_size, std::uint64_t seed) {
  reservoir_sampler<sample> reservoir(batch_size, seed);
  trace_reader reader(in, source, /*check_duplicate_ids=*/false);
  while (auto next = reader.next()) reservoir.offer(std::move(*next));
  if (reservoir.seen() < batch_size) {
    std::string reason = "the trace holds ";
    reason.append(std::to_string(reservoir.seen()))
        .append(" samples, fewer than the batch size ")
        .append(std::to_string(batch_size))
        .append(" (sampling without replacement)");
    throw input_error(source, 0, reason);
  }
  return reservoir.take();
}

//! `stream_sample_batch` over the trace file at `path`; throws `input_error` when it cannot be opened.
[[nodiscard]] inline std::vector<sample> stream_sample_batch_file(const std::string& path, std::size_t batch_size,
                                                                  std::uint64_t seed) {
  std::ifstream in(path);
  if (!in) throw input_error(path, 0, "cannot open file for reading");
  return stream_sample_batch(in, path, batch_size, seed);
}

}  // namespace dflop
