// SPDX-License-Identifier: Apache-2.0
//! \file
//! The profiler: times user code over a grid of microbatch sizes x TP degrees
//! (warm-up runs, then repeats; median and spread), optionally probes memory
//! around each forward pass, and collects a `profile` (cost/profile.hpp) that
//! `write_profile` saves as the CSV `table_cost_model` reads and that
//! `fitted_cost_model::from_profile` fits.
//!
//!     dflop::profiler<> profiler({.warmup = 2, .repeats = 7});
//!     profiler.measure({dflop::module_kind::llm, dflop::module_part::layer},
//!                      {dflop::profile_size::tokens, {512, 1024, 2048, 4096}, {1, 2}}, my_layer);
//!     dflop::write_profile_file("llm.csv", profiler.table());
//!     auto fitted = profiler.fit();
#pragma once

#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/cost/profile.hpp>
#include <dflop/error.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/runtime/timer.hpp>
#include <dflop/runtime/timing_summary.hpp>
#include <dflop/util/progress.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! One grid point, as the profiled code sees it.
struct profile_case {
  module_piece piece;                             //!< the module part being profiled
  int tp = 1;                                     //!< TP degree to run at
  profile_size size_kind = profile_size::tokens;  //!< what `size` counts
  double size = 0;                                //!< tokens (one sequence for the LLM) or encoder items

  //! `size` rounded to the nearest integer (sizes are counts).
  [[nodiscard]] std::int64_t count() const noexcept { return static_cast<std::int64_t>(std::llround(size)); }

  friend bool operator==(const profile_case&, const profile_case&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const profile_case& c) {
  return out << "profile_case{" << c.piece << ", tp=" << c.tp << ", " << c.size_kind << "=" << c.size << "}";
}

//! The sizes and TP degrees one part is profiled at (every size at every degree).
struct profile_grid {
  profile_size size = profile_size::tokens;  //!< what `sizes` count (LLM parts: tokens only)
  std::vector<double> sizes{};               //!< > 0, distinct; at least 3 for a quadratic fit
  std::vector<int> tp_degrees{1};            //!< in [1, 1024], distinct

  friend bool operator==(const profile_grid&, const profile_grid&) = default;
};

//! Knobs of the profiler.
struct profiler_options {
  int warmup = 2;   //!< untimed runs per grid point before the timed ones, >= 0
  int repeats = 5;  //!< timed runs per grid point, >= 1
  //! Host memory hook: bytes in use now. When set, it is read before and after each
  //! timed forward; the median difference becomes the point's activation bytes. When
  //! empty, a timer with `memory_in_use()` (CUDA) is used instead; otherwise no memory.
  std::function<double()> memory_probe{};
  std::ostream* progress = nullptr;   //!< progress output (null: none)
  bool progress_interactive = false;  //!< redraw in place (a terminal) or print lines
  std::string source = "profiler";    //!< the profile's `source` (names it in later errors)
};

//! Profiled code with both passes: `forward(c)` and `backward(c)`, each run once
//! per call for the grid point `c` (a backward always follows its forward).
//! An optional `prepare(c)` runs once per grid point, untimed, before the warm-up
//! (allocate inputs, set up the TP group).
template <class Target>
concept profiled_stage = requires(Target& target, const profile_case& c) {
  target.forward(c);
  target.backward(c);
};

//! Any callable `f(c)`: timed as the forward pass; the backward is recorded as 0.
template <class Target>
concept profiled_callable = std::invocable<Target&, const profile_case&>;

//! Measurements of one grid point, beyond the medians the profile keeps.
struct profiled_point {
  profile_case at;                          //!< the grid point
  timing_summary forward;                   //!< forward seconds over the repeats
  timing_summary backward;                  //!< backward seconds over the repeats (0 for a callable)
  std::optional<timing_summary> activation_bytes{};  //!< memory left by the forward, when probed

