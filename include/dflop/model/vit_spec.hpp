// SPDX-License-Identifier: Apache-2.0
//! \file
//! Shape of a ViT modality encoder: what its FLOPs, parameters and activations
//! follow from.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace dflop {

//! A ViT encoder (pre-norm, LayerNorm, plain GELU MLP). Every encoder item (tile,
//! frame) is `image_size` square pixels cut into `patch_size` square patches.
struct vit_spec {
  std::string name;             //!< preset or file name, e.g. "siglip-400m"
  std::int64_t layers = 0;      //!< transformer layers
  std::int64_t hidden = 0;      //!< hidden size h
  std::int64_t ffn = 0;         //!< MLP inner size f
  std::int64_t heads = 0;       //!< attention (query) heads
  std::int64_t kv_heads = 0;    //!< key/value heads (= heads for every shipped ViT)
  std::int64_t image_size = 0;  //!< pixels per side of one item
  std::int64_t patch_size = 0;  //!< pixels per side of one patch

  //! Tokens one item produces: (image_size / patch_size)^2, e.g. 27^2 = 729 for SigLIP at 384 px.
  [[nodiscard]] constexpr std::int64_t tokens_per_item() const noexcept {
    const std::int64_t side = patch_size > 0 ? image_size / patch_size : 0;
    return side * side;
  }

  //! Weights of one layer: QKV + output projections h^2 (2 + 2 g/a) plus MLP 2 h f.
  //! Biases and norm vectors (< 0.1% of the total) are not counted.
  [[nodiscard]] constexpr std::int64_t layer_parameters() const noexcept {
    return 2 * hidden * hidden + 2 * hidden * (hidden / heads) * kv_heads + 2 * hidden * ffn;
  }

  //! Weights of the patch embedding (3 p^2 h) and position embedding (one per token, h each).
  [[nodiscard]] constexpr std::int64_t embedding_parameters() const noexcept {
    return 3 * patch_size * patch_size * hidden + tokens_per_item() * hidden;
  }

  friend bool operator==(const vit_spec&, const vit_spec&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const vit_spec& spec) {
  return out << "vit_spec{name=" << spec.name << ", layers=" << spec.layers << ", hidden=" << spec.hidden
             << ", ffn=" << spec.ffn << ", heads=" << spec.heads << ", kv_heads=" << spec.kv_heads
             << ", image_size=" << spec.image_size << ", patch_size=" << spec.patch_size << "}";
}

}  // namespace dflop
