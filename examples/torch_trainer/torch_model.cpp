// SPDX-License-Identifier: Apache-2.0
// The torch trainer's model in libtorch (ATen + autograd), the only translation
// unit that includes torch: the stage (torch_stage.hpp), the single-process
// reference and the profiling targets. See model_options.hpp for the model.
#include "torch_stage.hpp"

#include "cpu_clock.hpp"

#include <dflop/error.hpp>
#include <dflop/exec/gradient_buckets.hpp>
#include <dflop/util/random.hpp>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <malloc.h>
#include <map>
#include <string>
#include <utility>

namespace dflop::torch_trainer {

namespace {

using at::Tensor;

// ------------------------------------------------------------ sample contents

// A stable 64-bit key of a string (FNV-1a), mixed with the model's seed.
std::uint64_t key_of(std::string_view text, std::uint64_t seed) {
  std::uint64_t h = 1469598103934665603ull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// What a sample holds, derived from its id: each item's class and the text tokens.
// The first text tokens name the items' classes (so the LM must read the image
// tokens to predict them), the rest follow t -> 5 t + 3 mod vocab.
struct sample_content {
  std::vector<std::int64_t> classes;  // per item
  std::vector<std::int64_t> text;     // text tokens
};

std::int64_t image_tokens(const sample& s, const model_options& o) { return s.encoder_items * o.llm_tokens_per_item(); }
std::int64_t text_tokens(const sample& s, const model_options& o) { return s.llm_tokens - image_tokens(s, o); }

sample_content content_of(const sample& s, const model_options& o) {
  if (auto why = sample_mismatch(s, o); !why.empty()) throw input_error("sample " + s.id, 0, why);
  random_generator random(key_of(s.id, o.seed));
  sample_content c;
  for (std::int64_t i = 0; i < s.encoder_items; ++i)
    c.classes.push_back(static_cast<std::int64_t>(random() % static_cast<std::uint64_t>(o.classes)));
  const std::int64_t text = text_tokens(s, o);
  for (std::int64_t j = 0; j < text; ++j) {
    std::int64_t token = 0;
    if (j < static_cast<std::int64_t>(c.classes.size())) token = c.classes[static_cast<std::size_t>(j)];
    else if (j == 0) token = static_cast<std::int64_t>(random() % static_cast<std::uint64_t>(o.vocab));
    else token = (5 * c.text.back() + 3) % o.vocab;
    c.text.push_back(token);
  }
  return c;
}

// Tokens the loss predicts in `s`: every text token, but a text-only sample's first.
std::int64_t targets_of(const sample& s, const model_options& o) {
  return text_tokens(s, o) - (s.encoder_items > 0 ? 0 : 1);
}

// ------------------------------------------------------------ parameters

// One flat parameter buffer with its gradient and Adam moments; every parameter
// is a view into it, and its .grad a view into the flat gradient (autograd adds
// into it in place), so the data-parallel sum and the optimizer see one array.
class parameter_store {
public:
  enum class init : std::uint8_t { normal, ones, zeros };

  // Declares a parameter; `scale` is the normal's standard deviation.
  std::size_t declare(std::string name, std::vector<std::int64_t> shape, init kind, double scale = 0) {
    specs_.push_back({std::move(name), std::move(shape), kind, scale});
    return specs_.size() - 1;
  }

  // Allocates and initializes every declared parameter, each from its own seed.
  void allocate(at::ScalarType dtype, std::uint64_t seed) {
    std::int64_t total = 0;
    for (const auto& s : specs_) total += numel(s.shape);
    std::vector<double> values;
    values.reserve(static_cast<std::size_t>(total));
    for (const auto& s : specs_) {
      random_generator random(key_of(s.name, seed));
      for (std::int64_t i = 0; i < numel(s.shape); ++i)
        values.push_back(s.kind == init::ones ? 1.0 : s.kind == init::zeros ? 0.0 : s.scale * random.normal());
    }
    const auto options = at::TensorOptions().dtype(dtype);
    // A copy (from_blob aliases `values`, which dies here; `to` alone would not copy doubles).
    flat_ = at::from_blob(values.data(), {total}, at::TensorOptions().dtype(at::kDouble)).to(options, false, true);
    grad_ = at::zeros({total}, options);
    first_moment_ = at::zeros({total}, options);
    second_moment_ = at::zeros({total}, options);
    std::int64_t offset = 0;
    for (const auto& s : specs_) {
      const std::int64_t n = numel(s.shape);
      Tensor p = flat_.narrow(0, offset, n).view(s.shape).detach().requires_grad_(true);
      p.mutable_grad() = grad_.narrow(0, offset, n).view(s.shape);
      tensors_.push_back(p);
      offsets_.push_back(offset);
      offset += n;
    }
    offsets_.push_back(offset);
  }

  // Parameters declared so far (the index the next one gets).
  [[nodiscard]] std::size_t declared() const noexcept { return specs_.size(); }
  // Where parameter `i` starts in the flat buffers (`declared()`: their end); after `allocate`.
  [[nodiscard]] std::int64_t offset_of(std::size_t i) const { return offsets_.at(i); }

  [[nodiscard]] const Tensor& operator[](std::size_t i) const { return tensors_.at(i); }
  [[nodiscard]] std::size_t count() const noexcept { return static_cast<std::size_t>(flat_.defined() ? flat_.numel() : 0); }

  [[nodiscard]] gradient_buffer gradients() {
    if (!grad_.defined() || grad_.numel() == 0) return {};
    const bool single = grad_.scalar_type() == at::kFloat;
    return {grad_.data_ptr(), static_cast<std::size_t>(grad_.numel()),
            single ? element_type::float32 : element_type::float64};
  }

  // Autograd must have added into the flat gradient, not replaced a parameter's .grad.
  void check_gradients() const {
    for (std::size_t i = 0; i < tensors_.size(); ++i)
      if (!tensors_[i].grad().defined() || !tensors_[i].grad().is_alias_of(grad_))
        throw error("torch_stage: the gradient of '" + specs_[i].name +
                    "' no longer lives in the flat gradient buffer (autograd replaced it)");
  }

  // The flat parameter values, as the distributed optimizer's gather sees them.
  [[nodiscard]] gradient_buffer values() {
    if (!flat_.defined() || flat_.numel() == 0) return {};
    const bool single = flat_.scalar_type() == at::kFloat;
    return {flat_.data_ptr(), static_cast<std::size_t>(flat_.numel()),
            single ? element_type::float32 : element_type::float64};
  }

  // Adam (beta 0.9, 0.999, eps 1e-8) on the elements [begin, end) of each of
  // `ranges` of the flat buffers (the distributed optimizer's shard; all of
  // them without one), then zeroes the whole gradient.
  void adam_step(double rate, std::span<const std::pair<std::int64_t, std::int64_t>> ranges) {
    if (!flat_.defined()) return;
    at::NoGradGuard no_grad;
    ++steps_;
    constexpr double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    const double correction1 = 1 - std::pow(beta1, steps_);
    const double correction2 = 1 - std::pow(beta2, steps_);
    for (const auto& [begin, end] : ranges) {
      if (end <= begin) continue;
      const auto part = [&](const Tensor& t) { return t.narrow(0, begin, end - begin); };
      Tensor gradient = part(grad_), first = part(first_moment_), second = part(second_moment_), values = part(flat_);
      first.mul_(beta1).add_(gradient, 1 - beta1);
      second.mul_(beta2).addcmul_(gradient, gradient, 1 - beta2);
      Tensor denominator = (second / correction2).sqrt_().add_(eps);
      values.addcdiv_(first, denominator, -rate / correction1);
    }
    grad_.zero_();
  }

private:
  struct spec {
    std::string name;
    std::vector<std::int64_t> shape;
    init kind;
    double scale;
  };
  static std::int64_t numel(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }

  std::vector<spec> specs_;
  std::vector<Tensor> tensors_;
  std::vector<std::int64_t> offsets_;  // per parameter, then the end
  Tensor flat_, grad_, first_moment_, second_moment_;
  int steps_ = 0;
};

// One pre-norm transformer block's parameters (indices into the store).
struct block_parameters {
  std::size_t norm1_w, norm1_b, qkv_w, qkv_b, out_w, out_b, norm2_w, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b;
};

block_parameters declare_block(parameter_store& store, const std::string& prefix, std::int64_t hidden,
                               std::int64_t ffn, std::int64_t layers) {
  using init = parameter_store::init;
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(hidden));
  const double out_scale = in_scale / std::sqrt(2.0 * static_cast<double>(layers));
  block_parameters b{};
  b.norm1_w = store.declare(prefix + ".norm1.w", {hidden}, init::ones);
  b.norm1_b = store.declare(prefix + ".norm1.b", {hidden}, init::zeros);
  b.qkv_w = store.declare(prefix + ".qkv.w", {hidden, 3 * hidden}, init::normal, in_scale);
  b.qkv_b = store.declare(prefix + ".qkv.b", {3 * hidden}, init::zeros);
  b.out_w = store.declare(prefix + ".out.w", {hidden, hidden}, init::normal, out_scale);
  b.out_b = store.declare(prefix + ".out.b", {hidden}, init::zeros);
  b.norm2_w = store.declare(prefix + ".norm2.w", {hidden}, init::ones);
  b.norm2_b = store.declare(prefix + ".norm2.b", {hidden}, init::zeros);
  b.fc1_w = store.declare(prefix + ".fc1.w", {hidden, ffn}, init::normal, in_scale);
  b.fc1_b = store.declare(prefix + ".fc1.b", {ffn}, init::zeros);
  b.fc2_w = store.declare(prefix + ".fc2.w", {ffn, hidden}, init::normal, out_scale / std::sqrt(ffn / double(hidden)));
  b.fc2_b = store.declare(prefix + ".fc2.b", {hidden}, init::zeros);
  return b;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Heap bytes in use (glibc: arena chunks plus mmapped blocks), what libtorch's
// CPU allocator draws from directly (it keeps no cache of its own).
std::size_t heap_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

}  // namespace

// ------------------------------------------------------------ the model part a stage holds

struct torch_stage::impl {
  stage_assignment assignment;
  model_options o;
  at::ScalarType dtype;
  bool encoder;
  parameter_store store;
  // encoder: patch embedding, positions; projector (norm, two linears)
  // LLM: token and position embeddings; head (norm, linear)
  std::size_t embed_w = 0, embed_b = 0, positions = 0, norm_w = 0, norm_b = 0, head1_w = 0, head1_b = 0,
              head2_w = 0, head2_b = 0;
  std::vector<block_parameters> blocks;
  std::vector<std::vector<float>> templates;  // per class: the item's clean patch values
  std::map<std::int64_t, Tensor> masks;       // causal masks by sequence length

