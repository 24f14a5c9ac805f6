// SPDX-License-Identifier: Apache-2.0
//! \file
//! Progress output for long work (plan searches, profiling sweeps). On a
//! terminal it redraws one bar in place; elsewhere (logs, CI) it prints a line
//! every tenth of the way, so logs stay short but still show the job is alive.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <ostream>
#include <string>

#include <unistd.h>

namespace dflop {

//! Whether standard error is a terminal (decides between in-place and line output).
[[nodiscard]] inline bool stderr_is_terminal() noexcept { return ::isatty(STDERR_FILENO) == 1; }

//! Reports progress of `total` units of work to a stream; does nothing when the
//! stream is null. Not thread-safe: one reporter belongs to one thread.
class progress_bar {
public:
  //! \param out where to draw (null: silent)  \param label what is being done
  //! \param total units of work  \param interactive redraw in place (a terminal) or print lines
  progress_bar(std::ostream* out, std::string label, std::size_t total, bool interactive)
      : out_(out), label_(std::move(label)), total_(std::max<std::size_t>(total, 1)), interactive_(interactive),
        started_(clock::now()) {}

  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  ~progress_bar() { finish(); }

  //! Marks `units` more units done and redraws when due.
  void advance(std::size_t units = 1) {
    done_ = std::min(total_, done_ + units);
    if (out_ == nullptr || finished_) return;
    if (interactive_) {
      const auto now = clock::now();
      if (now - last_draw_ >= std::chrono::milliseconds(100) || done_ == total_) {
        last_draw_ = now;
        draw_in_place();
      }
    } else {
      const std::size_t tenth = done_ * 10 / total_;
      if (tenth > last_tenth_) {
        last_tenth_ = tenth;
        *out_ << label_ << ": " << tenth * 10 << "% (" << done_ << "/" << total_ << ")\n" << std::flush;
      }
    }
  }

  //! Completes the bar (draws 100% and a newline on a terminal); idempotent.
  void finish() {
    if (out_ == nullptr || finished_) return;
    finished_ = true;
    if (interactive_) {
      draw_in_place();
      *out_ << "\n" << std::flush;
    }
  }

  //! Units done so far.
  [[nodiscard]] std::size_t done() const noexcept { return done_; }

private:
  using clock = std::chrono::steady_clock;

  void draw_in_place() {
    constexpr std::size_t width = 30;
    const std::size_t filled = done_ * width / total_;
    const double seconds = std::chrono::duration<double>(clock::now() - started_).count();
    char timing[32];
    std::snprintf(timing, sizeof timing, "%.1f s", seconds);
    *out_ << "\r" << label_ << " [" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << done_
          << "/" << total_ << " " << timing << std::flush;
  }

  std::ostream* out_;
  std::string label_;
  std::size_t total_;
  bool interactive_;
  std::size_t done_ = 0;
  std::size_t last_tenth_ = 0;
  bool finished_ = false;
  clock::time_point started_;
  clock::time_point last_draw_{};
};

}  // namespace dflop
