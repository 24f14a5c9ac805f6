// SPDX-License-Identifier: Apache-2.0
#include "toolchain_probe.hpp"

#include <catch2/catch.hpp>

#include <nccl.h>

#include <numeric>

TEST_CASE("NCCL links and reports the version it was built with", "[cuda]") {
  const int version = dflop::test::nccl_runtime_version();
  // Runtime and headers come from the same toolkit: NCCL_VERSION_CODE is the header's code.
  CHECK(version == NCCL_VERSION_CODE);
}

TEST_CASE("CUB exclusive scan on the device matches the host", "[cuda][gpu]") {
  std::vector<std::int64_t> sizes{730, 0, 6561, 210, 6720, 1, 42};
  std::vector<std::int64_t> expected(sizes.size());
  std::exclusive_scan(sizes.begin(), sizes.end(), expected.begin(), std::int64_t{0});
  CHECK(dflop::test::device_exclusive_scan(sizes) == expected);
}
