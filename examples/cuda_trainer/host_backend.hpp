// SPDX-License-Identifier: Apache-2.0
//! \file
//! The host backend of `model_stage`: the kernels' functors run in loops on the
//! calling thread, memory is host memory. With `inproc_communicator` it runs the
//! trainer's exact stage code on CPUs: how the stage is checked where there is no GPU.
#pragma once

#include <dflop/exec/stage.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

namespace dflop::cuda_trainer {

//! Runs `model_stage` on the host (see the file comment).
struct host_backend {
  //! Host stages run on their thread.
  using resource_type = host_thread;

  //! Owning memory of doubles.
  class array {
  public:
    //! Holds `values`.
    explicit array(std::vector<double> values) : values_(std::move(values)) {}
    [[nodiscard]] double* data() noexcept { return values_.data(); }
    [[nodiscard]] const double* data() const noexcept { return values_.data(); }
    [[nodiscard]] std::size_t size() const noexcept { return values_.size(); }
    [[nodiscard]] bool empty() const noexcept { return values_.empty(); }

  private:
    std::vector<double> values_;
  };

  //! Runs `body(i)` for i in [0, count).
  template <class Body>
  void launch(resource_type, std::size_t count, const Body& body) const {
    for (std::size_t i = 0; i < count; ++i) body(i);
  }
  //! Copies a host table into `scratch` (executor memory); returns it.
  const void* table(const void* values, std::size_t bytes, std::byte* scratch, resource_type) const {
    if (bytes > 0) std::memcpy(scratch, values, bytes);
    return scratch;
  }
  //! Copies `bytes` between buffers.
  void copy(void* to, const void* from, std::size_t bytes, resource_type) const {
    if (bytes > 0) std::memcpy(to, from, bytes);
  }
  //! Zeroes `count` values.
  void zero(double* values, std::size_t count, resource_type) const { std::fill(values, values + count, 0.0); }
  //! Reads one value.
  [[nodiscard]] double read(const double* value, resource_type) const { return *value; }
  //! After a step's work is done (nothing staged here).
  void end_step() const noexcept {}
};

}  // namespace dflop::cuda_trainer
