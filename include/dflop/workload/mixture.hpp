// SPDX-License-Identifier: Apache-2.0
//! \file
//! Synthetic workloads modelled on public facts about LLaVA-OneVision-style
//! training data (docs REFERENCE.md section 1), for planning and benchmarks
//! when no real trace is at hand. A `mixture_spec` gives each modality a weight
//! and each size a distribution; `generate_mixture` draws samples from it,
//! deterministically for a seed.
//!
//! The exact formulas, with T = `tokens_per_tile` (729 = 27^2 for SigLIP at
//! 384 px and 14 px patches) and P a draw of `prompt_tokens`:
//! - text:        items 0, encoder tokens 0, LLM tokens = a draw of `text_only_tokens`.
//! - image (AnyRes): with probability `untiled_image_share` the image is not tiled:
//!   items 1, encoder tokens T, LLM tokens T + 1 + P. Otherwise a grid of
//!   r x c tiles, r and c uniform in [1, `max_grid_side`]: items 1 + r c (base
//!   thumbnail + grid), encoder tokens (1 + r c) T, LLM tokens
//!   (T + 1) [base + newline] + min(r c, `grid_tile_cap`) T [grid, downsampled
//!   beyond the cap] + r [one newline per grid row] + P.
//! - multi_image: n images, n uniform in [`min_images`, `max_images`], one tile
//!   each: items n, encoder tokens n T, LLM tokens n (T + 1) + P.
//! - video: f frames, f uniform in [`min_frames`, `max_frames`]: items f,
//!   encoder tokens f T, LLM tokens f `video_llm_tokens_per_frame` (210 =
//!   14^2 pooled + 14 newlines) + P.
//! - audio: k chunks, k uniform in [`min_audio_chunks`, `max_audio_chunks`]:
//!   items k, encoder tokens k `audio_encoder_tokens_per_chunk`, LLM tokens
//!   k `audio_llm_tokens_per_chunk` + P (defaults: a Whisper-style 30 s chunk,
//!   1500 encoder frames pooled 2x to 750).
//! Text lengths are log-normal with the given median and sigma (of the log),
//! rounded and then clamped to [min, max]; only generated values are clamped.
#pragma once

#include <dflop/error.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dflop {

//! A clamped log-normal distribution of text lengths in tokens: real text
//! lengths are right-skewed with a long tail.
struct text_length_distribution {
  double median = 256;        //!< exp(mu): half the draws are shorter
  double sigma = 1.0;         //!< standard deviation of the log length
  std::int64_t min = 1;       //!< draws below are raised to this
  std::int64_t max = 8192;    //!< draws above are lowered to this

  //! One length: round(median * exp(sigma * z)) for a standard normal z, clamped to [min, max].
  [[nodiscard]] std::int64_t draw(random_generator& random) const {
    const double value = std::round(median * std::exp(sigma * random.normal()));
    if (!(value < static_cast<double>(max))) return max;  // also catches overflow to infinity
    return std::clamp(static_cast<std::int64_t>(value), min, max);
  }
};

//! Relative weight of each modality; they need not sum to 1, only be non-negative with a positive total.
struct modality_weights {
  double text = 0;         //!< text-only samples
  double image = 0;        //!< single images (AnyRes)
  double multi_image = 0;  //!< several images, one tile each
  double video = 0;        //!< videos
  double audio = 0;        //!< audio clips

  //! The weight of `kind`.
  [[nodiscard]] constexpr double of(modality kind) const noexcept {
    switch (kind) {
      case modality::text: return text;
      case modality::image: return image;
      case modality::multi_image: return multi_image;
      case modality::video: return video;
      case modality::audio: return audio;
    }
    return 0;
  }
  //! Sum of all weights.
  [[nodiscard]] constexpr double total() const noexcept { return text + image + multi_image + video + audio; }
};