  friend bool operator==(const profiled_point&, const profiled_point&) = default;
};

//! Times user code over grids and collects the profile. One profile has one size
//! column, so every `measure` call of one profiler uses the same `profile_size`.
//! Not thread-safe; the profiled code runs on the calling thread.
template <profiling_timer Timer = steady_clock_timer>
class profiler {
public:
  //! \throws input_error naming the option when `warmup < 0` or `repeats < 1`.
  explicit profiler(profiler_options options = {}, Timer timer = Timer())
      : options_(std::move(options)), timer_(std::move(timer)) {
    if (options_.warmup < 0)
      throw input_error("profiler_options::warmup", 0, "must be >= 0, got " + std::to_string(options_.warmup));
    if (options_.repeats < 1)
      throw input_error("profiler_options::repeats", 0, "must be >= 1, got " + std::to_string(options_.repeats));
    table_.source = options_.source;
  }

  //! Profiles `target` as `piece` at every (TP degree, size) of `grid`, degrees outer,
  //! sizes inner, in the order given; appends one curve per degree to `table()`.
  //! \throws input_error naming the grid entry that is wrong (non-positive or repeated
  //! size or degree, `items` for an LLM part, a size kind other than earlier calls', a
  //! (part, tp) profiled already); exceptions of `target` propagate unchanged, and
  //! then nothing of this call is kept.
  template <class Target>
  void measure(module_piece piece, const profile_grid& grid, Target&& target) {
    static_assert(profiled_stage<std::remove_reference_t<Target>> ||
                      profiled_callable<std::remove_reference_t<Target>>,
                  "dflop::profiler::measure: the target must have `forward(const dflop::profile_case&)` and "
                  "`backward(const dflop::profile_case&)` members, or be callable as `target(const "
                  "dflop::profile_case&)`");
    validate(piece, grid);
    progress_bar bar(options_.progress, "profiling " + std::string(part_name(piece.kind, piece.part)),
                     grid.sizes.size() * grid.tp_degrees.size(), options_.progress_interactive);
    // Collected apart and committed at the end: a target that throws leaves the profiler as it was.
    std::vector<profile_curve> curves;
    std::vector<profiled_point> points;
    std::size_t line = next_line_;
    for (int tp : grid.tp_degrees) {
      profile_curve curve{piece, tp, grid.size, {}, table_.source};
      for (double size : grid.sizes) {
        const profile_case c{piece, tp, grid.size, size};
        profiled_point measured = measure_point(c, target);
        profile_point point;
        point.size = size;
        point.forward_seconds = measured.forward.median;
        point.backward_seconds = measured.backward.median;
        if (measured.activation_bytes) point.activation_bytes = std::max(0.0, measured.activation_bytes->median);
        point.line = line++;
        curve.points.push_back(point);
        points.push_back(std::move(measured));
        bar.advance();
      }
      curves.push_back(std::move(curve));
    }
    if (table_.curves.empty()) table_.size = grid.size;
    for (auto& curve : curves) table_.curves.push_back(std::move(curve));
    for (auto& point : points) points_.push_back(std::move(point));
    next_line_ = line;
  }

  //! Everything measured so far: medians per point, in the order measured (the
  //! order `write_profile` writes and `read_profile` reads back; point lines match).
  [[nodiscard]] const profile& table() const noexcept { return table_; }

  //! Median and spread of every point, in the order of `table()`'s points.
  [[nodiscard]] std::span<const profiled_point> points() const noexcept { return points_; }

  //! Fits `a + b n + c n^2` to every curve (`fitted_cost_model::from_profile`).
  //! \throws input_error when a curve has fewer than 3 sizes.
  [[nodiscard]] fitted_cost_model fit() const { return fitted_cost_model::from_profile(table_); }

