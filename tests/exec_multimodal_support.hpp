// SPDX-License-Identifier: Apache-2.0
// Test helpers for the multimodal executor: toy encoder and LLM stages (per-sample
// rows through a tanh layer whose output columns are split over the stage's TP
// group), a batch with encoder parts that interleave over LLM replicas, and the
// hand-off pattern and message count derived straight from the index lists.
#pragma once

#include <dflop/exec/handoff.hpp>
#include "gradient_difference.hpp"
#include <dflop/util/precise_sleep.hpp>

#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

namespace dflop::test {

// Samples with encoder work (those the encoder parts hold).
inline std::size_t encoded_samples(const microbatch_view& mb) {
  return static_cast<std::size_t>(std::count_if(mb.begin(), mb.end(), [](const sample& s) { return s.encoder_items > 0; }));
}

// Encoder rows of a sample: one per encoder item (tile, image, frame); none for text.
inline std::size_t encoder_rows(const sample& s) { return static_cast<std::size_t>(s.encoder_items); }
// LLM rows of a sample: max(1, llm_tokens / 512).
inline std::size_t llm_rows(const sample& s) {
  return static_cast<std::size_t>(std::max<std::int64_t>(1, s.llm_tokens / 512));
}
inline std::size_t encoder_rows(const microbatch_view& mb) {
  std::size_t total = 0;
  for (const auto& s : mb) total += encoder_rows(s);
  return total;
}
inline std::size_t llm_rows(const microbatch_view& mb) {
  std::size_t total = 0;
  for (const auto& s : mb) total += llm_rows(s);
  return total;
}

// y = tanh(x W + b) per row, width `hidden`. With a TP group of t ranks, rank i
// computes the output columns [i h / t, (i + 1) h / t) and owns their weight
// gradients; `tensor_sum` (set when t > 1) sums the partial rows over the group.
class toy_layer {
public:
  std::function<void(std::span<double>)> tensor_sum;  // all-reduce over the stage's TP group
  std::optional<std::pair<op_kind, std::uint32_t>> fault;  // throw at this (op, microbatch)

  std::span<double> gradients() { return gradients_; }
  std::span<const double> weights() const { return weights_; }

protected:
  toy_layer(std::uint32_t position, std::size_t hidden) : hidden_(hidden), weights_(hidden * hidden + hidden) {
    std::uint64_t state = 0x9E3779B97F4A7C15ULL * (position + 3);
    for (auto& w : weights_) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      w = (static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5) * 1.6 / std::sqrt(static_cast<double>(hidden));
    }
    gradients_.assign(weights_.size(), 0.0);
  }

  void trip(const stage_context& ctx) const {
    if (fault && fault->first == ctx.kind && fault->second == ctx.microbatch) throw std::runtime_error("injected fault");
  }
  std::pair<std::size_t, std::size_t> columns(const stage_context& ctx) const {
    return {ctx.tp_rank * hidden_ / ctx.tp_size, (ctx.tp_rank + 1) * hidden_ / ctx.tp_size};
  }
  void reduce(const stage_context& ctx, std::span<double> values) const {
    if (ctx.tp_size > 1 && !values.empty()) tensor_sum(values);  // both TP ranks see the same sizes
  }
  void layer(const stage_context& ctx, std::span<const double> x, std::span<double> y) const {
    const auto [first, end] = columns(ctx);
    const std::size_t rows = y.size() / hidden_;
    for (std::size_t t = 0; t < rows; ++t)
      for (std::size_t o = 0; o < hidden_; ++o) {
        if (o < first || o >= end) {
          y[t * hidden_ + o] = 0;
          continue;
        }
        double sum = weights_[hidden_ * hidden_ + o];
        for (std::size_t i = 0; i < hidden_; ++i) sum += x[t * hidden_ + i] * weights_[i * hidden_ + o];
        y[t * hidden_ + o] = std::tanh(sum);
      }
    reduce(ctx, y);
  }
  // dx = dpre W^T over this rank's columns, summed over the TP group.
  void input_gradient(const stage_context& ctx, std::span<const double> dpre, std::span<double> dx) const {
    const auto [first, end] = columns(ctx);
    const std::size_t rows = dpre.size() / hidden_;
    for (std::size_t t = 0; t < rows; ++t)
      for (std::size_t i = 0; i < hidden_; ++i) {
        double sum = 0;
        for (std::size_t o = first; o < end; ++o) sum += dpre[t * hidden_ + o] * weights_[i * hidden_ + o];
        dx[t * hidden_ + i] = sum;
      }
    reduce(ctx, dx);
  }
  void weight_gradient(const stage_context& ctx, std::span<const double> x, std::span<const double> dpre) {
    const auto [first, end] = columns(ctx);
    const std::size_t rows = dpre.size() / hidden_;
    for (std::size_t t = 0; t < rows; ++t)
      for (std::size_t i = 0; i < hidden_; ++i)
        for (std::size_t o = first; o < end; ++o)
          gradients_[i * hidden_ + o] += x[t * hidden_ + i] * dpre[t * hidden_ + o];
    for (std::size_t t = 0; t < rows; ++t)
      for (std::size_t o = first; o < end; ++o) gradients_[hidden_ * hidden_ + o] += dpre[t * hidden_ + o];
  }

