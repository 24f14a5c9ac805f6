// SPDX-License-Identifier: Apache-2.0
//! \file
//! The same stages run one after another in one thread: for every replica's
//! microbatch in order, the forward through all stages, then the backward back.
//! What a pipeline must reproduce (bitwise with one replica, since every shipped
//! schedule runs each stage's backward ops in microbatch order). The multimodal
//! form runs, per slot, every encoder part, then every LLM microbatch (forward and
//! backward) on the rows the hand-off would deliver, then the encoder backwards.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/detail/stage_dispatch.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/handoff.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/stage.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace dflop {

namespace detail {
//! Plain heap memory for the reference run: stashes kept per (microbatch, stage).
class reference_memory final : public stage_memory {
public:
  std::span<std::byte> stash(std::size_t bytes) override {
    current->emplace_back(std::make_unique<std::byte[]>(bytes));
    sizes->push_back(bytes);
    return {current->back().get(), bytes};
  }
  std::span<std::byte> stashed(std::size_t index) override { return {(*current)[index].get(), (*sizes)[index]}; }
  std::span<std::byte> scratch(std::size_t bytes) override {
    scratch_.emplace_back(std::make_unique<std::byte[]>(bytes));
    return {scratch_.back().get(), bytes};
  }
  void end_op() { scratch_.clear(); }

  std::vector<std::unique_ptr<std::byte[]>>* current = nullptr;
  std::vector<std::size_t>* sizes = nullptr;

private:
  std::vector<std::unique_ptr<std::byte[]>> scratch_;
};

//! One microbatch's pass through consecutive stages (positions `first` ..
//! `first + count - 1` of a pipeline of `positions`): activations, gradients and
//! stashes. Set `activations[0]` (the input) before `forward` and `gradients[count]`
//! (the output's gradient) before `backward`.
class reference_chain {
public:
  //! A chain over `count` stages starting at position `first` of `positions`.
  reference_chain(std::uint32_t first, std::uint32_t count, std::uint32_t positions)
      : activations(count + 1), gradients(count + 1), first_(first), count_(count), positions_(positions),
        stash_(count), stash_sizes_(count) {}

  //! Runs every stage's forward on `mb`; returns the loss when the chain ends the pipeline.
  template <class Slots>
  double forward(Slots& stages, const microbatch_view& mb, std::uint32_t microbatch, std::uint32_t replica,
                 reference_memory& memory) {
    double loss = 0;
    for (std::uint32_t s = 0; s < count_; ++s) {
      auto ctx = context(s, op_kind::forward, mb, microbatch, replica, memory);
      const std::size_t out =
          ctx.last_stage() ? 0 : with_stage(stages[s], [&](auto& stage) -> std::size_t { return stage.output_bytes(mb); });
      activations[s + 1].assign(out, std::byte{0});
      ctx.input = activations[s];
      ctx.output = activations[s + 1];
      with_stage(stages[s], [&](auto& stage) { run_stage_op(stage, ctx, false); });
      memory.end_op();
      if (ctx.last_stage()) loss = ctx.loss;
    }
    return loss;
  }

  //! Runs every stage's backward (and weight pass) in reverse; frees the stashes.
  template <class Slots>
  void backward(Slots& stages, const microbatch_view& mb, std::uint32_t microbatch, std::uint32_t replica,
                reference_memory& memory) {
    for (std::uint32_t s = count_; s-- > 0;) {
      auto ctx = context(s, op_kind::backward, mb, microbatch, replica, memory);
      gradients[s].assign(ctx.first_stage() ? 0 : activations[s].size(), std::byte{0});
      ctx.input = activations[s];
      ctx.output_grad = gradients[s + 1];
      ctx.input_grad = gradients[s];
      with_stage(stages[s], [&](auto& stage) { run_stage_op(stage, ctx, true); });
      memory.end_op();
      stash_[s].clear();
      stash_sizes_[s].clear();
    }
  }

  std::vector<std::vector<std::byte>> activations;  //!< [s]: input of the chain's stage s; [count]: its output
  std::vector<std::vector<std::byte>> gradients;    //!< [s]: gradient of activations[s]

private:
  stage_context context(std::uint32_t s, op_kind kind, const microbatch_view& mb, std::uint32_t microbatch,
                        std::uint32_t replica, reference_memory& memory) {
    stage_context ctx;
    ctx.kind = kind;
    ctx.microbatch = microbatch;
    ctx.stage = first_ + s;
    ctx.stages = positions_;
    ctx.replica = replica;
    ctx.samples = mb;
    ctx.memory = &memory;
    memory.current = &stash_[s];
    memory.sizes = &stash_sizes_[s];
    return ctx;
  }

  std::uint32_t first_;
  std::uint32_t count_;
  std::uint32_t positions_;
  std::vector<std::vector<std::unique_ptr<std::byte[]>>> stash_;
  std::vector<std::vector<std::size_t>> stash_sizes_;
};
}  // namespace detail

//! Runs `stages` (every model stage, in pipeline order: stage objects or variants of
//! them) sequentially over all `replicas x m` microbatches of `batch`, replica by
//! replica and in microbatch order; returns the summed loss. Gradients accumulate in
//! the stages as the executor's would.
template <class StageVector>
double run_sequential(StageVector& stages, const step_batch& batch, std::uint32_t m, std::uint32_t replicas = 1) {
  batch.check(replicas, m);
  const auto count = static_cast<std::uint32_t>(stages.size());
  double loss = 0;
  detail::reference_memory memory;
  detail::reference_chain chain(0, count, count);
  for (std::uint32_t replica = 0; replica < replicas; ++replica)
    for (std::uint32_t j = 0; j < m; ++j) {
      const microbatch_view mb = batch.view(replica, j, m);
      chain.activations[0].clear();
      loss += chain.forward(stages, mb, j, replica, memory);
      chain.gradients[count].clear();
      chain.backward(stages, mb, j, replica, memory);
    }
  return loss;
}