  //! The options in use.
  [[nodiscard]] const profiler_options& options() const noexcept { return options_; }
  //! The timer policy (e.g. to reach a CUDA timer's stream).
  [[nodiscard]] Timer& timer() noexcept { return timer_; }

private:
  void validate(module_piece piece, const profile_grid& grid) const {
    const std::string where = "profile_grid for '" + std::string(part_name(piece.kind, piece.part)) + "'";
    if (grid.sizes.empty()) throw input_error(where, 0, "no sizes to profile");
    if (grid.tp_degrees.empty()) throw input_error(where, 0, "no TP degrees to profile");
    if (grid.size == profile_size::items && piece.kind == module_kind::llm)
      throw input_error(where, 0, "an LLM part is profiled by tokens, not items");
    if (!table_.curves.empty() && grid.size != table_.size)
      throw input_error(where, 0,
                        "sizes count " + std::string(to_string(grid.size)) + " but this profiler's table counts " +
                            std::string(to_string(table_.size)) + " (one profile has one size column)");
    for (std::size_t i = 0; i < grid.sizes.size(); ++i) {
      if (!std::isfinite(grid.sizes[i]) || !(grid.sizes[i] > 0))
        throw input_error(where, 0, "sizes[" + std::to_string(i) + "] = " + std::to_string(grid.sizes[i]) +
                                        ": sizes must be finite and > 0");
      for (std::size_t j = 0; j < i; ++j)
        if (grid.sizes[j] == grid.sizes[i])
          throw input_error(where, 0, "sizes[" + std::to_string(i) + "] repeats sizes[" + std::to_string(j) + "] (" +
                                          std::to_string(grid.sizes[i]) + ")");
    }
    for (std::size_t i = 0; i < grid.tp_degrees.size(); ++i) {
      const int tp = grid.tp_degrees[i];
      if (tp < 1 || tp > 1024)
        throw input_error(where, 0, "tp_degrees[" + std::to_string(i) + "] = " + std::to_string(tp) +
                                        ": TP degrees must be in [1, 1024]");
      for (std::size_t j = 0; j < i; ++j)
        if (grid.tp_degrees[j] == tp)
          throw input_error(where, 0, "tp_degrees[" + std::to_string(i) + "] repeats tp_degrees[" +
                                          std::to_string(j) + "] (" + std::to_string(tp) + ")");
      for (const auto& curve : table_.curves)
        if (curve.piece == piece && curve.tp == tp)
          throw input_error(where, 0, "tp " + std::to_string(tp) + " was profiled already for this part");
    }
  }

  [[nodiscard]] bool probes_memory() const {
    if (options_.memory_probe) return true;
    return memory_probing_timer<Timer>;
  }

  [[nodiscard]] double memory_now() {
    if (options_.memory_probe) return options_.memory_probe();
    if constexpr (memory_probing_timer<Timer>) return static_cast<double>(timer_.memory_in_use());
    return 0;
  }

  template <class Target>
  profiled_point measure_point(const profile_case& c, Target& target) {
    if constexpr (profiled_stage<Target>) {
      if constexpr (requires { target.prepare(c); }) target.prepare(c);
    }
    const auto run_forward = [&] {
      if constexpr (profiled_stage<Target>) target.forward(c);
      else std::invoke(target, c);
    };
    const auto run_backward = [&] {
      if constexpr (profiled_stage<Target>) target.backward(c);
    };
    for (int i = 0; i < options_.warmup; ++i) {
      run_forward();
      run_backward();
    }
    const bool memory = probes_memory();
    const auto repeats = static_cast<std::size_t>(options_.repeats);
    std::vector<double> forward, backward, bytes;
    forward.reserve(repeats);
    backward.reserve(repeats);
    for (std::size_t i = 0; i < repeats; ++i) {
      const double before = memory ? memory_now() : 0.0;
      forward.push_back(static_cast<double>(timer_.measure(run_forward)));
      if (memory) bytes.push_back(memory_now() - before);
      if constexpr (profiled_stage<Target>) backward.push_back(static_cast<double>(timer_.measure(run_backward)));
      else backward.push_back(0.0);
    }
    profiled_point point{c, summarize(forward), summarize(backward), std::nullopt};
    if (memory) point.activation_bytes = summarize(bytes);
    return point;
  }

  profiler_options options_;
  Timer timer_;
  profile table_;
  std::vector<profiled_point> points_;
  std::size_t next_line_ = 2;  // the line write_profile gives the next point (the header is line 1)
};

}  // namespace dflop