  std::size_t hidden_;
  std::vector<double> weights_;
  std::vector<double> gradients_;
};

// An encoder stage: one row per encoder item. Position 0 embeds the items itself;
// every encoder stage's output goes on (to the next stage or, from the last, to the LLM).
class toy_encoder_stage : public toy_layer {
public:
  explicit toy_encoder_stage(std::uint32_t position, std::size_t hidden = 6)
      : toy_layer(position, hidden), position_(position) {}
  std::size_t input_bytes(const microbatch_view& mb) const {
    return position_ == 0 ? 0 : encoder_rows(mb) * hidden_ * sizeof(double);
  }
  std::size_t output_bytes(const microbatch_view& mb) const { return encoder_rows(mb) * hidden_ * sizeof(double); }

  void forward(stage_context& ctx) {
    trip(ctx);
    const std::size_t n = encoder_rows(ctx.samples) * hidden_;
    auto y = as_span<double>(ctx.stash(n * sizeof(double)));
    std::span<const double> x = as_span<double>(ctx.input);
    if (position_ == 0) {
      auto embedded = as_span<double>(ctx.stash(n * sizeof(double)));
      std::size_t row = 0;
      for (std::size_t s = 0; s < ctx.samples.size(); ++s)
        for (std::size_t t = 0; t < encoder_rows(ctx.samples[s]); ++t, ++row)
          for (std::size_t k = 0; k < hidden_; ++k)
            embedded[row * hidden_ + k] = std::cos(0.29 * ctx.samples.indices()[s] + 0.07 * static_cast<double>(t) +
                                                   0.5 * static_cast<double>(k));
      x = embedded;
    }
    layer(ctx, x, y);
    std::copy(y.begin(), y.end(), as_span<double>(ctx.output).begin());
  }
  void backward(stage_context& ctx) {
    trip(ctx);
    auto y = as_span<double>(ctx.stashed(0));
    auto dpre = as_span<double>(ctx.stash(y.size() * sizeof(double)));
    auto dy = as_span<double>(ctx.output_grad);
    for (std::size_t i = 0; i < y.size(); ++i) dpre[i] = dy[i] * (1.0 - y[i] * y[i]);
    if (position_ > 0) input_gradient(ctx, dpre, as_span<double>(ctx.input_grad));
  }
  void weight(stage_context& ctx) {
    const std::span<const double> x = position_ == 0 ? as_span<double>(ctx.stashed(1)) : as_span<double>(ctx.input);
    weight_gradient(ctx, x, as_span<double>(ctx.stashed(position_ == 0 ? 2 : 1)));
  }

private:
  std::uint32_t position_;
};

