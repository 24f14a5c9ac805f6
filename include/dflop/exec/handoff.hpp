// SPDX-License-Identifier: Apache-2.0
//! \file
//! The encoder -> LLM hand-off of a multimodal step: which samples each encoder
//! replica encodes for a slot, which each LLM replica's microbatch holds, and so
//! which rows go from encoder replica e to LLM replica r (one message per pair
//! that shares samples, in both directions). Every rank derives it from the
//! batch, so message sizes need no handshake.
//!
//! Row order. The encoder's last stage writes one block of rows per sample, in
//! the order of its `ctx.samples`; the LLM's first stage reads one block per
//! sample, in the order of its own. The plan picks both orders so that every
//! message is one contiguous range on both sides: no gather or scatter copies
//! (which device memory could not do on the host), the message is sent from and
//! received into the activation buffers themselves.
//! - An encoder replica's samples for a slot are grouped by the LLM replica that
//!   needs them, each group in that replica's microbatch order (the encoder's
//!   order is free: a sample's encoding does not depend on the others').
//! - An LLM microbatch keeps its order, except that with several encoder replicas
//!   its samples are grouped (stably) by the replica that encoded them; a sample
//!   no encoder encoded (text only: no rows) stays with the sample before it.
//!   With one encoder replica the LLM sees its microbatch exactly as planned.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! One multimodal step's input, as the planner's `batch_schedule` gives it: the
//! global batch, every LLM replica's microbatches, every encoder replica's parts
//! and the order the slots run in. Each rank holds all of it.
struct multimodal_batch {
  std::span<const sample> samples;                               //!< the global batch
  std::span<const std::vector<std::uint32_t>> llm_microbatches;  //!< `[llm_replica * m + slot]`: sample indices
  std::span<const std::vector<std::uint32_t>> encoder_parts;     //!< `[encoder_replica * m + slot]`: samples it encodes
  std::span<const std::uint32_t> slot_order;  //!< schedule microbatch j runs slot `slot_order[j]` (empty: slot j)
  //! `[(encoder_replica * m + slot) * encoder stages + stage]`: layers that stage
  //! replica recomputes for that slot's microbatch (`batch_schedule::encoder_recomputed`; empty: 0).
  std::span<const std::uint32_t> encoder_recomputed;
  //! `[(llm_replica * m + slot) * llm stages + stage]`: the same for the LLM (`batch_schedule::llm_recomputed`).
  std::span<const std::uint32_t> llm_recomputed;

  //! The slot schedule microbatch `j` runs.
  [[nodiscard]] std::uint32_t slot(std::uint32_t j) const noexcept { return slot_order.empty() ? j : slot_order[j]; }
};

//! Who sends which samples' rows to whom, per slot (see the file comment for the
//! row orders). Build it once per batch; every rank builds the same plan.
class handoff_routes {
public:
  //! Positions [first, end) in one replica's sample order.
  struct range {
    std::uint32_t first = 0;  //!< first position
    std::uint32_t end = 0;    //!< one past the last
    //! Whether it holds no sample.
    [[nodiscard]] bool empty() const noexcept { return first == end; }
    friend bool operator==(const range&, const range&) = default;
  };
  //! `llm_sources` entry of a sample no encoder replica encodes.
  static constexpr std::uint32_t none = 0xffffffffU;

