// SPDX-License-Identifier: Apache-2.0
//! \file
//! The packers' input: one cost vector per sample (N samples x D dimensions,
//! e.g. encoder and LLM seconds), stored row-major and checked once on entry
//! so the algorithms never meet a negative, infinite or NaN cost.
#pragma once

#include <dflop/error.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! N samples x D cost dimensions, row-major, every entry finite and >= 0.
class cost_matrix {
public:
  //! An empty matrix (0 samples, 1 dimension).
  cost_matrix() = default;

  //! Takes `values` (samples x dimensions, row-major). Throws `input_error` when
  //! `dimensions` is 0, the size does not match, or a value is negative or not finite.
  cost_matrix(std::size_t samples, std::size_t dimensions, std::vector<double> values)
      : samples_(samples), dimensions_(dimensions), values_(std::move(values)) {
    if (dimensions_ == 0) throw input_error("cost matrix", 0, "needs at least one cost dimension");
    if (values_.size() != samples_ * dimensions_)
      throw input_error("cost matrix", 0,
                        "expected " + std::to_string(samples_) + " x " + std::to_string(dimensions_) + " = " +
                            std::to_string(samples_ * dimensions_) + " values, got " + std::to_string(values_.size()));
    for (std::size_t i = 0; i < values_.size(); ++i) {
      const double value = values_[i];
      if (!std::isfinite(value) || value < 0) {
        std::string reason = "sample ";
        reason.append(std::to_string(i / dimensions_))
            .append(", dimension ")
            .append(std::to_string(i % dimensions_))
            .append(": cost ")
            .append(std::to_string(value))
            .append(std::isfinite(value) ? " is negative" : " is not finite");
        throw input_error("cost matrix", 0, reason);
      }
    }
  }

  //! Builds a matrix from rows of equal length (tests, small examples).
  [[nodiscard]] static cost_matrix from_rows(const std::vector<std::vector<double>>& rows) {
    const std::size_t dimensions = rows.empty() ? 1 : rows.front().size();
    std::vector<double> values;
    values.reserve(rows.size() * dimensions);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].size() != dimensions)
        throw input_error("cost matrix", 0,
                          "row " + std::to_string(i) + " has " + std::to_string(rows[i].size()) +
                              " costs, row 0 has " + std::to_string(dimensions));
      values.insert(values.end(), rows[i].begin(), rows[i].end());
    }
    return cost_matrix(rows.size(), dimensions, std::move(values));
  }

  //! Number of samples (rows).
  [[nodiscard]] std::size_t samples() const noexcept { return samples_; }
  //! Number of cost dimensions (columns).
  [[nodiscard]] std::size_t dimensions() const noexcept { return dimensions_; }
  //! Cost of `sample` in `dimension`.
  [[nodiscard]] double operator()(std::size_t sample, std::size_t dimension) const noexcept {
    return values_[sample * dimensions_ + dimension];
  }
  //! The cost vector of one sample.
  [[nodiscard]] std::span<const double> row(std::size_t sample) const noexcept {
    return {values_.data() + sample * dimensions_, dimensions_};
  }
  //! All values, row-major.
  [[nodiscard]] std::span<const double> values() const noexcept { return values_; }

  //! Hands the value storage back (the matrix is left empty), so a caller that
  //! rebuilds a matrix every call can recycle one buffer instead of allocating.
  [[nodiscard]] std::vector<double> release_values() && {
    samples_ = 0;
    return std::move(values_);
  }

  //! Same shape and values.
  friend bool operator==(const cost_matrix&, const cost_matrix&) = default;

private:
  std::size_t samples_ = 0;
  std::size_t dimensions_ = 1;
  std::vector<double> values_;
};

}  // namespace dflop