// An LLM stage: max(1, llm_tokens / 512) rows per sample. Its first stage (position
// `first`) embeds each sample's text rows and adds the sample's encoder rows onto
// them (encoder row u onto text row u mod rows); the last computes the loss.
class toy_llm_stage : public toy_layer {
public:
  toy_llm_stage(std::uint32_t position, std::uint32_t positions, std::uint32_t first, std::size_t hidden = 6)
      : toy_layer(position, hidden), position_(position), positions_(positions), first_(first) {}
  std::size_t input_bytes(const microbatch_view& mb) const {
    if (position_ == 0) return 0;
    return (position_ == first_ ? encoder_rows(mb) : llm_rows(mb)) * hidden_ * sizeof(double);
  }
  std::size_t output_bytes(const microbatch_view& mb) const {
    return position_ + 1 == positions_ ? 0 : llm_rows(mb) * hidden_ * sizeof(double);
  }

  void forward(stage_context& ctx) {
    trip(ctx);
    const std::size_t n = llm_rows(ctx.samples) * hidden_;
    auto y = as_span<double>(ctx.stash(n * sizeof(double)));
    std::span<const double> x = as_span<double>(ctx.input);
    if (position_ == first_) {
      auto embedded = as_span<double>(ctx.stash(n * sizeof(double)));
      const auto rows = as_span<double>(ctx.input);
      std::size_t row = 0;
      std::size_t from = 0;  // next encoder row
      for (std::size_t s = 0; s < ctx.samples.size(); ++s) {
        const std::size_t count = llm_rows(ctx.samples[s]);
        for (std::size_t t = 0; t < count; ++t)
          for (std::size_t k = 0; k < hidden_; ++k)
            embedded[(row + t) * hidden_ + k] = std::sin(0.37 * ctx.samples.indices()[s] +
                                                         0.11 * static_cast<double>(t) + static_cast<double>(k));
        if (position_ > 0)
          for (std::size_t u = 0; u < encoder_rows(ctx.samples[s]); ++u, ++from)
            for (std::size_t k = 0; k < hidden_; ++k)
              embedded[(row + u % count) * hidden_ + k] += rows[from * hidden_ + k];
        row += count;
      }
      x = embedded;
    }
    layer(ctx, x, y);
    if (position_ + 1 == positions_) {
      double loss = 0;
      for_each_target(ctx.samples, [&](std::size_t at, double target) {
        const double d = y[at] - target;
        loss += 0.5 * d * d;
      });
      ctx.loss = loss;
    } else {
      std::copy(y.begin(), y.end(), as_span<double>(ctx.output).begin());
    }
  }
  void backward(stage_context& ctx) {
    trip(ctx);
    auto y = as_span<double>(ctx.stashed(0));
    auto dpre = as_span<double>(ctx.stash(y.size() * sizeof(double)));
    if (position_ + 1 == positions_) {
      for_each_target(ctx.samples, [&](std::size_t at, double target) { dpre[at] = (y[at] - target) * (1.0 - y[at] * y[at]); });
    } else {
      auto dy = as_span<double>(ctx.output_grad);
      for (std::size_t i = 0; i < y.size(); ++i) dpre[i] = dy[i] * (1.0 - y[i] * y[i]);
    }
    if (position_ == 0) return;
    if (position_ != first_) {
      input_gradient(ctx, dpre, as_span<double>(ctx.input_grad));
      return;
    }
    // The gradient of each encoder row is that of the text row it was added to.
    auto dx = as_span<double>(ctx.scratch(y.size() * sizeof(double)));
    input_gradient(ctx, dpre, dx);
    auto rows = as_span<double>(ctx.input_grad);
    std::size_t row = 0;
    std::size_t to = 0;
    for (std::size_t s = 0; s < ctx.samples.size(); ++s) {
      const std::size_t count = llm_rows(ctx.samples[s]);
      for (std::size_t u = 0; u < encoder_rows(ctx.samples[s]); ++u, ++to)
        for (std::size_t k = 0; k < hidden_; ++k) rows[to * hidden_ + k] = dx[(row + u % count) * hidden_ + k];
      row += count;
    }
  }
  void weight(stage_context& ctx) {
    const std::span<const double> x = position_ == first_ ? as_span<double>(ctx.stashed(1)) : as_span<double>(ctx.input);
    weight_gradient(ctx, x, as_span<double>(ctx.stashed(position_ == first_ ? 2 : 1)));
  }

private:
  // Target of every output element, from its sample and row (independent of the sample order).
  template <class Visit>
  void for_each_target(const microbatch_view& mb, Visit&& visit) const {
    std::size_t at = 0;
    for (std::size_t s = 0; s < mb.size(); ++s)
      for (std::size_t t = 0; t < llm_rows(mb[s]); ++t)
        for (std::size_t k = 0; k < hidden_; ++k, ++at)
          visit(at, 0.5 * std::sin(0.05 * static_cast<double>(mb.indices()[s] * 7 + t) + static_cast<double>(k)));
  }

