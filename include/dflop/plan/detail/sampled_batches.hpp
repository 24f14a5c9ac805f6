// SPDX-License-Identifier: Apache-2.0
//! \file
//! The global batches the plan search judges configurations on: the scoring
//! batches (mean iteration time), the workload's heaviest sample per module
//! (which every plan must hold alone), and the heaviest of many drawn batches
//! (which a plan's memory budget must pack). Drawn once per search; every
//! price cached elsewhere depends on them.
#pragma once

#include <dflop/plan/planner_options.hpp>
#include <dflop/util/saturating.hpp>
#include <dflop/workload/sample.hpp>
#include <dflop/workload/sampling.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace dflop::detail {

//! One microbatch per module, viewed: what a memory check prices.
struct microbatch_views {
  std::span<const sample> llm;      //!< an LLM microbatch (bin)
  std::span<const sample> encoder;  //!< an encoder part
};

//! The samples of one microbatch per module, owned (e.g. the tail microbatches
//! seen while scoring a configuration).
struct tail_samples {
  std::vector<sample> llm;      //!< the tail LLM bin
  std::vector<sample> encoder;  //!< the tail encoder part
  //! Both microbatches, viewed.
  operator microbatch_views() const noexcept { return {llm, encoder}; }  // NOLINT: views are what checks take
};

//! The batches of one plan search, drawn from a workload with the search's
//! `planner_options` (global batch, batch count, seed, tail batches).
struct sampled_batches {
  //! The global batches configurations are scored on.
  std::vector<std::vector<sample>> scoring;
  //! The workload's sample with the most LLM tokens and the one with the most
  //! encoder tokens, each as a microbatch of its own: a plan must hold both
  //! alone (the memory model needs more bytes for more tokens), or some batch
  //! that draws them cannot fit, however it is packed.
  tail_samples heaviest;
  //! The heaviest global batches of many drawn: half by encoder tokens, half by
  //! LLM tokens (`planner_options::tail_batches` in all, from 64 times as many
  //! draws). A plan whose memory budget they cannot be packed within would fail
  //! on such batches in training; four scoring batches rarely show them.
  std::vector<std::vector<sample>> tails;

  //! Draws every batch from `workload` with `options`.
  [[nodiscard]] static sampled_batches draw(std::span<const sample> workload, const planner_options& options) {
    sampled_batches drawn;
    drawn.scoring = sample_batches(workload, static_cast<std::size_t>(options.global_batch),
                                   static_cast<std::size_t>(options.batches), batch_mode::without_replacement,
                                   options.seed);
    const auto most = [&](std::int64_t sample::*field) {
      return *std::max_element(workload.begin(), workload.end(),
                               [&](const sample& a, const sample& b) { return a.*field < b.*field; });
    };
    if (!workload.empty()) {
      drawn.heaviest.llm.push_back(most(&sample::llm_tokens));
      drawn.heaviest.encoder.push_back(most(&sample::encoder_tokens));
    }
    drawn.tails = heaviest_batches(workload, options);
    return drawn;
  }

private:
  // Mixed into the seed of the tail-batch draws, so they are not the scoring batches.
  static constexpr std::uint64_t tail_salt = 0x7461696c5f627463ULL;

  // Draws 64 x `tail_batches` global batches (as indices: cheap) and keeps the
  // heaviest by encoder tokens and by LLM tokens, half each, without repeats.
  static std::vector<std::vector<sample>> heaviest_batches(std::span<const sample> workload,
                                                           const planner_options& options) {
    std::vector<std::vector<sample>> kept_batches;
    const std::size_t keep = options.tail_batches;
    const auto size = static_cast<std::size_t>(options.global_batch);
    if (keep == 0 || workload.size() < size) return kept_batches;
    batch_sampler sampler(workload.size(), size, batch_mode::without_replacement, options.seed ^ tail_salt);
    std::vector<std::vector<std::size_t>> draws(64 * keep);
    std::vector<std::pair<std::int64_t, std::int64_t>> totals(draws.size());  // (encoder, LLM) tokens
    for (std::size_t d = 0; d < draws.size(); ++d) {
      draws[d] = sampler.next();
      for (std::size_t i : draws[d]) {
        totals[d].first = saturating_add(totals[d].first, workload[i].encoder_tokens);
        totals[d].second = saturating_add(totals[d].second, workload[i].llm_tokens);
      }
    }
    std::vector<std::size_t> by_encoder(draws.size()), by_llm(draws.size());
    std::iota(by_encoder.begin(), by_encoder.end(), std::size_t{0});
    std::iota(by_llm.begin(), by_llm.end(), std::size_t{0});
    std::stable_sort(by_encoder.begin(), by_encoder.end(),
                     [&](std::size_t a, std::size_t b) { return totals[a].first > totals[b].first; });
    std::stable_sort(by_llm.begin(), by_llm.end(),
                     [&](std::size_t a, std::size_t b) { return totals[a].second > totals[b].second; });
    std::vector<char> kept(draws.size(), 0);
    for (std::size_t k = 0, e = 0, l = 0; k < keep; ++k) {
      auto& order = k % 2 == 0 ? by_encoder : by_llm;
      auto& at = k % 2 == 0 ? e : l;
      while (kept[order[at]]) ++at;
      kept[order[at]] = 1;
      kept_batches.push_back(gather_samples(workload, draws[order[at]]));
    }
    return kept_batches;
  }
};

}  // namespace dflop::detail
