// SPDX-License-Identifier: Apache-2.0
//! \file
//! Watches measured iteration times against the plan's prediction and says when
//! they have drifted far enough that the plan should be remade (a different
//! parallel configuration may now be faster). A rolling median ignores the odd
//! slow iteration (a checkpoint, a straggler).
//!
//!     dflop::drift_monitor monitor(plan.chosen.iteration_seconds, {.threshold = 0.15});
//!     if (auto advice = monitor.observe(measured_seconds)) std::cerr << *advice << "\n";
#pragma once

#include <dflop/error.hpp>
#include <dflop/runtime/timing_summary.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace dflop {

//! Knobs of `drift_monitor`.
struct drift_options {
  double threshold = 0.10;     //!< relative drift |median / predicted - 1| that counts, > 0
  std::size_t window = 5;      //!< iterations the rolling median covers, >= 1
  std::size_t min_samples = 3; //!< iterations needed before any verdict, in [1, window]
};

//! The verdict on the recent iterations.
struct drift_status {
  bool drifted = false;          //!< |relative_drift| > threshold (with enough samples)
  double predicted_seconds = 0;  //!< the plan's prediction
  double median_seconds = 0;     //!< rolling median of the measured times (0 before any)
  double relative_drift = 0;     //!< median / predicted - 1 (0 before any)
  std::size_t samples = 0;       //!< iterations in the window

  //! "re-plan: measured X s vs predicted Y s (+Z%)" when drifted, else "".
  [[nodiscard]] std::string recommendation() const {
    if (!drifted) return {};
    char text[160];
    std::snprintf(text, sizeof text, "re-plan: measured %.4g s vs predicted %.4g s (%+.1f%%)", median_seconds,
                  predicted_seconds, relative_drift * 100);
    return text;
  }
};

//! Compares a rolling median of measured iteration times with the plan's predicted
//! iteration time. Not synchronized: one thread observes.
class drift_monitor {
public:
  //! \param predicted_seconds the plan's predicted iteration time, > 0
  //! \throws input_error naming the argument when out of range.
  explicit drift_monitor(double predicted_seconds, drift_options options = {}) : options_(options) {
    if (!(options_.threshold > 0) || !std::isfinite(options_.threshold))
      throw input_error("drift_options::threshold", 0, "must be finite and > 0, got " + std::to_string(options_.threshold));
    if (options_.window < 1) throw input_error("drift_options::window", 0, "must be >= 1");
    if (options_.min_samples < 1 || options_.min_samples > options_.window)
      throw input_error("drift_options::min_samples", 0,
                        "must be in [1, window = " + std::to_string(options_.window) + "], got " +
                            std::to_string(options_.min_samples));
    reset(predicted_seconds);
  }

  //! Adds one measured iteration time. Returns the recommendation text when the
  //! rolling median now drifts beyond the threshold, else nullopt.
  //! \throws input_error when `measured_seconds` is negative or not finite.
  std::optional<std::string> observe(double measured_seconds) {
    if (!std::isfinite(measured_seconds) || measured_seconds < 0)
      throw input_error("drift_monitor::observe", 0,
                        "measured iteration time must be finite and >= 0, got " + std::to_string(measured_seconds));
    recent_.push_back(measured_seconds);
    while (recent_.size() > options_.window) recent_.pop_front();
    const drift_status now = status();
    if (!now.drifted) return std::nullopt;
    return now.recommendation();
  }

  //! The verdict on the current window.
  [[nodiscard]] drift_status status() const {
    drift_status now;
    now.predicted_seconds = predicted_;
    now.samples = recent_.size();
    if (recent_.empty()) return now;
    const std::vector<double> values(recent_.begin(), recent_.end());
    now.median_seconds = summarize(values).median;
    now.relative_drift = now.median_seconds / predicted_ - 1;
    now.drifted = recent_.size() >= options_.min_samples && std::abs(now.relative_drift) > options_.threshold;
    return now;
  }

  //! Starts over with a new prediction (after re-planning): forgets the window.
  //! \throws input_error when `predicted_seconds` is not finite and > 0.
  void reset(double predicted_seconds) {
    if (!std::isfinite(predicted_seconds) || !(predicted_seconds > 0))
      throw input_error("drift_monitor", 0,
                        "predicted iteration time must be finite and > 0, got " + std::to_string(predicted_seconds));
    predicted_ = predicted_seconds;
    recent_.clear();
  }

  //! The options in use.
  [[nodiscard]] const drift_options& options() const noexcept { return options_; }

private:
  drift_options options_;
  double predicted_ = 0;
  std::deque<double> recent_;
};

}  // namespace dflop