  std::uint32_t position_;
  std::uint32_t positions_;
  std::uint32_t first_;
};

// Lets a toy stage's TP math (held in `slot`, a variant) run over `group`, the
// executor's tensor group (all its ranks see the same sizes).
template <class Slot, class Group>
void connect_tensor_group(Slot& slot, Group& group) {
  std::visit(
      [&](auto& stage) {
        stage.tensor_sum = [&group](std::span<double> values) { group.all_reduce_sum(gradient_buffer::of(values)); };
      },
      slot);
}

// The toy stage a plan rank's assignment names: its pipeline position fixes its weights.
inline std::variant<toy_encoder_stage, toy_llm_stage> make_toy_stage(const stage_assignment& a) {
  if (a.role.encoder()) return toy_encoder_stage(a.role.position);
  return toy_llm_stage(a.role.position, a.positions, a.role.position - a.role.stage);
}

// The sequential reference of a configuration's toy stages: one object per
// pipeline position, every replica through it (positions as make_toy_stage's).
struct toy_reference {
  std::vector<toy_encoder_stage> encoder;
  std::vector<toy_llm_stage> llm;

  explicit toy_reference(const parallel_config& config) {
    const auto encoder_stages = static_cast<std::uint32_t>(config.encoder.pp);
    const auto positions = static_cast<std::uint32_t>(config.stages());
    for (std::uint32_t s = 0; s < encoder_stages; ++s) encoder.emplace_back(s);
    for (std::uint32_t p = encoder_stages; p < positions; ++p) llm.emplace_back(p, positions, encoder_stages);
  }
  // One step from zero gradients; returns its loss.
  double step(const multimodal_batch& batch, std::uint32_t m) {
    for (auto& s : encoder) std::ranges::fill(s.gradients(), 0.0);
    for (auto& s : llm) std::ranges::fill(s.gradients(), 0.0);
    return run_sequential(encoder, llm, batch, m);
  }
  // The gradients of pipeline position `position`.
  std::span<const double> gradients(std::uint32_t position) {
    return position < encoder.size() ? encoder[position].gradients() : llm[position - encoder.size()].gradients();
  }
};

// A multimodal batch and the lists it views.
struct batch_data {
  std::vector<sample> samples;
  std::vector<std::vector<std::uint32_t>> llm;    // [llm_replica * m + slot]
  std::vector<std::vector<std::uint32_t>> parts;  // [encoder_replica * m + slot]
  std::vector<std::uint32_t> order;               // slot order (empty: identity)
  multimodal_batch view() const { return {samples, llm, parts, order, {}, {}}; }
};