  struct graph {
    Tensor leaf;    // the input activation (autograd leaf), when received
    Tensor output;  // the output activation, or the loss
    bool loss = false;
    // Recomputed layers (the stage's first `checkpoints.size()`): each one's
    // input, kept instead of its activations. The first carries the graph
    // before it (embedding, or the received leaf); `resumed` is the last
    // one's output as a leaf, where the rest of the graph starts.
    std::vector<Tensor> checkpoints;
    Tensor resumed;
    // With gradient buckets, the graph is cut at every kept layer's input and
    // at the head's (each after the first a leaf), so B can backpropagate one
    // layer at a time and say each bucket final as soon as it is.
    std::vector<Tensor> block_inputs, block_outputs;  // per layer (kept ones only)
    Tensor head_input;
  };
  std::map<std::uint32_t, graph> graphs;  // per microbatch in flight
  std::vector<op_record> records;
  double targets = 1;

  // The parameters' declaration order: embedding, each block (`block_specs`:
  // where its parameters start), then the projector or head (`head_spec` on).
  std::vector<std::size_t> block_specs;
  std::size_t head_spec = 0;
  // The flat gradient in buckets, said final as B finishes them (one bucket,
  // summed after the step, without a size: not `overlapped()`).
  gradient_buckets buckets;
  // The parameters in the same buckets (the distributed optimizer gathers them),
  // and each bucket's first element in the flat buffers.
  std::vector<gradient_buffer> parameter_buckets;
  std::vector<std::int64_t> bucket_offsets;

