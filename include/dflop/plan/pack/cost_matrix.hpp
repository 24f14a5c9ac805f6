// SPDX-License-Identifier: Apache-2.0
//! \file
//! The packers' input: one cost vector per sample (N samples x D dimensions,
//! e.g. encoder and LLM seconds), stored row-major and checked once on entry
//! so the algorithms never meet a negative, infinite or NaN cost.
#pragma once

#include <dflop/error.hpp>

#include <algorithm>
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
      : samples_(samples), dimensions_(dimensions), values_(std::move(values)), view_(values_) {
    check();
  }

  //! A matrix that reads `values` in place instead of copying them (bindings
  //! over a caller's array, e.g. NumPy): the caller keeps them alive and
  //! unchanged while this matrix or a copy of it is used. Checked as above.
  [[nodiscard]] static cost_matrix borrow(std::size_t samples, std::size_t dimensions, std::span<const double> values) {
    cost_matrix matrix;
    matrix.samples_ = samples;
    matrix.dimensions_ = dimensions;
    matrix.view_ = values;
    matrix.borrowed_ = true;
    matrix.check();
    return matrix;
  }

  //! A copy owns its values unless the original borrowed them (then both read the caller's).
  cost_matrix(const cost_matrix& other)
      : samples_(other.samples_), dimensions_(other.dimensions_), values_(other.values_),
        view_(other.borrowed_ ? other.view_ : std::span<const double>(values_)), borrowed_(other.borrowed_) {}
  //! Moving keeps the storage (a vector's move keeps its buffer); the source is left empty.
  cost_matrix(cost_matrix&& other) noexcept
      : samples_(other.samples_), dimensions_(other.dimensions_), values_(std::move(other.values_)),
        view_(other.view_), borrowed_(other.borrowed_) {
    other.reset();
  }
  cost_matrix& operator=(const cost_matrix& other) {
    if (this != &other) *this = cost_matrix(other);
    return *this;
  }
  cost_matrix& operator=(cost_matrix&& other) noexcept {
    if (this == &other) return *this;
    samples_ = other.samples_;
    dimensions_ = other.dimensions_;
    values_ = std::move(other.values_);
    view_ = other.view_;
    borrowed_ = other.borrowed_;
    other.reset();
    return *this;
  }
  ~cost_matrix() = default;

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
    return view_[sample * dimensions_ + dimension];
  }
  //! The cost vector of one sample.
  [[nodiscard]] std::span<const double> row(std::size_t sample) const noexcept {
    return view_.subspan(sample * dimensions_, dimensions_);
  }
  //! All values, row-major.
  [[nodiscard]] std::span<const double> values() const noexcept { return view_; }

  //! Hands the value storage back (the matrix is left empty), so a caller that
  //! rebuilds a matrix every call can recycle one buffer instead of allocating.
  //! A borrowed matrix hands back a copy of the caller's values.
  [[nodiscard]] std::vector<double> release_values() && {
    std::vector<double> values = borrowed_ ? std::vector<double>(view_.begin(), view_.end()) : std::move(values_);
    reset();
    return values;
  }

  //! Same shape and values (owned or borrowed alike).
  friend bool operator==(const cost_matrix& a, const cost_matrix& b) {
    return a.samples_ == b.samples_ && a.dimensions_ == b.dimensions_ && std::ranges::equal(a.view_, b.view_);
  }

private:
  void check() const {
    if (dimensions_ == 0) throw input_error("cost matrix", 0, "needs at least one cost dimension");
    if (view_.size() != samples_ * dimensions_)
      throw input_error("cost matrix", 0,
                        "expected " + std::to_string(samples_) + " x " + std::to_string(dimensions_) + " = " +
                            std::to_string(samples_ * dimensions_) + " values, got " + std::to_string(view_.size()));
    for (std::size_t i = 0; i < view_.size(); ++i) {
      const double value = view_[i];
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
  void reset() noexcept {
    samples_ = 0;
    values_.clear();
    view_ = {};
    borrowed_ = false;
  }

  std::size_t samples_ = 0;
  std::size_t dimensions_ = 1;
  std::vector<double> values_;     //!< owned storage (empty when borrowed)
  std::span<const double> view_;   //!< what the accessors read: `values_` or the caller's values
  bool borrowed_ = false;          //!< whether `view_` is the caller's
};

}  // namespace dflop
