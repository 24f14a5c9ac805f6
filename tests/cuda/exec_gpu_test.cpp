// SPDX-License-Identifier: Apache-2.0
// The executor on one GPU: CUDA stages on compute streams, over a 1-rank NCCL
// communicator (activations handed over between a rank's chunks) and over the
// stream communicator (a thread and a stream per rank, device-to-device messages,
// data-parallel sums); results match the host reference (within rounding: the
// device sums with atomics).
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

namespace {
// Loss and every replica's gradients within 1e-12 relative of the host reference.
void check_against_host(const test::affine_result& gpu, const test::affine_result& host) {
  CHECK(gpu.loss == Approx(host.loss).epsilon(1e-12));
  for (double loss : gpu.rank_losses) CHECK(loss == gpu.loss);  // one member-order sum, the same everywhere
  REQUIRE_FALSE(gpu.replica_gradients.empty());
  for (std::size_t r = 0; r < gpu.replica_gradients.size(); ++r) {
    INFO("replica " << r);
    const auto& gradients = gpu.replica_gradients[r];
    REQUIRE(gradients.size() == host.gradients.size());
    for (std::size_t i = 0; i < host.gradients.size(); ++i) CHECK(gradients[i] == Approx(host.gradients[i]).epsilon(1e-12));
  }
}
}  // namespace

TEST_CASE("the host reference of the GPU test moves with its parameters", "[exec]") {
  const auto two = test::run_affine_on_host(2, 3);
  const auto three = test::run_affine_on_host(3, 3);
  const auto more = test::run_affine_on_host(2, 4);
  REQUIRE(two.gradients.size() == 4);
  REQUIRE(three.gradients.size() == 6);
  CHECK(more.loss > two.loss);  // one more microbatch adds a positive loss term
  CHECK(two.loss != three.loss);
}

TEST_CASE("the executor runs CUDA stages over NCCL and matches the host reference", "[exec][gpu]") {
  for (const auto& [name, chunks] : {std::pair{"1f1b", 1U}, std::pair{"interleaved", 2U}, std::pair{"interleaved", 4U}}) {
    INFO(name << " chunks " << chunks);
    check_against_host(test::run_affine_on_gpu(name, chunks, 4), test::run_affine_on_host(chunks, 4));
  }
}

TEST_CASE("the executor runs a pipeline over the stage streams of one GPU and matches the host reference",
          "[exec][gpu]") {
  struct shape {
    const char* schedule;
    std::uint32_t ranks, chunks, microbatches, replicas;
  };
  for (const auto& s : {shape{"gpipe", 4, 1, 6, 1}, shape{"1f1b", 4, 1, 8, 1}, shape{"zb-h1", 3, 1, 5, 1},
                        shape{"interleaved", 2, 2, 4, 1}, shape{"1f1b", 2, 1, 4, 2}, shape{"interleaved", 2, 2, 4, 2}}) {
    INFO(s.schedule << ": " << s.ranks << " ranks x " << s.chunks << " chunks, " << s.microbatches
                    << " microbatches, " << s.replicas << " replicas");
    const auto gpu = test::run_affine_on_streams(s.schedule, s.ranks, s.chunks, s.microbatches, s.replicas);
    CHECK(gpu.replica_gradients.size() == s.replicas);
    CHECK(gpu.rank_losses.size() == s.ranks * s.replicas);
    check_against_host(gpu, test::run_affine_on_host(s.ranks * s.chunks, s.microbatches * s.replicas));
  }
}

TEST_CASE("a failing CUDA stage on one stream stops every rank of the GPU pipeline", "[exec][gpu]") {
  CHECK_THROWS_WITH(test::run_failing_stage_on_streams(3, 1), Catch::Contains("stage 1") && Catch::Contains("injected"));
}