  impl(const stage_assignment& a, const model_options& options, double gradient_bucket_bytes = 0)
      : assignment(a), o(options), dtype(options.float64 ? at::kDouble : at::kFloat),
        encoder(a.role.module == module_kind::encoder) {
    validate(o);
    using init = parameter_store::init;
    const std::int64_t h = hidden();
    if (encoder) {
      if (a.slice.embedding) {
        embed_w = store.declare("encoder.patch.w", {o.patch_values, h}, init::normal, 1.0 / std::sqrt(o.patch_values));
        embed_b = store.declare("encoder.patch.b", {h}, init::zeros);
        positions = store.declare("encoder.positions", {o.patches_per_item, h}, init::normal, 0.02);
      }
      for (std::int64_t l = a.first_layer; l < a.end_layer; ++l) {
        block_specs.push_back(store.declared());
        blocks.push_back(declare_block(store, "encoder.layer" + std::to_string(l), h, o.encoder_ffn, o.encoder_layers));
      }
      head_spec = store.declared();
      if (a.slice.head) {
        const std::int64_t lh = o.llm_hidden;
        norm_w = store.declare("projector.norm.w", {h}, init::ones);
        norm_b = store.declare("projector.norm.b", {h}, init::zeros);
        head1_w = store.declare("projector.fc1.w", {h, lh}, init::normal, 1.0 / std::sqrt(double(h)));
        head1_b = store.declare("projector.fc1.b", {lh}, init::zeros);
        head2_w = store.declare("projector.fc2.w", {lh, lh}, init::normal, 1.0 / std::sqrt(double(lh)));
        head2_b = store.declare("projector.fc2.b", {lh}, init::zeros);
      }
      random_generator random(key_of("templates", o.seed));
      templates.resize(static_cast<std::size_t>(o.classes));
      for (auto& t : templates)
        for (int i = 0; i < o.patches_per_item * o.patch_values; ++i) t.push_back(static_cast<float>(random.uniform(-1, 1)));
    } else {
      if (a.slice.embedding) {
        embed_w = store.declare("llm.tokens", {o.vocab, h}, init::normal, 1.0);
        positions = store.declare("llm.positions", {o.max_positions, h}, init::normal, 0.02);
      }
      for (std::int64_t l = a.first_layer; l < a.end_layer; ++l) {
        block_specs.push_back(store.declared());
        blocks.push_back(declare_block(store, "llm.layer" + std::to_string(l), h, o.llm_ffn, o.llm_layers));
      }
      head_spec = store.declared();
      if (a.slice.head) {
        norm_w = store.declare("llm.norm.w", {h}, init::ones);
        norm_b = store.declare("llm.norm.b", {h}, init::zeros);
        head1_w = store.declare("llm.head.w", {h, o.vocab}, init::normal, 1.0 / std::sqrt(double(h)));
      }
    }
    store.allocate(dtype, o.seed);
    make_buckets(gradient_bucket_bytes);
  }

  // B's units in the order it finishes them, as ranges of the flat gradient:
  // the head (when the stage has one), then each layer, last first (the first
  // with the embedding before it).
  void make_buckets(double bucket_bytes) {
    const auto total = static_cast<std::size_t>(store.offset_of(store.declared()));
    const auto head_begin = static_cast<std::size_t>(store.offset_of(head_spec));
    std::vector<gradient_unit> units;
    if (head_begin < total) units.push_back({head_begin, total});
    for (std::size_t l = blocks.size(); l-- > 0;)
      units.push_back({l == 0 ? 0 : static_cast<std::size_t>(store.offset_of(block_specs[l])),
                       l + 1 < blocks.size() ? static_cast<std::size_t>(store.offset_of(block_specs[l + 1])) : head_begin});
    buckets = gradient_buckets(store.gradients(), units, blocks.empty() ? 0.0 : bucket_bytes);
    const gradient_buffer whole = store.gradients(), values = store.values();
    const std::size_t element = element_size(whole.type);
    for (const gradient_buffer& bucket : buckets.buffers()) {
      const auto offset = static_cast<std::size_t>(static_cast<const std::byte*>(bucket.data) -
                                                   static_cast<const std::byte*>(whole.data)) / element;
      bucket_offsets.push_back(static_cast<std::int64_t>(offset));
      parameter_buckets.push_back({static_cast<std::byte*>(values.data) + offset * element, bucket.count, bucket.type});
    }
  }
  // Adam on what `shard` says is this rank's: in each bucket, its shard and the common remainder.
  void update(const optimizer_shard& shard) {
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    const auto buffers = buckets.buffers();
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      const gradient_shard part = shard.of(buffers[b].count);
      const std::int64_t at = bucket_offsets[b];
      ranges.emplace_back(at + static_cast<std::int64_t>(part.begin), at + static_cast<std::int64_t>(part.end));
      ranges.emplace_back(at + static_cast<std::int64_t>(part.common_begin), at + static_cast<std::int64_t>(part.count));
    }
    store.adam_step(o.learning_rate, ranges);
  }

  [[nodiscard]] std::int64_t hidden() const noexcept { return encoder ? o.encoder_hidden : o.llm_hidden; }
  [[nodiscard]] at::TensorOptions options() const { return at::TensorOptions().dtype(dtype); }
  [[nodiscard]] bool last_position() const noexcept { return assignment.role.position + 1 == assignment.positions; }
  [[nodiscard]] bool receives_handoff() const noexcept {
    return !encoder && assignment.slice.embedding && assignment.role.position > 0;
  }
  [[nodiscard]] const Tensor& p(std::size_t i) const { return store[i]; }

  // Rows (and their width) of the activation entering this stage, for one sample.
  [[nodiscard]] std::int64_t input_rows(const sample& s) const {
    if (assignment.role.position == 0) return 0;
    if (encoder) return s.encoder_items * o.patches_per_item;
    if (receives_handoff()) return image_tokens(s, o);
    return s.llm_tokens;
  }
  [[nodiscard]] std::int64_t input_width() const noexcept {
    return encoder ? o.encoder_hidden : o.llm_hidden;  // the hand-off rows are projected to the LLM's width
  }
  [[nodiscard]] std::int64_t output_rows(const sample& s) const {
    if (last_position()) return 0;
    if (!encoder) return s.llm_tokens;
    return assignment.slice.head ? image_tokens(s, o) : s.encoder_items * o.patches_per_item;
  }
  [[nodiscard]] std::int64_t output_width() const noexcept {
    return encoder && !assignment.slice.head ? o.encoder_hidden : o.llm_hidden;
  }
  template <class Rows>
  [[nodiscard]] std::int64_t rows(const microbatch_view& mb, Rows per_sample) const {
    std::int64_t n = 0;
    for (const sample& s : mb) n += per_sample(s);
    return n;
  }