//! The multimodal reference: `encoder` holds the encoder's stages (positions 0 ..
//! E-1), `llm` the LLM's (positions E ..), one object per stage serving every
//! replica. For each schedule microbatch j in order (slot `batch.slot(j)`): every
//! encoder replica's part forward, then every LLM replica's microbatch forward and
//! backward, its input being each of its samples' encoder rows (found by sample,
//! not by the hand-off's ranges), then every encoder replica's backward on the
//! gradients of its rows. Samples are seen in `handoff_routes`'s orders. Replicas
//! come from the list counts (`llm_microbatches.size() / m`, `encoder_parts.size()
//! / m`). Returns the summed loss; gradients accumulate in the stages.
template <class EncoderStages, class LlmStages>
double run_sequential(EncoderStages& encoder, LlmStages& llm, const multimodal_batch& batch, std::uint32_t m) {
  const auto encoder_stages = static_cast<std::uint32_t>(encoder.size());
  const auto llm_stages = static_cast<std::uint32_t>(llm.size());
  if (m == 0 || llm_stages == 0) throw error("run_sequential: needs microbatches and LLM stages");
  const auto encoders = encoder_stages == 0 ? 0U : static_cast<std::uint32_t>(batch.encoder_parts.size() / m);
  const auto llms = static_cast<std::uint32_t>(batch.llm_microbatches.size() / m);
  handoff_routes routes;
  routes.build(batch, m, encoders, llms);
  const std::uint32_t positions = encoder_stages + llm_stages;
  detail::reference_memory memory;
  std::vector<detail::reference_chain> encoder_chains;
  for (std::uint32_t e = 0; e < encoders; ++e) encoder_chains.emplace_back(0, encoder_stages, positions);
  detail::reference_chain llm_chain(encoder_stages, llm_stages, positions);
  // Where each sample's encoder rows are this slot: replica, first byte, bytes.
  struct rows {
    std::uint32_t replica = 0;
    std::size_t offset = 0;
    std::size_t bytes = 0;
    std::uint32_t microbatch = 0xffffffffU;  // the schedule microbatch they were encoded for
  };
  std::vector<rows> where(batch.samples.size());
  std::vector<std::size_t> offsets;
  double loss = 0;
  for (std::uint32_t j = 0; j < m; ++j) {
    const std::uint32_t k = batch.slot(j);
    for (std::uint32_t e = 0; e < encoders; ++e) {
      const auto samples = routes.encoder_samples(e, k);
      auto& chain = encoder_chains[e];
      chain.activations[0].clear();
      chain.forward(encoder, microbatch_view(batch.samples, samples), j, e, memory);
      chain.gradients[encoder_stages].assign(chain.activations[encoder_stages].size(), std::byte{0});
      sample_offsets(batch.samples, samples,
                     [&](const microbatch_view& one) {
                       return detail::with_stage(encoder.back(), [&](auto& s) -> std::size_t { return s.output_bytes(one); });
                     },
                     offsets);
      if (offsets.back() != chain.activations[encoder_stages].size())
        throw error("run_sequential: the encoder's last stage output_bytes is not the sum of its samples'");
      for (std::size_t p = 0; p < samples.size(); ++p)
        where[samples[p]] = {e, offsets[p], offsets[p + 1] - offsets[p], j};
    }
    for (std::uint32_t r = 0; r < llms; ++r) {
      const auto samples = routes.llm_samples(r, k);
      const microbatch_view mb(batch.samples, samples);
      auto& input = llm_chain.activations[0];
      input.clear();
      for (auto i : samples)
        if (where[i].microbatch == j) {
          const auto& out = encoder_chains[where[i].replica].activations[encoder_stages];
          const auto first = out.begin() + static_cast<std::ptrdiff_t>(where[i].offset);
          input.insert(input.end(), first, first + static_cast<std::ptrdiff_t>(where[i].bytes));
        }
      const std::size_t expected =
          detail::with_stage(llm.front(), [&](auto& s) -> std::size_t { return s.input_bytes(mb); });
      if (encoders > 0 && expected != input.size())
        throw error("run_sequential: the LLM's first stage expects " + std::to_string(expected) +
                    " input bytes, the encoder rows of its samples are " + std::to_string(input.size()));
      loss += llm_chain.forward(llm, mb, j, r, memory);
      llm_chain.gradients[llm_stages].clear();
      llm_chain.backward(llm, mb, j, r, memory);
      auto from = llm_chain.gradients[0].begin();
      for (auto i : samples)
        if (where[i].microbatch == j) {
          auto& grad = encoder_chains[where[i].replica].gradients[encoder_stages];
          std::copy_n(from, where[i].bytes, grad.begin() + static_cast<std::ptrdiff_t>(where[i].offset));
          from += static_cast<std::ptrdiff_t>(where[i].bytes);
        }
    }
    for (std::uint32_t e = 0; e < encoders; ++e)
      encoder_chains[e].backward(encoder, microbatch_view(batch.samples, routes.encoder_samples(e, k)), j, e, memory);
  }
  return loss;
}

}  // namespace dflop
