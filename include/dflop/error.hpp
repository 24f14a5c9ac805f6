// SPDX-License-Identifier: Apache-2.0
//! \file
//! dflop's one error story: every failure is a `dflop::error`; bad user input is an
//! `input_error` that says what was wrong, where (source and line) and why.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! Base of every exception dflop throws.
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

//! Bad input from a user: a file, a flag or an argument. `what()` reads
//! "SOURCE:LINE: REASON" (or "SOURCE: REASON" when no line applies).
class input_error : public error {
public:
  //! \param source a file name or the name of the argument/flag
  //! \param line 1-based line number, or 0 when it does not apply
  //! \param reason what is wrong, in words
  input_error(std::string source, std::size_t line, std::string reason)
      : error(format(source, line, reason)), source_(std::move(source)), line_(line), reason_(std::move(reason)) {}

  //! The file or argument that was wrong.
  [[nodiscard]] const std::string& source() const noexcept { return source_; }
  //! 1-based line number; 0 when none applies.
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  //! Why the input was rejected.
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }

private:
  static std::string format(const std::string& source, std::size_t line, const std::string& reason) {
    // Built by append: GCC 12 at -O3 warns falsely (-Wrestrict) on chained operator+ here.
    std::string text;
    text.reserve(source.size() + reason.size() + 24);
    text.append(source);
    if (line > 0) text.append(":").append(std::to_string(line));
    text.append(": ").append(reason);
    return text;
  }
  std::string source_;
  std::size_t line_;
  std::string reason_;
};

//! Samples that no configuration can hold in memory, even alone in a
//! microbatch with every memory saver: `what()` names the first ten, the count
//! and the way out; `sample_ids()` holds them all.
class unfittable_samples_error : public input_error {
public:
  //! \param source where the samples came from (a file, "workload")
  //! \param finding which samples cannot fit, and where
  //! \param way_out what the caller can do about it
  //! \param sample_ids every unfittable sample's id, in workload order
  unfittable_samples_error(std::string source, std::string finding, const std::string& way_out,
                           std::vector<std::string> sample_ids)
      : input_error(std::move(source), 0, finding + ". " + way_out), finding_(std::move(finding)),
        sample_ids_(std::move(sample_ids)) {}

  //! The samples that cannot fit and where, without the way out (a tool adds its own).
  [[nodiscard]] const std::string& finding() const noexcept { return finding_; }
  //! Every unfittable sample's id, in workload order.
  [[nodiscard]] const std::vector<std::string>& sample_ids() const noexcept { return sample_ids_; }

private:
  std::string finding_;
  std::vector<std::string> sample_ids_;
};

//! A request no plan, packing or schedule can satisfy (e.g. memory, bin caps).
class infeasible_error : public error {
public:
  using error::error;
};

//! A global batch that cannot be packed so that every microbatch fits the
//! plan's memory budget: `what()` names the samples involved and the stage;
//! `sample_ids()` holds them, `excess_bytes()` says by how much the best
//! packing found missed (the planner reports its closest miss with it).
class memory_cap_error : public infeasible_error {
public:
  //! \param reason what does not fit, where, by how much
  //! \param sample_ids the samples of the microbatches over the budget, heaviest first
  //! \param excess_bytes bytes over the budget on the fullest stage
  memory_cap_error(const std::string& reason, std::vector<std::string> sample_ids, double excess_bytes)
      : infeasible_error(reason), sample_ids_(std::move(sample_ids)), excess_bytes_(excess_bytes) {}

  //! The samples of the microbatches over the budget, heaviest first.
  [[nodiscard]] const std::vector<std::string>& sample_ids() const noexcept { return sample_ids_; }
  //! Bytes over the budget on the fullest stage of the best packing found.
  [[nodiscard]] double excess_bytes() const noexcept { return excess_bytes_; }

private:
  std::vector<std::string> sample_ids_;
  double excess_bytes_;
};

}  // namespace dflop