  //! Plans `batch` for `m` slots, `encoder_replicas` (0: no encoder) and
  //! `llm_replicas`. Throws `dflop::error` for lists of the wrong count, an index
  //! out of range, a sample in two LLM microbatches (or encoder parts) of a slot,
  //! or an encoded sample that no LLM microbatch of its slot holds.
  void build(const multimodal_batch& batch, std::uint32_t m, std::uint32_t encoder_replicas,
             std::uint32_t llm_replicas) {
    m_ = m;
    encoders_ = encoder_replicas;
    llms_ = llm_replicas;
    if (m == 0 || llm_replicas == 0) throw error("handoff_routes: needs at least one slot and one LLM replica");
    expect_lists("llm_microbatches", batch.llm_microbatches.size(), llm_replicas, m);
    expect_lists("encoder_parts", batch.encoder_parts.size(), encoder_replicas, m);
    if (!batch.slot_order.empty() && batch.slot_order.size() != m)
      throw error("multimodal_batch: slot_order has " + std::to_string(batch.slot_order.size()) + " entries for " +
                  std::to_string(m) + " slots");
    for (auto k : batch.slot_order)
      if (k >= m) throw error("multimodal_batch: slot_order entry " + std::to_string(k) + " out of range");
    const std::size_t count = batch.samples.size();
    owner_.assign(count, 0);
    position_.assign(count, 0);
    source_.assign(count, none);
    owner_slot_.assign(count, 0);
    source_slot_.assign(count, 0);
    fill_begins(batch.encoder_parts, encoder_begin_, encoder_order_);
    fill_begins(batch.llm_microbatches, llm_begin_, llm_order_);
    llm_source_.assign(llm_order_.size(), none);
    encoder_range_.assign(static_cast<std::size_t>(encoders_) * m * llms_, range{});
    llm_range_.assign(encoder_range_.size(), range{});

    for (std::uint32_t k = 0; k < m; ++k) {
      const std::uint32_t stamp = k + 1;
      for (std::uint32_t r = 0; r < llms_; ++r) {
        const auto& list = batch.llm_microbatches[static_cast<std::size_t>(r) * m + k];
        for (std::size_t p = 0; p < list.size(); ++p) {
          const std::uint32_t i = checked(list[p], count);
          if (owner_slot_[i] == stamp)
            throw error("multimodal_batch: sample " + std::to_string(i) + " is in two LLM microbatches of slot " +
                        std::to_string(k));
          owner_slot_[i] = stamp;
          owner_[i] = r;
          position_[i] = static_cast<std::uint32_t>(p);
        }
      }
      for (std::uint32_t e = 0; e < encoders_; ++e)
        for (std::uint32_t i : batch.encoder_parts[static_cast<std::size_t>(e) * m + k]) {
          checked(i, count);
          if (owner_slot_[i] != stamp)
            throw error("multimodal_batch: encoder replica " + std::to_string(e) + " encodes sample " +
                        std::to_string(i) + " for slot " + std::to_string(k) +
                        ", which no LLM microbatch of that slot holds");
          if (source_slot_[i] == stamp)
            throw error("multimodal_batch: sample " + std::to_string(i) + " is encoded twice for slot " +
                        std::to_string(k));
          source_slot_[i] = stamp;
          source_[i] = e;
        }
      for (std::uint32_t e = 0; e < encoders_; ++e) order_encoder(batch, e, k);
      for (std::uint32_t r = 0; r < llms_; ++r) order_llm(batch, r, k, stamp);
    }
  }

  //! Slots per replica.
  [[nodiscard]] std::uint32_t microbatches() const noexcept { return m_; }
  //! Encoder replicas (0 without an encoder).
  [[nodiscard]] std::uint32_t encoder_replicas() const noexcept { return encoders_; }
  //! LLM replicas.
  [[nodiscard]] std::uint32_t llm_replicas() const noexcept { return llms_; }

  //! The samples encoder replica `e` encodes for slot `k`, in the order its stages see them.
  [[nodiscard]] std::span<const std::uint32_t> encoder_samples(std::uint32_t e, std::uint32_t k) const noexcept {
    const std::size_t at = static_cast<std::size_t>(e) * m_ + k;
    return std::span<const std::uint32_t>(encoder_order_).subspan(encoder_begin_[at], encoder_begin_[at + 1] - encoder_begin_[at]);
  }
  //! The samples of LLM replica `r`'s microbatch for slot `k`, in the order its stages see them.
  [[nodiscard]] std::span<const std::uint32_t> llm_samples(std::uint32_t r, std::uint32_t k) const noexcept {
    const std::size_t at = static_cast<std::size_t>(r) * m_ + k;
    return std::span<const std::uint32_t>(llm_order_).subspan(llm_begin_[at], llm_begin_[at + 1] - llm_begin_[at]);
  }
  //! Per position of `llm_samples(r, k)`: the encoder replica that encoded it, or `none`.
  [[nodiscard]] std::span<const std::uint32_t> llm_sources(std::uint32_t r, std::uint32_t k) const noexcept {
    const std::size_t at = static_cast<std::size_t>(r) * m_ + k;
    return std::span<const std::uint32_t>(llm_source_).subspan(llm_begin_[at], llm_begin_[at + 1] - llm_begin_[at]);
  }
  //! Positions in `encoder_samples(e, k)` of the samples LLM replica `r` needs.
  [[nodiscard]] range encoder_range(std::uint32_t e, std::uint32_t r, std::uint32_t k) const noexcept {
    return encoder_range_[at(e, r, k)];
  }
  //! Positions in `llm_samples(r, k)` of the samples encoder replica `e` encoded
  //! (samples inside it that no encoder encoded carry no rows).
  [[nodiscard]] range llm_range(std::uint32_t e, std::uint32_t r, std::uint32_t k) const noexcept {
    return llm_range_[at(e, r, k)];
  }
  //! Whether encoder replica `e` sends LLM replica `r` rows for slot `k` (and gets gradients back).
  [[nodiscard]] bool feeds(std::uint32_t e, std::uint32_t r, std::uint32_t k) const noexcept {
    return !encoder_range_[at(e, r, k)].empty();
  }

private:
  [[nodiscard]] std::size_t at(std::uint32_t e, std::uint32_t r, std::uint32_t k) const noexcept {
    return (static_cast<std::size_t>(e) * m_ + k) * llms_ + r;
  }
  void expect_lists(const char* what, std::size_t lists, std::uint32_t replicas, std::uint32_t m) const {
    if (lists != static_cast<std::size_t>(replicas) * m)
      throw error(std::string("multimodal_batch: ") + what + " has " + std::to_string(lists) + " lists for " +
                  std::to_string(replicas) + " replicas x " + std::to_string(m) + " slots");
  }
  static std::uint32_t checked(std::uint32_t i, std::size_t count) {
    if (i >= count) throw error("multimodal_batch: sample index " + std::to_string(i) + " out of range");
    return i;
  }
  static void fill_begins(std::span<const std::vector<std::uint32_t>> lists, std::vector<std::size_t>& begin,
                          std::vector<std::uint32_t>& order) {
    begin.assign(lists.size() + 1, 0);
    for (std::size_t l = 0; l < lists.size(); ++l) begin[l + 1] = begin[l] + lists[l].size();
    order.assign(begin.back(), 0);
  }