  // ---------------------------------------------------------- the model's functions
  Tensor encoder_embed(const Tensor& patches) const {  // [items, P, values] -> [items, P, h]
    return at::matmul(patches, p(embed_w)) + p(embed_b) + p(positions);
  }
  Tensor encoder_block(const block_parameters& b, const Tensor& x) const {  // [items, P, h]
    const std::int64_t items = x.size(0), tokens = x.size(1), h = x.size(2), heads = o.encoder_heads;
    const Tensor n1 = at::layer_norm(x, {h}, p(b.norm1_w), p(b.norm1_b));
    const Tensor qkv = (at::matmul(n1, p(b.qkv_w)) + p(b.qkv_b)).view({items, tokens, 3, heads, h / heads})
                           .permute({2, 0, 3, 1, 4});
    const Tensor q = qkv[0] * (1.0 / std::sqrt(double(h / heads)));
    const Tensor attention = at::softmax(at::matmul(q, qkv[1].transpose(-2, -1)), -1);
    const Tensor mixed = at::matmul(attention, qkv[2]).permute({0, 2, 1, 3}).reshape({items, tokens, h});
    const Tensor y = x + at::matmul(mixed, p(b.out_w)) + p(b.out_b);
    const Tensor n2 = at::layer_norm(y, {h}, p(b.norm2_w), p(b.norm2_b));
    return y + at::matmul(at::gelu(at::matmul(n2, p(b.fc1_w)) + p(b.fc1_b)), p(b.fc2_w)) + p(b.fc2_b);
  }
  Tensor project(const Tensor& x) const {  // [items, P, h] -> [items x P / pool, llm hidden]
    const std::int64_t items = x.size(0), h = x.size(2), q = o.llm_tokens_per_item();
    const Tensor pooled = at::layer_norm(x, {h}, p(norm_w), p(norm_b)).view({items, q, o.pool, h}).mean(2)
                              .reshape({items * q, h});
    return at::addmm(p(head2_b), at::gelu(at::addmm(p(head1_b), pooled, p(head1_w))), p(head2_w));
  }
  // The packed LLM sequence of `samples`: per sample its image rows (from
  // `handoff`, in sample order) then its text tokens' embeddings, plus positions.
  Tensor llm_embed(const Tensor& handoff, const microbatch_view& samples) const {
    std::vector<std::int64_t> tokens, text_rows, image_rows, position_ids;
    std::int64_t row = 0;
    for (const sample& s : samples) {
      const sample_content c = content_of(s, o);
      const std::int64_t image = receives_handoff() ? image_tokens(s, o) : 0;
      for (std::int64_t i = 0; i < s.llm_tokens; ++i) position_ids.push_back(i);
      for (std::int64_t i = 0; i < image; ++i) image_rows.push_back(row + i);
      // Without an encoder before it (an LLM-only plan) the image positions read as token 0.
      const std::int64_t skipped = image_tokens(s, o) - image;
      for (std::int64_t i = 0; i < skipped; ++i) tokens.push_back(0), text_rows.push_back(row + image + i);
      for (std::size_t j = 0; j < c.text.size(); ++j)
        tokens.push_back(c.text[j]), text_rows.push_back(row + image_tokens(s, o) + static_cast<std::int64_t>(j));
      row += s.llm_tokens;
    }
    const auto index = [](std::vector<std::int64_t>& v) {
      return at::from_blob(v.data(), {static_cast<std::int64_t>(v.size())}, at::kLong).clone();
    };
    Tensor x = at::zeros({row, o.llm_hidden}, options());
    x = x.index_copy(0, index(text_rows), at::index_select(p(embed_w), 0, index(tokens)));
    if (!image_rows.empty()) x = x.index_copy(0, index(image_rows), handoff);
    return x + at::index_select(p(positions), 0, index(position_ids));
  }
  const Tensor& mask(std::int64_t length) {
    auto found = masks.find(length);
    if (found == masks.end())
      found = masks.emplace(length, at::full({length, length}, -std::numeric_limits<double>::infinity(), options()).triu(1))
                  .first;
    return found->second;
  }
  // Causal attention within each sample of the packed sequence: no padding, no
  // cross-sample attention; the work follows the sum of squared lengths.
  Tensor llm_block(const block_parameters& b, const Tensor& x, const std::vector<std::int64_t>& lengths) {
    const std::int64_t n = x.size(0), h = x.size(1), heads = o.llm_heads;
    const Tensor n1 = at::layer_norm(x, {h}, p(b.norm1_w), p(b.norm1_b));
    const Tensor qkv = at::addmm(p(b.qkv_b), n1, p(b.qkv_w)).view({n, 3, heads, h / heads}).permute({1, 2, 0, 3});
    const Tensor q = qkv[0] * (1.0 / std::sqrt(double(h / heads))), k = qkv[1], v = qkv[2];
    std::vector<Tensor> parts;
    std::int64_t offset = 0;
    for (std::int64_t length : lengths) {
      const Tensor scores = at::matmul(q.narrow(1, offset, length), k.narrow(1, offset, length).transpose(1, 2));
      parts.push_back(at::matmul(at::softmax(scores + mask(length), -1), v.narrow(1, offset, length)));
      offset += length;
    }
    const Tensor mixed = (parts.size() == 1 ? parts.front() : at::cat(parts, 1)).permute({1, 0, 2}).reshape({n, h});
    const Tensor y = x + at::addmm(p(b.out_b), mixed, p(b.out_w));
    const Tensor n2 = at::layer_norm(y, {h}, p(b.norm2_w), p(b.norm2_b));
    return y + at::addmm(p(b.fc2_b), at::gelu(at::addmm(p(b.fc1_b), n2, p(b.fc1_w))), p(b.fc2_w));
  }
  // Summed cross-entropy of every predicted text token, over the batch's `targets`.
  Tensor head_loss(const Tensor& x, const microbatch_view& samples) const {
    std::vector<std::int64_t> rows, wanted;
    std::int64_t offset = 0;
    for (const sample& s : samples) {
      const sample_content c = content_of(s, o);
      const std::int64_t image = image_tokens(s, o);
      for (std::size_t j = s.encoder_items > 0 ? 0 : 1; j < c.text.size(); ++j) {
        rows.push_back(offset + image + static_cast<std::int64_t>(j) - 1);
        wanted.push_back(c.text[j]);
      }
      offset += s.llm_tokens;
    }
    const auto n = static_cast<std::int64_t>(rows.size());
    const Tensor picked = at::index_select(x, 0, at::from_blob(rows.data(), {n}, at::kLong).clone());
    const Tensor logits = at::matmul(at::layer_norm(picked, {x.size(1)}, p(norm_w), p(norm_b)), p(head1_w));
    const Tensor loss = at::nll_loss(at::log_softmax(logits, 1), at::from_blob(wanted.data(), {n}, at::kLong).clone(),
                                     {}, at::Reduction::Sum);
    return loss / targets;
  }
  // The items' patch values of `samples` (class template plus noise), [items, P, values].
  Tensor patches_of(const microbatch_view& samples) const {
    std::vector<float> values;
    std::int64_t items = 0;
    const std::size_t per_item = static_cast<std::size_t>(o.patches_per_item * o.patch_values);
    for (const sample& s : samples) {
      const sample_content c = content_of(s, o);
      random_generator noise(key_of(s.id + "/pixels", o.seed));
      for (std::int64_t cls : c.classes) {
        const auto& t = templates[static_cast<std::size_t>(cls)];
        for (std::size_t i = 0; i < per_item; ++i) values.push_back(t[i] + static_cast<float>(0.5 * noise.uniform(-1, 1)));
        ++items;
      }
    }
    // A copy: from_blob aliases `values`, which dies here.
    return at::from_blob(values.data(), {items, o.patches_per_item, o.patch_values}, at::kFloat).to(options(), false, true);
  }