// `count` onevision samples (seed `seed`) in `llm_replicas x m` contiguous LLM
// microbatches. The samples of slot 1's first microbatch are made text-only (no
// encoder work) and so is every fifth other sample; each slot's encoded samples are
// dealt to the encoder replicas in turn, so parts interleave over LLM replicas.
inline batch_data make_batch(std::size_t count, std::uint64_t seed, std::uint32_t m, std::uint32_t encoder_replicas,
                             std::uint32_t llm_replicas) {
  batch_data data;
  data.samples = generate_mixture("onevision", count, seed);
  data.llm = contiguous_microbatches(count, llm_replicas * m);
  const auto text_only = [&](std::uint32_t i) {
    auto& s = data.samples[i];
    s.kind = modality::text;
    s.encoder_items = 0;
    s.encoder_tokens = 0;
  };
  if (m > 1)
    for (auto i : data.llm[1]) text_only(i);
  for (std::uint32_t i = 3; i < count; i += 5) text_only(i);
  data.parts.resize(static_cast<std::size_t>(encoder_replicas) * m);
  for (std::uint32_t k = 0; k < m; ++k) {
    std::uint32_t dealt = 0;
    for (std::uint32_t r = 0; r < llm_replicas; ++r)
      for (auto i : data.llm[static_cast<std::size_t>(r) * m + k])
        if (data.samples[i].encoder_items > 0 && encoder_replicas > 0)
          data.parts[static_cast<std::size_t>(dealt++ % encoder_replicas) * m + k].push_back(i);
  }
  // Parts list their samples in no particular order (here: descending), which the plan must not rely on.
  for (auto& part : data.parts) std::reverse(part.begin(), part.end());
  return data;
}

// Whether encoder replica e's part for slot k shares a sample with LLM replica r's
// microbatch for slot k: straight from the lists.
inline bool shares_samples(const batch_data& data, std::uint32_t m, std::uint32_t e, std::uint32_t r, std::uint32_t k) {
  const auto& part = data.parts[static_cast<std::size_t>(e) * m + k];
  const auto& mb = data.llm[static_cast<std::size_t>(r) * m + k];
  return std::any_of(part.begin(), part.end(), [&](std::uint32_t i) { return std::find(mb.begin(), mb.end(), i) != mb.end(); });
}

// Messages a multimodal step must send, counted from the layout and the lists:
// two per microbatch between consecutive stages of a module, for every replica and
// TP rank; two per (encoder replica, LLM replica, slot) sharing samples; and a
// broadcast to the other TP ranks for every LLM microbatch that gets encoder rows
// (forward) and every encoder part that fed some LLM replica (backward).
inline std::size_t expected_messages(const batch_data& data, std::uint32_t m, std::uint32_t encoder_stages,
                                     std::uint32_t encoder_replicas, std::uint32_t encoder_tp, std::uint32_t llm_stages,
                                     std::uint32_t llm_replicas, std::uint32_t llm_tp) {
  std::size_t count = 0;
  if (encoder_stages > 0) count += 2ULL * m * (encoder_stages - 1) * encoder_replicas * encoder_tp;
  count += 2ULL * m * (llm_stages - 1) * llm_replicas * llm_tp;
  if (encoder_stages == 0) return count;
  for (std::uint32_t k = 0; k < m; ++k) {
    for (std::uint32_t e = 0; e < encoder_replicas; ++e)
      for (std::uint32_t r = 0; r < llm_replicas; ++r)
        if (shares_samples(data, m, e, r, k)) count += 2;
    for (std::uint32_t r = 0; r < llm_replicas; ++r) {
      bool fed = false;
      for (std::uint32_t e = 0; e < encoder_replicas; ++e) fed = fed || shares_samples(data, m, e, r, k);
      if (fed) count += llm_tp - 1;
    }
    for (std::uint32_t e = 0; e < encoder_replicas; ++e) {
      bool fed = false;
      for (std::uint32_t r = 0; r < llm_replicas; ++r) fed = fed || shares_samples(data, m, e, r, k);
      if (fed) count += encoder_tp - 1;
    }
  }
  return count;
}

