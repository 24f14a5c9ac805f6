// SPDX-License-Identifier: Apache-2.0
//! \file
//! The torch trainer's model as dflop sees it (plain C++, no torch headers): its
//! sizes, the `multimodal_spec` the planner and memory model read, and the
//! samples it trains on, drawn from a dflop mixture and scaled down to what two
//! CPU cores can train in seconds.
//!
//! The model: a ViT encoder (patch embedding, `encoder_layers` pre-norm blocks,
//! bidirectional attention within each item) and a projector that pools every
//! `pool` patch tokens into one LLM token; a decoder-only LM (`llm_layers`
//! pre-norm blocks, causal attention within each sample of the packed sequence).
//! A sample with `encoder_items` items has `items x patches_per_item` encoder
//! tokens and `items x llm_tokens_per_item()` image tokens at the start of its
//! LLM sequence; the rest of its `llm_tokens` are text.
#pragma once

#include <dflop/error.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dflop::torch_trainer {

//! Sizes of the model and how it learns. Layer l of a module has the same
//! initial weights on whatever stage holds it (seeded by `seed` and its name),
//! so a run's losses do not depend on the plan.
struct model_options {
  int patch_values = 12;       //!< values per patch (3 channels x 2 x 2 pixels)
  int patches_per_item = 64;   //!< encoder tokens per item (a 16 x 16 image in 2 x 2 patches)
  int pool = 4;                //!< patch tokens averaged into one LLM token by the projector
  int encoder_hidden = 64;     //!< encoder width
  int encoder_layers = 3;      //!< encoder blocks
  int encoder_heads = 4;       //!< encoder attention heads
  int encoder_ffn = 128;       //!< encoder MLP width
  int llm_hidden = 128;        //!< LM width
  int llm_layers = 2;          //!< LM blocks
  int llm_heads = 4;           //!< LM attention heads
  int llm_ffn = 256;           //!< LM MLP width
  int vocab = 64;              //!< LM vocabulary
  int classes = 16;            //!< image classes (the first text tokens name the items' classes)
  int max_positions = 2048;    //!< longest LLM sequence (learned positions)
  bool float64 = false;        //!< double precision (the exact comparison mode)
  std::uint64_t seed = 1;      //!< weights and sample contents
  double learning_rate = 3e-3; //!< Adam step size

  //! LLM tokens one item becomes.
  [[nodiscard]] int llm_tokens_per_item() const noexcept { return pool > 0 ? patches_per_item / pool : 0; }
  //! Bytes of one activation value.
  [[nodiscard]] std::size_t element_bytes() const noexcept { return float64 ? 8 : 4; }
};

//! Throws `input_error` naming the option when the sizes cannot make a model.
inline void validate(const model_options& o) {
  auto positive = [](const char* name, long long value) {
    if (value <= 0) throw input_error(name, 0, "must be positive, got " + std::to_string(value));
  };
  positive("--patch-values", o.patch_values);
  positive("--patches-per-item", o.patches_per_item);
  positive("--pool", o.pool);
  positive("--encoder-hidden", o.encoder_hidden);
  positive("--encoder-layers", o.encoder_layers);
  positive("--encoder-heads", o.encoder_heads);
  positive("--encoder-ffn", o.encoder_ffn);
  positive("--llm-hidden", o.llm_hidden);
  positive("--llm-layers", o.llm_layers);
  positive("--llm-heads", o.llm_heads);
  positive("--llm-ffn", o.llm_ffn);
  positive("--vocab", o.vocab);
  positive("--classes", o.classes);
  positive("--max-positions", o.max_positions);
  if (o.patches_per_item % o.pool != 0)
    throw input_error("--pool", 0, std::to_string(o.pool) + " does not divide the patches per item (" +
                                       std::to_string(o.patches_per_item) + ")");
  if (o.encoder_hidden % o.encoder_heads != 0)
    throw input_error("--encoder-heads", 0, "does not divide --encoder-hidden");
  if (o.llm_hidden % o.llm_heads != 0) throw input_error("--llm-heads", 0, "does not divide --llm-hidden");
  if (o.classes > o.vocab) throw input_error("--classes", 0, "more classes than vocabulary tokens");
  if (!(o.learning_rate >= 0)) throw input_error("--learning-rate", 0, "must be >= 0");
}

//! The model's shapes for the planner: layer counts and widths (the memory model
//! and the layer partitioner read them; times come from the profile).
[[nodiscard]] inline multimodal_spec spec_of(const model_options& o) {
  int side = 1;  // image side in patches: patches_per_item = side^2 when square
  while ((side + 1) * (side + 1) <= o.patches_per_item) ++side;
  vit_spec encoder{"torch-vit", o.encoder_layers, o.encoder_hidden, o.encoder_ffn, o.encoder_heads,
                   o.encoder_heads, side * 2, 2};
  llm_spec llm{"torch-lm", o.llm_layers, o.llm_hidden, o.llm_ffn, o.llm_heads, o.llm_heads, o.vocab, false};
  return combine(std::move(encoder), std::move(llm), "torch-vit+torch-lm");
}

//! Why `s` does not fit the model (sizes as the model derives them), or an empty string.
[[nodiscard]] inline std::string sample_mismatch(const sample& s, const model_options& o) {
  if (auto why = find_inconsistency(s)) return *why;
  if (s.encoder_tokens != s.encoder_items * o.patches_per_item)
    return "encoder_tokens " + std::to_string(s.encoder_tokens) + " is not encoder_items x " +
           std::to_string(o.patches_per_item) + " (the model's patches per item)";
  const std::int64_t text = s.llm_tokens - s.encoder_items * o.llm_tokens_per_item();
  if (text < 2)
    return "llm_tokens " + std::to_string(s.llm_tokens) + " leaves " + std::to_string(text) +
           " text tokens after the image tokens; the model needs at least 2";
  if (s.llm_tokens > o.max_positions)
    return "llm_tokens " + std::to_string(s.llm_tokens) + " exceeds --max-positions " + std::to_string(o.max_positions);
  return {};
}

//! `count` samples of the dflop mixture `mixture` (seed `seed`), scaled down: half
//! the items (rounded up), `patches_per_item` encoder tokens per item, and an LLM
//! sequence of the items' image tokens plus 1/64 of the mixture's LLM tokens as
//! text (2 to 128). Text-only samples stay text-only. Keeps the mixture's spread:
//! a 37-tile image costs about 19 times a single tile in the encoder.
[[nodiscard]] inline std::vector<sample> scaled_mixture(std::string_view mixture, std::size_t count,
                                                        std::uint64_t seed, const model_options& o) {
  std::vector<sample> out = generate_mixture(mixture, count, seed);
  for (sample& s : out) {
    const std::int64_t items = (s.encoder_items + 1) / 2;
    const std::int64_t text = std::clamp<std::int64_t>(s.llm_tokens / 64, 2, 128);
    s.encoder_items = items;
    s.encoder_tokens = items * o.patches_per_item;
    s.llm_tokens = items * o.llm_tokens_per_item() + text;
  }
  return out;
}

}  // namespace dflop::torch_trainer
