// SPDX-License-Identifier: Apache-2.0
//! \file
//! How a failed step reads: the original error of the stage that threw (rank,
//! stage, op, microbatch, message), and what the other ranks see when they are
//! stopped because of it (or because the watchdog saw no progress).
#pragma once

#include <dflop/error.hpp>
#include <dflop/schedule/op.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <utility>

namespace dflop {

//! Default watchdog: a rank that waits this long for a message or a collective
//! gives up and stops every rank.
inline constexpr double default_watchdog_seconds = 60.0;

//! An exception thrown by a stage functor, with where it happened. `what()` reads
//! "rank R, stage S, F of microbatch J: MESSAGE".
class stage_failure : public error {
public:
  //! Records where `message` was thrown.
  stage_failure(int rank, std::uint32_t stage, op_kind kind, std::uint32_t microbatch, std::string message)
      : error(format(rank, stage, kind, microbatch, message)),
        rank_(rank),
        stage_(stage),
        kind_(kind),
        microbatch_(microbatch),
        message_(std::move(message)) {}

  //! World rank that ran the stage.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  //! Model stage that threw.
  [[nodiscard]] std::uint32_t stage() const noexcept { return stage_; }
  //! Op that threw (F, B or W).
  [[nodiscard]] op_kind kind() const noexcept { return kind_; }
  //! Microbatch it ran.
  [[nodiscard]] std::uint32_t microbatch() const noexcept { return microbatch_; }
  //! The original exception's message.
  [[nodiscard]] const std::string& message() const noexcept { return message_; }

private:
  static std::string format(int rank, std::uint32_t stage, op_kind kind, std::uint32_t microbatch,
                            const std::string& message) {
    std::string text("rank ");
    text.append(std::to_string(rank)).append(", stage ").append(std::to_string(stage)).append(", ");
    text.push_back(kind_letter(kind));
    text.append(" of microbatch ").append(std::to_string(microbatch)).append(": ").append(message);
    return text;
  }
  int rank_;
  std::uint32_t stage_;
  op_kind kind_;
  std::uint32_t microbatch_;
  std::string message_;
};

//! Thrown on a rank stopped because another rank failed; `what()` carries the
//! original failure's text. The in-process runner rethrows the original instead.
class pipeline_aborted : public error {
public:
  using error::error;
};

//! A wait that saw no progress within the watchdog (a rank hung or died).
class watchdog_timeout : public error {
public:
  using error::error;
};

//! "dflop: rank R: WHAT" for the failure a communicator aborts on (the
//! exception's message, "aborted" when there is none): what every rank prints
//! before it takes the job down, so the original error is never lost.
[[nodiscard]] inline std::string describe_failure(int rank, std::exception_ptr failure) noexcept {
  std::string text("dflop: rank ");
  text.append(std::to_string(rank)).append(": ");
  try {
    if (failure) std::rethrow_exception(failure);
    text.append("aborted");
  } catch (const std::exception& e) {
    text.append(e.what());
  } catch (...) {
    text.append("unknown exception");
  }
  return text;
}

}  // namespace dflop