  // ---------------------------------------------------------- the buffers
  Tensor received(std::span<const std::byte> input, std::vector<std::int64_t> shape) const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    expect(input.size(), static_cast<std::size_t>(n) * o.element_bytes(), "input");
    // One copy into a tensor the stage owns (the autograd leaf).
    return at::from_blob(const_cast<std::byte*>(input.data()), shape, options()).clone().requires_grad_(true);
  }
  void send(const Tensor& y, std::span<std::byte> output) const {
    expect(output.size(), static_cast<std::size_t>(y.numel()) * o.element_bytes(), "output");
    const Tensor contiguous = y.contiguous();
    if (!output.empty()) std::memcpy(output.data(), contiguous.data_ptr(), output.size());
  }
  void expect(std::size_t got, std::size_t wanted, const char* what) const {
    if (got != wanted)
      throw error("torch_stage (" + std::string(encoder ? "encoder" : "llm") + " stage " +
                  std::to_string(assignment.role.stage) + "): the " + what + " has " + std::to_string(got) +
                  " bytes, the samples need " + std::to_string(wanted));
  }

  // ---------------------------------------------------------- recomputation
  Tensor block(std::size_t l, const Tensor& x, const std::vector<std::int64_t>& lengths) {
    return encoder ? encoder_block(blocks[l], x) : llm_block(blocks[l], x, lengths);
  }
  // The stage's blocks on `x`. The first `ctx.recomputed_layers` run without
  // autograd and keep only their inputs (`g.checkpoints`): what the memory
  // model prices a recomputed layer at, and what `batch_recompute` chose the
  // count with. The rest build the graph from `g.resumed`.
  Tensor run_blocks(graph& g, Tensor x, const stage_context& ctx, const std::vector<std::int64_t>& lengths) {
    if (ctx.recomputed_layers > blocks.size())
      throw error("torch_stage (" + std::string(encoder ? "encoder" : "llm") + " stage " +
                  std::to_string(assignment.role.stage) + "): microbatch " + std::to_string(ctx.microbatch) +
                  " recomputes " + std::to_string(ctx.recomputed_layers) + " layers, the stage has " +
                  std::to_string(blocks.size()));
    const std::size_t recomputed = ctx.recomputed_layers;
    if (recomputed > 0) {
      const at::NoGradGuard no_graph;
      for (std::size_t l = 0; l < recomputed; ++l) {
        g.checkpoints.push_back(x);
        x = block(l, x, lengths);
      }
      g.resumed = x.detach().requires_grad_(true);
      x = g.resumed;
    }
    if (buckets.overlapped()) {
      g.block_inputs.resize(blocks.size());
      g.block_outputs.resize(blocks.size());
    }
    for (std::size_t l = recomputed; l < blocks.size(); ++l) {
      if (buckets.overlapped()) {
        if (l > recomputed) x = x.detach().requires_grad_(true);
        g.block_inputs[l] = x;
      }
      x = block(l, x, lengths);
      if (buckets.overlapped()) g.block_outputs[l] = x;
    }
    return x;
  }
  // Where the projector or head starts: a leaf of its own with buckets (see `graph`).
  Tensor head_boundary(graph& g, const Tensor& x) const {
    if (!buckets.overlapped()) return x;
    // Every layer recomputed: `x` is `g.resumed`, already a leaf, which B of
    // the recomputed layers starts from.
    g.head_input = x.is_leaf() ? x : x.detach().requires_grad_(true);
    return g.head_input;
  }
  // B of the recomputed layers, last first: each is run again from its kept
  // input, this time with autograd, and backpropagated from the gradient of
  // its output; the first one's backward reaches the embedding or the leaf.
  void backward_recomputed(graph& g, const stage_context& ctx) {
    if (g.checkpoints.empty()) return;
    std::vector<std::int64_t> lengths;
    if (!encoder)
      for (const sample& s : ctx.samples) lengths.push_back(s.llm_tokens);
    Tensor gradient = g.resumed.grad();
    if (!gradient.defined()) return;  // nothing after the recomputed layers depends on them
    for (std::size_t l = g.checkpoints.size(); l-- > 0;) {
      Tensor input = l == 0 ? g.checkpoints[0] : g.checkpoints[l].detach().requires_grad_(true);
      const Tensor output = block(l, input, lengths);
      output.backward(gradient);
      buckets.unit_done(ctx);
      if (l > 0) gradient = input.grad();
    }
  }
  // B of the kept part, one unit at a time (see `graph`): the head from the
  // loss or the output gradient, then each kept layer, last first, from the
  // gradient its successor left on its output.
  void backward_in_units(graph& g, const stage_context& ctx, const Tensor& output_grad) {
    Tensor top = g.output, gradient = output_grad;
    const std::size_t first_kept = g.checkpoints.size();
    if (g.head_input.defined()) {
      top.backward(gradient);
      buckets.unit_done(ctx);
      top = g.block_outputs.back();
      gradient = g.head_input.grad();
    }
    for (std::size_t l = blocks.size(); l-- > first_kept;) {
      if (!gradient.defined()) return;  // nothing flowed back this far
      top.backward(gradient);
      buckets.unit_done(ctx);
      if (l > first_kept) {
        top = g.block_outputs[l - 1];
        gradient = g.block_inputs[l].grad();
      }
    }
  }