//! Everything that defines a synthetic mixture; defaults follow REFERENCE.md section 1.
struct mixture_spec {
  std::string name = "custom";                   //!< used in messages
  modality_weights weights{.text = 1};           //!< share of each modality
  text_length_distribution text_only_tokens{.median = 400, .sigma = 0.9, .min = 16, .max = 8192};  //!< text samples
  text_length_distribution prompt_tokens{.median = 120, .sigma = 1.0, .min = 8, .max = 4096};  //!< text of others
  std::int64_t tokens_per_tile = 729;            //!< encoder tokens of one tile, image or frame
  double untiled_image_share = 0.1;              //!< single images seen at base resolution only
  std::int64_t max_grid_side = 6;                //!< AnyRes grid rows and columns are in [1, this]
  std::int64_t grid_tile_cap = 9;                //!< grid LLM tokens are capped at this many tiles' worth
  std::int64_t min_images = 2;                   //!< fewest images of a multi-image sample
  std::int64_t max_images = 8;                   //!< most images of a multi-image sample
  std::int64_t min_frames = 8;                   //!< fewest video frames
  std::int64_t max_frames = 32;                  //!< most video frames
  std::int64_t video_llm_tokens_per_frame = 210; //!< LLM tokens of one pooled frame
  std::int64_t min_audio_chunks = 1;             //!< fewest audio chunks
  std::int64_t max_audio_chunks = 4;             //!< most audio chunks
  std::int64_t audio_encoder_tokens_per_chunk = 1500;  //!< encoder tokens of one audio chunk
  std::int64_t audio_llm_tokens_per_chunk = 750;       //!< LLM tokens of one audio chunk
};

//! Largest count or per-unit token number a spec may hold: keeps every product far from overflow.
inline constexpr std::int64_t mixture_spec_limit = 1'000'000;

//! Why `spec` cannot generate samples, or nullopt when it can.
[[nodiscard]] inline std::optional<std::string> find_spec_problem(const mixture_spec& spec) {
  for (modality kind : all_modalities) {
    const double weight = spec.weights.of(kind);
    if (!std::isfinite(weight) || weight < 0)
      return "weight of " + std::string(to_string(kind)) + " must be a finite non-negative number, got " +
             std::to_string(weight);
  }
  if (!(spec.weights.total() > 0)) return std::string("the modality weights sum to 0");
  const auto check_length = [](const text_length_distribution& lengths, const char* name,
                               std::int64_t lowest) -> std::optional<std::string> {
    if (!std::isfinite(lengths.median) || lengths.median <= 0)
      return std::string(name) + ".median must be positive, got " + std::to_string(lengths.median);
    if (!std::isfinite(lengths.sigma) || lengths.sigma < 0)
      return std::string(name) + ".sigma must be non-negative, got " + std::to_string(lengths.sigma);
    if (lengths.min < lowest || lengths.min > lengths.max || lengths.max > mixture_spec_limit)
      return std::string(name) + " needs " + std::to_string(lowest) + " <= min <= max <= " +
             std::to_string(mixture_spec_limit) + ", got [" + std::to_string(lengths.min) + ", " +
             std::to_string(lengths.max) + "]";
    return std::nullopt;
  };
  if (auto problem = check_length(spec.text_only_tokens, "text_only_tokens", 1)) return problem;
  if (auto problem = check_length(spec.prompt_tokens, "prompt_tokens", 0)) return problem;
  if (!(spec.untiled_image_share >= 0 && spec.untiled_image_share <= 1))
    return "untiled_image_share must be in [0, 1], got " + std::to_string(spec.untiled_image_share);
  const auto check_count = [](std::int64_t value, const char* name) -> std::optional<std::string> {
    if (value < 1 || value > mixture_spec_limit)
      return std::string(name) + " must be in [1, " + std::to_string(mixture_spec_limit) + "], got " +
             std::to_string(value);
    return std::nullopt;
  };
  const auto check_range = [&](std::int64_t low, std::int64_t high, const char* low_name,
                               const char* high_name) -> std::optional<std::string> {
    if (auto problem = check_count(low, low_name)) return problem;
    if (auto problem = check_count(high, high_name)) return problem;
    if (low > high)
      return std::string(low_name) + " (" + std::to_string(low) + ") exceeds " + high_name + " (" +
             std::to_string(high) + ")";
    return std::nullopt;
  };
  for (auto problem : {check_count(spec.tokens_per_tile, "tokens_per_tile"),
                       check_count(spec.max_grid_side, "max_grid_side"),
                       check_count(spec.grid_tile_cap, "grid_tile_cap"),
                       check_range(spec.min_images, spec.max_images, "min_images", "max_images"),
                       check_range(spec.min_frames, spec.max_frames, "min_frames", "max_frames"),
                       check_count(spec.video_llm_tokens_per_frame, "video_llm_tokens_per_frame"),
                       check_range(spec.min_audio_chunks, spec.max_audio_chunks, "min_audio_chunks",
                                   "max_audio_chunks"),
                       check_count(spec.audio_encoder_tokens_per_chunk, "audio_encoder_tokens_per_chunk"),
                       check_count(spec.audio_llm_tokens_per_chunk, "audio_llm_tokens_per_chunk")})
    if (problem) return problem;
  return std::nullopt;
}

