// SPDX-License-Identifier: Apache-2.0
//! \file
//! `dflop-train-toy --profile OUT.csv`: runs the runtime profiler over one toy
//! stage's forward and backward (B then W, as a B op of a non-split schedule
//! runs them) at a grid of toy-token counts, outside any pipeline: the stage gets
//! a one-sample microbatch of n toy tokens and a context whose memory the
//! profiler's stage owns. The table is what `--cost-profile` starts from.
#pragma once

#include "toy_runtime.hpp"

#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/runtime/profile_writer.hpp>
#include <dflop/runtime/profiler.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop::toy {

//! The members of a stage context the toy stages use, over memory it owns.
struct profile_context {
  microbatch_view samples;                 //!< the microbatch
  std::span<const std::byte> input;        //!< activation from the previous stage
  std::span<std::byte> output;             //!< activation for the next stage
  std::span<const std::byte> output_grad;  //!< gradient from the next stage
  std::span<std::byte> input_grad;         //!< gradient for the previous stage
  double loss = 0;                         //!< written by a last stage
  std::vector<std::vector<std::byte>>* blocks = nullptr;  //!< the stash

  //! A stashed block of `bytes` (kept until the next forward).
  std::span<std::byte> stash(std::size_t bytes) const { return blocks->emplace_back(bytes); }
  //! The `index`-th stashed block.
  std::span<std::byte> stashed(std::size_t index = 0) const { return (*blocks)[index]; }
};

//! Profiles `Stage` (a toy stage with input and output) through `profile_context`s.
template <class Stage>
class profiled_stage_adapter {
public:
  profiled_stage_adapter(Stage stage, std::size_t hidden, std::int64_t divisor)
      : stage_(std::move(stage)), hidden_(hidden), divisor_(divisor) {}

  //! A one-sample microbatch of `c.count()` toy tokens and buffers for it.
  void prepare(const profile_case& c) {
    sample_ = {{"profile", modality::text, 0, 0, c.count() * divisor_}};
    const std::size_t values = static_cast<std::size_t>(c.count()) * hidden_;
    input_.assign(values * sizeof(double), std::byte{0});
    output_.assign(input_.size(), std::byte{0});
    output_grad_.assign(input_.size(), std::byte{0});
    input_grad_.assign(input_.size(), std::byte{0});
    auto x = as_span<double>(std::span<std::byte>(input_));
    auto g = as_span<double>(std::span<std::byte>(output_grad_));
    for (std::size_t i = 0; i < values; ++i) {
      x[i] = std::sin(0.1 * static_cast<double>(i));
      g[i] = 0.01 * std::cos(0.1 * static_cast<double>(i));
    }
  }
  //! The stage's forward.
  void forward(const profile_case&) {
    blocks_.clear();
    auto ctx = context();
    stage_.forward(ctx);
  }
  //! The stage's backward and weight passes.
  void backward(const profile_case&) {
    auto ctx = context();
    stage_.backward(ctx);
    stage_.weight(ctx);
  }

private:
  [[nodiscard]] profile_context context() {
    return {microbatch_view(sample_, index_), input_, output_, output_grad_, input_grad_, 0, &blocks_};
  }

  Stage stage_;
  std::size_t hidden_;
  std::int64_t divisor_;
  std::vector<sample> sample_;
  std::vector<std::uint32_t> index_{0};
  std::vector<std::byte> input_, output_, output_grad_, input_grad_;
  std::vector<std::vector<std::byte>> blocks_;
};

//! Profiles `stage` at `sizes` toy tokens, writes the CSV to `path`, fits it and
//! prints the fitted curve to `out`. Returns the fitted model.
template <class Stage>
fitted_cost_model profile_stage(Stage stage, std::size_t hidden, std::int64_t divisor, const std::vector<double>& sizes,
                                int repeats, const std::string& path, std::ostream& out) {
  profiler<> measured({.warmup = 1, .repeats = repeats, .source = path});
  profiled_stage_adapter<Stage> target(std::move(stage), hidden, divisor);
  measured.measure(stage_piece, {profile_size::tokens, sizes, {1}}, target);
  write_profile_file(path, measured.table());
  auto fitted = measured.fit();
  for (const auto& curve : fitted.curves()) {
    const auto line = [&](const char* pass, const quadratic_fit& fit) {
      out << "  " << pass << ": " << fit.a * 1e6 << " + " << fit.b * 1e6 << " n + " << fit.c * 1e6
          << " n^2 us (rms relative error " << fit.rms_relative_error * 100 << "%)\n";
    };
    out << "wrote " << path << " (" << sizes.size() << " sizes); fitted per toy stage, n = toy tokens:\n";
    line("forward ", curve.forward);
    line("backward", curve.backward);
  }
  return fitted;
}

}  // namespace dflop::toy