  void forward(stage_context& ctx) {
    const double start = now_seconds(), cpu_start = thread_cpu_seconds();
    graph g;
    Tensor x;
    if (encoder) {
      const std::int64_t items = rows(ctx.samples, [](const sample& s) { return s.encoder_items; });
      if (items > 0) {
        if (assignment.slice.embedding) {
          x = encoder_embed(patches_of(ctx.samples));
        } else {
          g.leaf = received(ctx.input, {items, o.patches_per_item, o.encoder_hidden});
          x = g.leaf;
        }
        x = run_blocks(g, x, ctx, {});
        x = assignment.slice.head ? project(head_boundary(g, x))
                                  : x.reshape({items * o.patches_per_item, o.encoder_hidden});
        send(x, ctx.output);
        g.output = x;
      } else {
        expect(ctx.output.size(), 0, "output");
      }
    } else {
      std::vector<std::int64_t> lengths;
      for (const sample& s : ctx.samples) lengths.push_back(s.llm_tokens);
      const std::int64_t tokens = rows(ctx.samples, [](const sample& s) { return s.llm_tokens; });
      if (assignment.slice.embedding) {
        Tensor handoff;
        if (receives_handoff()) {
          handoff = received(ctx.input, {rows(ctx.samples, [&](const sample& s) { return input_rows(s); }), o.llm_hidden});
          g.leaf = handoff;
        }
        x = llm_embed(handoff, ctx.samples);
      } else {
        g.leaf = received(ctx.input, {tokens, o.llm_hidden});
        x = g.leaf;
      }
      x = run_blocks(g, x, ctx, lengths);
      if (assignment.slice.head) {
        g.output = head_loss(head_boundary(g, x), ctx.samples);
        g.loss = true;
        ctx.loss = g.output.item<double>();
      } else {
        send(x, ctx.output);
        g.output = x;
      }
    }
    graphs[ctx.microbatch] = std::move(g);
    records.push_back({true, ctx.microbatch, {ctx.samples.indices().begin(), ctx.samples.indices().end()},
                       now_seconds() - start, thread_cpu_seconds() - cpu_start, ctx.recomputed_layers});
  }

  void backward(stage_context& ctx) {
    const double start = now_seconds(), cpu_start = thread_cpu_seconds();
    auto found = graphs.find(ctx.microbatch);
    if (found == graphs.end())
      throw error("torch_stage: backward of microbatch " + std::to_string(ctx.microbatch) + " before its forward");
    graph g = std::move(found->second);
    graphs.erase(found);
    buckets.begin_op();
    if (g.output.defined()) {
      Tensor output_grad;  // none for the loss
      if (!g.loss) {
        expect(ctx.output_grad.size(), static_cast<std::size_t>(g.output.numel()) * o.element_bytes(), "output gradient");
        // Read in place: the executor keeps the buffer until the call returns.
        output_grad = at::from_blob(const_cast<std::byte*>(ctx.output_grad.data()), g.output.sizes(), options());
      }
      if (buckets.overlapped()) backward_in_units(g, ctx, output_grad);
      else g.output.backward(output_grad);
      backward_recomputed(g, ctx);
      store.check_gradients();
    }
    buckets.rest_done(ctx);
    if (!ctx.input_grad.empty()) {
      if (!g.leaf.defined() || !g.leaf.grad().defined())
        std::memset(ctx.input_grad.data(), 0, ctx.input_grad.size());
      else
        send(g.leaf.grad(), ctx.input_grad);  // one copy out of the tensor
    }
    records.push_back({false, ctx.microbatch, {ctx.samples.indices().begin(), ctx.samples.indices().end()},
                       now_seconds() - start, thread_cpu_seconds() - cpu_start, ctx.recomputed_layers});
  }
};

// ------------------------------------------------------------ torch_stage

torch_stage::torch_stage(const stage_assignment& assignment, const model_options& options,
                         double gradient_bucket_bytes)
    : impl_(std::make_unique<impl>(assignment, options, gradient_bucket_bytes)) {}
torch_stage::~torch_stage() = default;
torch_stage::torch_stage(torch_stage&&) noexcept = default;
torch_stage& torch_stage::operator=(torch_stage&&) noexcept = default;

std::size_t torch_stage::input_bytes(const microbatch_view& mb) const {
  const auto rows = impl_->rows(mb, [&](const sample& s) { return impl_->input_rows(s); });
  return static_cast<std::size_t>(rows * impl_->input_width()) * impl_->o.element_bytes();
}
std::size_t torch_stage::output_bytes(const microbatch_view& mb) const {
  const auto rows = impl_->rows(mb, [&](const sample& s) { return impl_->output_rows(s); });
  return static_cast<std::size_t>(rows * impl_->output_width()) * impl_->o.element_bytes();
}
void torch_stage::forward(stage_context& ctx) { impl_->forward(ctx); }
void torch_stage::backward(stage_context& ctx) { impl_->backward(ctx); }
std::span<const gradient_buffer> torch_stage::gradients() const noexcept { return impl_->buckets.buffers(); }
void torch_stage::begin_step(double targets) {
  if (!(targets > 0)) throw error("torch_stage::begin_step: a batch needs at least one predicted token");
  impl_->targets = targets;
  impl_->records.clear();
}
void torch_stage::update(const optimizer_shard& shard) {
  if (!impl_->graphs.empty()) throw error("torch_stage::update: microbatches still in flight");
  impl_->update(shard);
}
std::span<const gradient_buffer> torch_stage::parameters() const noexcept { return impl_->parameter_buckets; }
std::span<const op_record> torch_stage::records() const noexcept { return impl_->records; }
std::size_t torch_stage::parameter_count() const noexcept { return impl_->store.count(); }
const stage_assignment& torch_stage::assignment() const noexcept { return impl_->assignment; }