//! Throws `input_error(spec.name, 0, reason)` when `spec` cannot generate samples.
inline void validate_mixture(const mixture_spec& spec) {
  if (auto problem = find_spec_problem(spec)) throw input_error("mixture '" + spec.name + "'", 0, *problem);
}

//! Names of the built-in mixtures, in the order `dflop generate --help` lists them.
inline constexpr std::array<std::string_view, 5> mixture_preset_names{"onevision", "video-heavy", "text-heavy",
                                                                      "image-only", "omni"};

//! The built-in mixture used when none is named (by `dflop stats` and the planner demo).
inline constexpr std::string_view default_mixture_name = "onevision";
//! Samples in the built-in default workload.
inline constexpr std::size_t default_workload_samples = 10000;
//! Seed of the built-in default workload.
inline constexpr std::uint64_t default_workload_seed = 0;

//! The built-in mixture `name`:
//! - `onevision`: LLaVA-OneVision-like; 60% AnyRes images, 15% multi-image, 15% video, 10% text.
//! - `video-heavy`: 65% video of 16-32 frames, 20% images, 5% multi-image, 10% text.
//! - `text-heavy`: 70% longer text-only samples, 20% images, 5% multi-image, 5% video.
//! - `image-only`: every sample a single AnyRes image (a single-image training stage).
//! - `omni`: adds audio: 35% images, 10% multi-image, 15% video, 20% audio, 20% text.
//! Throws `input_error` listing the known names for any other name.
[[nodiscard]] inline mixture_spec mixture_preset(std::string_view name) {
  mixture_spec spec;
  spec.name = std::string(name);
  if (name == "onevision") {
    spec.weights = {.text = 0.10, .image = 0.60, .multi_image = 0.15, .video = 0.15, .audio = 0};
  } else if (name == "video-heavy") {
    spec.weights = {.text = 0.10, .image = 0.20, .multi_image = 0.05, .video = 0.65, .audio = 0};
    spec.min_frames = 16;
  } else if (name == "text-heavy") {
    spec.weights = {.text = 0.70, .image = 0.20, .multi_image = 0.05, .video = 0.05, .audio = 0};
    spec.text_only_tokens = {.median = 800, .sigma = 1.0, .min = 16, .max = 16384};
  } else if (name == "image-only") {
    spec.weights = {.text = 0, .image = 1, .multi_image = 0, .video = 0, .audio = 0};
  } else if (name == "omni") {
    spec.weights = {.text = 0.20, .image = 0.35, .multi_image = 0.10, .video = 0.15, .audio = 0.20};
  } else {
    std::string reason = "unknown mixture '";
    reason.append(name).append("' (known:");
    for (std::string_view known : mixture_preset_names) reason.append(" ").append(known);
    reason.append(")");
    throw input_error("mixture", 0, reason);
  }
  return spec;
}