  // Encoder replica e's part: grouped by the LLM replica that needs each sample, in its microbatch order.
  void order_encoder(const multimodal_batch& batch, std::uint32_t e, std::uint32_t k) {
    const auto& part = batch.encoder_parts[static_cast<std::size_t>(e) * m_ + k];
    auto out = std::span<std::uint32_t>(encoder_order_).subspan(encoder_begin_[static_cast<std::size_t>(e) * m_ + k], part.size());
    std::copy(part.begin(), part.end(), out.begin());
    std::sort(out.begin(), out.end(), [&](std::uint32_t a, std::uint32_t b) {
      return std::pair(owner_[a], position_[a]) < std::pair(owner_[b], position_[b]);
    });
    for (std::size_t p = 0; p < out.size(); ++p) {
      range& group = encoder_range_[at(e, owner_[out[p]], k)];
      if (group.empty()) group.first = static_cast<std::uint32_t>(p);
      group.end = static_cast<std::uint32_t>(p + 1);
    }
  }

  // LLM replica r's microbatch: stably grouped by encoder replica, unencoded samples riding along.
  void order_llm(const multimodal_batch& batch, std::uint32_t r, std::uint32_t k, std::uint32_t stamp) {
    const auto& list = batch.llm_microbatches[static_cast<std::size_t>(r) * m_ + k];
    const std::size_t begin = llm_begin_[static_cast<std::size_t>(r) * m_ + k];
    keyed_.clear();
    std::uint32_t key = 0;
    for (std::uint32_t i : list)
      if (source_slot_[i] == stamp) {
        key = source_[i];
        break;
      }
    for (std::uint32_t i : list) {
      if (source_slot_[i] == stamp) key = source_[i];
      keyed_.emplace_back(key, i);
    }
    std::stable_sort(keyed_.begin(), keyed_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t p = 0; p < keyed_.size(); ++p) {
      const std::uint32_t i = keyed_[p].second;
      llm_order_[begin + p] = i;
      if (source_slot_[i] != stamp) continue;
      llm_source_[begin + p] = source_[i];
      range& group = llm_range_[at(source_[i], r, k)];
      if (group.empty()) group.first = static_cast<std::uint32_t>(p);
      group.end = static_cast<std::uint32_t>(p + 1);
    }
  }

  std::uint32_t m_ = 0;
  std::uint32_t encoders_ = 0;
  std::uint32_t llms_ = 0;
  std::vector<std::uint32_t> encoder_order_, llm_order_, llm_source_;
  std::vector<std::size_t> encoder_begin_, llm_begin_;
  std::vector<range> encoder_range_, llm_range_;
  // Per sample, for the slot being planned (valid where its *_slot_ stamp is the slot + 1).
  std::vector<std::uint32_t> owner_, position_, source_, owner_slot_, source_slot_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> keyed_;
};

//! The bytes of each sample's block in `samples`' order, from `bytes_of(one-sample view)`,
//! as prefix sums: `prefix[p]` is where position p's block starts, `prefix.back()` the total.
template <class BytesOf>
void sample_offsets(std::span<const sample> batch, std::span<const std::uint32_t> samples, BytesOf&& bytes_of,
                    std::vector<std::size_t>& prefix) {
  prefix.assign(samples.size() + 1, 0);
  for (std::size_t p = 0; p < samples.size(); ++p)
    prefix[p + 1] = prefix[p] + static_cast<std::size_t>(bytes_of(microbatch_view(batch, samples.subspan(p, 1))));
}

}  // namespace dflop