std::int64_t predicted_tokens(std::span<const sample> batch, const model_options& options) {
  std::int64_t n = 0;
  for (const sample& s : batch) {
    if (auto why = sample_mismatch(s, options); !why.empty()) throw input_error("sample " + s.id, 0, why);
    n += targets_of(s, options);
  }
  return n;
}

void set_torch_threads(int threads) { at::set_num_threads(threads); }

// ------------------------------------------------------------ the single-process reference

namespace {

// A whole module on one stage: every layer, its embedding and its head.
stage_assignment whole_module(module_kind kind, const model_options& o, bool with_encoder) {
  stage_assignment a;
  a.role.module = kind;
  a.role.position = kind == module_kind::encoder || !with_encoder ? 0 : 1;
  a.positions = with_encoder ? 2 : 1;
  a.first_layer = 0;
  a.end_layer = kind == module_kind::encoder ? o.encoder_layers : o.llm_layers;
  a.slice = layer_range(0, a.end_layer, a.end_layer);
  return a;
}

// Host memory the reference lends a stage (it keeps its own graphs: nothing is stashed).
class plain_memory final : public detail::stage_memory {
public:
  std::span<std::byte> stash(std::size_t bytes) override { return keep(stashed_, bytes); }
  std::span<std::byte> stashed(std::size_t index) override { return stashed_.at(index); }
  std::span<std::byte> scratch(std::size_t bytes) override { return keep(scratch_, bytes); }

private:
  std::span<std::byte> keep(std::vector<std::span<std::byte>>& list, std::size_t bytes) {
    blocks_.emplace_back(bytes);
    list.emplace_back(blocks_.back());
    return list.back();
  }
  std::vector<std::vector<std::byte>> blocks_;
  std::vector<std::span<std::byte>> stashed_, scratch_;
};

}  // namespace

std::vector<double> reference_losses(std::span<const std::vector<sample>> batches, const model_options& options) {
  torch_stage vision(whole_module(module_kind::encoder, options, true), options);
  torch_stage language(whole_module(module_kind::llm, options, true), options);
  std::vector<double> losses;
  for (const auto& batch : batches) {
    std::vector<std::uint32_t> all(batch.size());
    for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    const microbatch_view view(batch, all);
    const double targets = static_cast<double>(predicted_tokens(batch, options));
    vision.begin_step(targets);
    language.begin_step(targets);
    std::vector<std::byte> activation(vision.output_bytes(view)), gradient(activation.size());
    plain_memory memory;
    stage_context encode;
    encode.stages = 2;
    encode.samples = view;
    encode.memory = &memory;
    encode.output = activation;
    vision.forward(encode);
    stage_context decode = encode;
    decode.stage = 1;
    decode.output = {};
    decode.input = activation;
    language.forward(decode);
    losses.push_back(decode.loss);
    decode.kind = op_kind::backward;
    decode.input_grad = gradient;
    language.backward(decode);
    encode.kind = op_kind::backward;
    encode.output_grad = gradient;
    vision.backward(encode);
    vision.update();
    language.update();
  }
  return losses;
}

std::vector<std::size_t> held_bytes(const model_options& options, module_kind kind,
                                    std::span<const std::vector<sample>> microbatches, std::uint32_t recomputed) {
  torch_stage stage(whole_module(kind, options, true), options);
  const auto total = [&] {
    std::size_t targets = 0;
    for (const auto& mb : microbatches) targets += static_cast<std::size_t>(predicted_tokens(mb, options));
    return static_cast<double>(std::max<std::size_t>(targets, 1));
  }();
  // Every microbatch's buffers first (not counted), one per direction.
  std::vector<std::vector<std::uint32_t>> indices(microbatches.size());
  std::vector<std::vector<std::byte>> inputs, outputs, input_grads, output_grads;
  for (std::size_t j = 0; j < microbatches.size(); ++j) {
    for (std::uint32_t i = 0; i < microbatches[j].size(); ++i) indices[j].push_back(i);
    const microbatch_view view(microbatches[j], indices[j]);
    inputs.emplace_back(stage.input_bytes(view));
    input_grads.emplace_back(stage.input_bytes(view));
    outputs.emplace_back(stage.output_bytes(view));
    output_grads.emplace_back(stage.output_bytes(view));
  }
  plain_memory memory;
  const auto context = [&](std::size_t j, op_kind pass, std::uint32_t layers) {
    stage_context ctx;
    ctx.kind = pass;
    ctx.microbatch = static_cast<std::uint32_t>(j);
    ctx.stage = kind == module_kind::encoder ? 0 : 1;
    ctx.stages = 2;
    ctx.samples = microbatch_view(microbatches[j], indices[j]);
    ctx.memory = &memory;
    ctx.input = inputs[j];
    ctx.output = outputs[j];
    ctx.input_grad = input_grads[j];
    ctx.output_grad = output_grads[j];
    ctx.recomputed_layers = layers;
    return ctx;
  };
  const auto all_forward_then_backward = [&](std::uint32_t layers, std::vector<std::size_t>* held) {
    stage.begin_step(total);
    const std::size_t before = heap_in_use();
    for (std::size_t j = 0; j < microbatches.size(); ++j) {
      stage_context ctx = context(j, op_kind::forward, layers);
      stage.forward(ctx);
      if (held) held->push_back(heap_in_use() - std::min(before, heap_in_use()));
    }
    for (std::size_t j = 0; j < microbatches.size(); ++j) {
      stage_context ctx = context(j, op_kind::backward, layers);
      stage.backward(ctx);
    }
  };
  // Once untimed and uncounted: the masks by length and the gradient tensors are made once.
  all_forward_then_backward(0, nullptr);
  std::vector<std::size_t> held;
  all_forward_then_backward(recomputed, &held);
  return held;
}

// ------------------------------------------------------------ profiling targets