//! Draws one sample of modality `kind` from `spec` (formulas in the file comment).
//! `spec` must be valid (see `validate_mixture`).
[[nodiscard]] inline sample draw_sample(const mixture_spec& spec, modality kind, std::string id,
                                        random_generator& random) {
  sample s;
  s.id = std::move(id);
  s.kind = kind;
  const std::int64_t tile = spec.tokens_per_tile;
  switch (kind) {
    case modality::text:
      s.llm_tokens = spec.text_only_tokens.draw(random);
      return s;
    case modality::image:
      if (random.uniform() < spec.untiled_image_share) {
        s.encoder_items = 1;
        s.llm_tokens = tile + 1;
      } else {
        const std::int64_t rows = random.between(1, spec.max_grid_side);
        const std::int64_t columns = random.between(1, spec.max_grid_side);
        s.encoder_items = 1 + rows * columns;
        s.llm_tokens = (tile + 1) + std::min(rows * columns, spec.grid_tile_cap) * tile + rows;
      }
      s.encoder_tokens = s.encoder_items * tile;
      break;
    case modality::multi_image:
      s.encoder_items = random.between(spec.min_images, spec.max_images);
      s.encoder_tokens = s.encoder_items * tile;
      s.llm_tokens = s.encoder_items * (tile + 1);
      break;
    case modality::video:
      s.encoder_items = random.between(spec.min_frames, spec.max_frames);
      s.encoder_tokens = s.encoder_items * tile;
      s.llm_tokens = s.encoder_items * spec.video_llm_tokens_per_frame;
      break;
    case modality::audio:
      s.encoder_items = random.between(spec.min_audio_chunks, spec.max_audio_chunks);
      s.encoder_tokens = s.encoder_items * spec.audio_encoder_tokens_per_chunk;
      s.llm_tokens = s.encoder_items * spec.audio_llm_tokens_per_chunk;
      break;
  }
  s.llm_tokens += spec.prompt_tokens.draw(random);
  return s;
}

namespace detail {

//! The modality whose cumulative weight interval holds a uniform draw.
inline modality pick_modality(const modality_weights& weights, random_generator& random) {
  const double target = random.uniform() * weights.total();
  double cumulative = 0;
  std::optional<modality> last_positive;
  for (modality kind : all_modalities) {
    const double weight = weights.of(kind);
    if (weight <= 0) continue;
    cumulative += weight;
    last_positive = kind;
    if (target < cumulative) return kind;
  }
  return *last_positive;  // rounding left target at the very top: the last positive weight owns it
}

//! "s" followed by `index` zero-padded to `width` digits.
inline std::string sample_id(std::size_t index, std::size_t width) {
  std::string digits = std::to_string(index);
  std::string id = "s";
  if (digits.size() < width) id.append(width - digits.size(), '0');
  id.append(digits);
  return id;
}

}  // namespace detail

//! `count` samples drawn from `spec` with `seed`, ids "s000000", "s000001", ...
//! (at least six digits, more when `count` needs them). The same spec, count and
//! seed always give the same samples. Throws `input_error` for an invalid spec.
[[nodiscard]] inline std::vector<sample> generate_mixture(const mixture_spec& spec, std::size_t count,
                                                          std::uint64_t seed) {
  validate_mixture(spec);
  random_generator random(seed);
  const std::size_t width = std::max<std::size_t>(6, std::to_string(count == 0 ? 0 : count - 1).size());
  std::vector<sample> samples;
  samples.reserve(count);
  for (std::size_t index = 0; index < count; ++index) {
    const modality kind = detail::pick_modality(spec.weights, random);
    samples.push_back(draw_sample(spec, kind, detail::sample_id(index, width), random));
  }
  return samples;
}

//! `generate_mixture` of the built-in mixture `preset_name`; throws `input_error` for an unknown name.
[[nodiscard]] inline std::vector<sample> generate_mixture(std::string_view preset_name, std::size_t count,
                                                          std::uint64_t seed) {
  return generate_mixture(mixture_preset(preset_name), count, seed);
}

//! The built-in default workload: `default_workload_samples` samples of
//! `default_mixture_name` with `default_workload_seed`.
[[nodiscard]] inline std::vector<sample> default_workload() {
  return generate_mixture(default_mixture_name, default_workload_samples, default_workload_seed);
}

}  // namespace dflop
