// SPDX-License-Identifier: Apache-2.0
//! \file
//! The same stages run one after another in one thread: for every replica's
//! microbatch in order, the forward through all stages, then the backward back.
//! What a pipeline must reproduce (bitwise with one replica, since every shipped
//! schedule runs each stage's backward ops in microbatch order).
#pragma once

#include <dflop/exec/detail/stage_dispatch.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/stage.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
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
  std::vector<std::vector<std::unique_ptr<std::byte[]>>> stash(count);
  std::vector<std::vector<std::size_t>> stash_sizes(count);
  std::vector<std::vector<std::byte>> activations(count + 1);  // activations[s]: input of stage s
  std::vector<std::vector<std::byte>> gradients(count + 1);    // gradients[s]: gradient of activations[s]
  for (std::uint32_t replica = 0; replica < replicas; ++replica)
    for (std::uint32_t j = 0; j < m; ++j) {
      const microbatch_view mb = batch.view(replica, j, m);
      const auto context = [&](std::uint32_t s, op_kind kind) {
        stage_context ctx;
        ctx.kind = kind;
        ctx.microbatch = j;
        ctx.stage = s;
        ctx.stages = count;
        ctx.replica = replica;
        ctx.samples = mb;
        ctx.memory = &memory;
        memory.current = &stash[s];
        memory.sizes = &stash_sizes[s];
        return ctx;
      };
      for (std::uint32_t s = 0; s < count; ++s) {
        auto ctx = context(s, op_kind::forward);
        const std::size_t out = s + 1 < count
                                    ? detail::with_stage(stages[s], [&](auto& stage) { return stage.output_bytes(mb); })
                                    : 0;
        activations[s + 1].assign(out, std::byte{0});
        ctx.input = activations[s];
        ctx.output = activations[s + 1];
        detail::with_stage(stages[s], [&](auto& stage) { detail::run_stage_op(stage, ctx, false); });
        memory.end_op();
        if (s + 1 == count) loss += ctx.loss;
      }
      gradients[count].clear();
      for (std::uint32_t s = count; s-- > 0;) {
        auto ctx = context(s, op_kind::backward);
        gradients[s].assign(s > 0 ? activations[s].size() : 0, std::byte{0});
        ctx.input = activations[s];
        ctx.output_grad = gradients[s + 1];
        ctx.input_grad = gradients[s];
        detail::with_stage(stages[s], [&](auto& stage) { detail::run_stage_op(stage, ctx, true); });
        memory.end_op();
        stash[s].clear();
        stash_sizes[s].clear();
      }
      activations[0].clear();
    }
  return loss;
}

}  // namespace dflop