namespace {

// Times one part of the model at one size: `prepare` makes inputs of c.count()
// tokens (encoder: whole items of patches_per_item tokens; LLM: one sequence),
// `forward` builds the part's graph, `backward` runs it with a fixed gradient.
struct part_target {
  torch_stage::impl& model;
  module_part part;
  Tensor input, output, gradient;
  std::vector<sample> one;  // the LLM parts' sequence as a text-only sample
  std::vector<std::uint32_t> index{0};

  void prepare(const profile_case& c) {
    const auto& o = model.o;
    const std::int64_t n = c.count();
    const auto options = model.options();
    one.clear();
    if (model.encoder) {
      if (n % o.patches_per_item != 0)
        throw input_error("profile sizes", 0, "encoder sizes must be whole items: " + std::to_string(n) +
                                                   " is not a multiple of " + std::to_string(o.patches_per_item));
      const std::int64_t items = n / o.patches_per_item;
      if (part == module_part::embedding)
        input = at::randn({items, o.patches_per_item, o.patch_values}, options);
      else
        input = at::randn({items, o.patches_per_item, o.encoder_hidden}, options).requires_grad_(true);
    } else {
      one.push_back(sample{"profile-" + std::to_string(n), modality::text, 0, 0, n});
      input = at::randn({n, o.llm_hidden}, options).requires_grad_(true);
    }
  }
  void forward(const profile_case&) {
    const microbatch_view view(one, index);
    if (model.encoder) {
      if (part == module_part::embedding) output = model.encoder_embed(input);
      else if (part == module_part::layer) output = model.encoder_block(model.blocks.at(0), input);
      else output = model.project(input);
    } else {
      if (part == module_part::embedding) output = model.llm_embed({}, view);
      else if (part == module_part::layer) output = model.llm_block(model.blocks.at(0), input, {one.front().llm_tokens});
      else output = model.head_loss(input, view);
    }
    if (!gradient.defined() || !gradient.sizes().equals(output.sizes())) gradient = at::ones_like(output);
  }
  void backward(const profile_case&) {
    if (output.dim() == 0) output.backward();
    else output.backward(gradient);
    output = Tensor();
  }
};

// A timer policy lending another (one flush buffer for every pass).
template <class Timer>
struct borrowed_timer {
  Timer* timer;
  template <std::invocable Work>
  double measure(Work&& work) {
    return timer->measure(std::forward<Work>(work));
  }
};

// One pass over every part at `sizes` (in that order), with its own profiler.
template <class Timer>
profile profile_pass(torch_stage::impl& encoder, torch_stage::impl& llm, const profile_sizes& sizes,
                     const profiler_options& profiling, Timer& timer) {
  profiler<borrowed_timer<Timer>> timing(profiling, {&timer});
  const profile_grid encoder_grid{profile_size::tokens, sizes.encoder_tokens, {1}};
  const profile_grid llm_grid{profile_size::tokens, sizes.llm_tokens, {1}};
  for (module_part part : {module_part::layer, module_part::embedding, module_part::head}) {
    if (!sizes.encoder_tokens.empty())
      timing.measure({module_kind::encoder, part}, encoder_grid, part_target{encoder, part, {}, {}, {}, {}, {0}});
    if (!sizes.llm_tokens.empty())
      timing.measure({module_kind::llm, part}, llm_grid, part_target{llm, part, {}, {}, {}, {}, {0}});
  }
  return timing.table();
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// `passes` passes over the whole grid, one after the other (each point's repeats
// then lie minutes apart, not in one burst), every pass visiting the sizes in
// another rotation; each point's time is the median over the passes of the
// pass's median. On a machine whose speed drifts with other jobs (a shared VM:
// caches, memory bandwidth, the host's other guests) one burst of repeats
// catches one moment; the median over passes the typical speed.
template <class Timer>
profile profile_with(const model_options& options, const profile_sizes& sizes, const profiler_options& profiling,
                     int passes, Timer timer) {
  if (passes < 1) throw input_error("--profile-passes", 0, "must be >= 1, got " + std::to_string(passes));
  if (sizes.encoder_tokens.empty() && sizes.llm_tokens.empty()) throw input_error("profile sizes", 0, "nothing to profile");
  // A one-layer-per-module model holding every part (position 0 for the LLM: no hand-off).
  stage_assignment vision = whole_module(module_kind::encoder, options, true);
  vision.end_layer = 1;
  vision.slice = {1, true, true};
  stage_assignment language = whole_module(module_kind::llm, options, false);
  language.end_layer = 1;
  language.slice = {1, true, true};
  torch_stage::impl encoder(vision, options), llm(language, options);
  llm.targets = 1;
  const auto rotated = [](std::vector<double> v, int by) {
    if (!v.empty()) std::rotate(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(by % static_cast<int>(v.size())), v.end());
    return v;
  };
  std::vector<profile> tables;
  for (int pass = 0; pass < passes; ++pass) {
    profiler_options one = profiling;
    if (passes > 1 && profiling.progress) *profiling.progress << "pass " << pass + 1 << " of " << passes << "\n";
    tables.push_back(profile_pass(encoder, llm,
                                  {rotated(sizes.encoder_tokens, pass), rotated(sizes.llm_tokens, pass)}, one, timer));
  }
  // The first pass's layout (sizes in the order given), each point the median over the passes.
  profile out = tables.front();
  for (auto& curve : out.curves) {
    std::sort(curve.points.begin(), curve.points.end(),
              [](const profile_point& a, const profile_point& b) { return a.size < b.size; });
    for (auto& point : curve.points) {
      std::vector<double> forward, backward;
      for (const profile& table : tables)
        for (const profile_curve& other : table.curves)
          if (other.piece == curve.piece && other.tp == curve.tp)
            for (const profile_point& q : other.points)
              if (q.size == point.size) forward.push_back(q.forward_seconds), backward.push_back(q.backward_seconds);
      point.forward_seconds = median_of(forward);
      point.backward_seconds = median_of(backward);
    }
  }
  return out;
}

}  // namespace

profile profile_model(const model_options& options, const profile_sizes& sizes, const profiler_options& profiling,
                      bool cpu_clock, std::size_t flush_bytes, int passes) {
  validate(options);
  return cpu_clock ? profile_with<thread_cpu_timer>(options, sizes, profiling, passes, thread_cpu_timer(flush_bytes))
                   : profile_with<steady_clock_timer>(options, sizes, profiling, passes, steady_clock_timer());
}

}  // namespace dflop::torch_trainer