// Costs of a multimodal step for `data`: per (replica, slot, stage), F = f x share
// with share = the list's tokens (encoder or LLM) / the mean over non-empty lists,
// clamped to [0.5, 2] (0 for an empty encoder part); B = 2 F, or B = W = F when
// `weight`. Hand-offs where the lists share samples, moving in no time.
inline multimodal_costs sleep_costs(const batch_data& data, std::uint32_t m, std::uint32_t encoder_stages,
                                    std::uint32_t encoder_replicas, std::uint32_t llm_stages,
                                    std::uint32_t llm_replicas, double f, bool weight) {
  multimodal_costs costs;
  costs.microbatches = m;
  const auto fill = [&](module_costs& module, std::uint32_t stages, std::uint32_t replicas,
                        const std::vector<std::vector<std::uint32_t>>& lists, bool encoder) {
    module.stages = stages;
    module.replicas = replicas;
    const std::size_t n = static_cast<std::size_t>(replicas) * m * stages;
    module.forward.assign(n, 0.0);
    module.backward.assign(n, 0.0);
    if (weight) module.weight.assign(n, 0.0);
    std::vector<double> tokens(lists.size(), 0.0);
    double total = 0;
    std::size_t used = 0;
    for (std::size_t l = 0; l < lists.size(); ++l) {
      for (auto i : lists[l])
        tokens[l] += static_cast<double>(encoder ? data.samples[i].encoder_tokens : data.samples[i].llm_tokens);
      total += tokens[l];
      if (tokens[l] > 0) ++used;
    }
    for (std::uint32_t q = 0; q < replicas; ++q)
      for (std::uint32_t k = 0; k < m; ++k) {
        const double t = tokens[static_cast<std::size_t>(q) * m + k];
        const double forward = t > 0 ? f * std::clamp(t * static_cast<double>(used) / total, 0.5, 2.0) : 0.0;
        for (std::uint32_t s = 0; s < stages; ++s) {
          const std::size_t at = module.at(q, k, s, m);
          module.forward[at] = forward;
          module.backward[at] = (weight ? 1.0 : 2.0) * forward;
          if (weight) module.weight[at] = forward;
        }
      }
  };
  fill(costs.encoder, encoder_stages, encoder_replicas, data.parts, true);
  fill(costs.llm, llm_stages, llm_replicas, data.llm, false);
  costs.handoffs.assign(static_cast<std::size_t>(encoder_replicas) * m * llm_replicas, handoff{});
  for (std::uint32_t e = 0; e < encoder_replicas; ++e)
    for (std::uint32_t k = 0; k < m; ++k)
      for (std::uint32_t r = 0; r < llm_replicas; ++r)
        costs.handoffs[costs.handoff_at(e, k, r)].feeds = shares_samples(data, m, e, r, k);
  return costs;
}

// Sleeps for its op's cost in a `multimodal_costs` table (identity slot order);
// moves 8 bytes per sample (per encoded sample across the hand-off) so messages are real.
class sleep_module_stage {
public:
  sleep_module_stage(const multimodal_costs* costs, bool encoder, std::uint32_t stage)
      : costs_(costs), encoder_(encoder), stage_(stage) {}
  std::size_t input_bytes(const microbatch_view& mb) const {
    if (encoder_) return stage_ == 0 ? 0 : 8 * mb.size();
    if (stage_ == 0) return costs_->encoder.stages > 0 ? 8 * encoded_samples(mb) : 0;
    return 8 * mb.size();
  }
  std::size_t output_bytes(const microbatch_view& mb) const {
    if (encoder_) return stage_ + 1 == costs_->encoder.stages ? 8 * encoded_samples(mb) : 8 * mb.size();
    return stage_ + 1 == costs_->llm.stages ? 0 : 8 * mb.size();
  }
  void forward(stage_context& ctx) { sleep(table(ctx, &module_costs::forward)); }
  void backward(stage_context& ctx) { sleep(table(ctx, &module_costs::backward)); }
  void weight(stage_context& ctx) {
    if (!module().weight.empty()) sleep(table(ctx, &module_costs::weight));
  }
  std::span<double> gradients() { return gradient_; }

private:
  const module_costs& module() const { return encoder_ ? costs_->encoder : costs_->llm; }
  double table(const stage_context& ctx, std::vector<double> module_costs::*which) const {
    return (module().*which)[module().at(ctx.replica, ctx.microbatch, stage_, costs_->microbatches)];
  }
  static void sleep(double seconds) { sleep_precisely(seconds); }
  const multimodal_costs* costs_;
  bool encoder_;
  std::uint32_t stage_;
  std::vector<double> gradient_ = std::vector<double>(1, 0.0);
};

}  // namespace dflop::test
