// SPDX-License-Identifier: Apache-2.0
// The executor on one GPU: CUDA stages on a compute stream, a 1-rank NCCL
// communicator, activations handed over between a rank's chunks; results match
// the host reference (within rounding: the device sums with atomics).
#include "exec_gpu.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dflop;

test::affine_result test::run_affine_on_host(std::uint32_t stages, std::uint32_t microbatches) {
  affine_result result;
  result.gradients.assign(2 * stages, 0.0);
  const std::uint32_t tokens = 2 * 64;  // two samples of 64 tokens per microbatch
  for (std::uint32_t j = 0; j < microbatches; ++j) {
    std::vector<std::vector<double>> x(stages + 1, std::vector<double>(tokens));
    for (std::uint32_t i = 0; i < tokens; ++i) x[0][i] = std::sin(0.01 * static_cast<double>(2 * j * 64 + i));
    for (std::uint32_t s = 0; s < stages; ++s)
      for (std::uint32_t i = 0; i < tokens; ++i) x[s + 1][i] = (0.9 + 0.05 * s) * x[s][i] + 0.01 * s;
    std::vector<double> dy = x[stages];
    for (double y : x[stages]) result.loss += 0.5 * y * y;
    for (std::uint32_t s = stages; s-- > 0;) {
      for (std::uint32_t i = 0; i < tokens; ++i) {
        result.gradients[2 * s] += dy[i] * x[s][i];
        result.gradients[2 * s + 1] += dy[i];
        dy[i] *= 0.9 + 0.05 * s;
      }
    }
  }
  return result;
}

TEST_CASE("the host reference of the GPU test is self-consistent", "[exec]") {
  const auto one = test::run_affine_on_host(1, 1);
  CHECK(one.loss > 0);
  CHECK(one.gradients.size() == 2);
}

TEST_CASE("the executor runs CUDA stages over NCCL and matches the host reference", "[exec][gpu]") {
  for (const auto& [name, chunks] : {std::pair{"1f1b", 1U}, std::pair{"interleaved", 2U}, std::pair{"interleaved", 4U}}) {
    INFO(name << " chunks " << chunks);
    const auto gpu = test::run_affine_on_gpu(name, chunks, 4);
    const auto host = test::run_affine_on_host(chunks, 4);
    CHECK(gpu.loss == Approx(host.loss).epsilon(1e-12));
    REQUIRE(gpu.gradients.size() == host.gradients.size());
    for (std::size_t i = 0; i < host.gradients.size(); ++i) CHECK(gpu.gradients[i] == Approx(host.gradients[i]).epsilon(1e-12));
  }
}
