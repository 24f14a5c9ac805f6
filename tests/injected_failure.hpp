// SPDX-License-Identifier: Apache-2.0
// What every fault-injection test expects of the error that comes back: the
// stage, op and microbatch (1) where "injected fault" was thrown, and that message.
#pragma once

#include <dflop/exec/failure.hpp>
#include <dflop/schedule/op.hpp>

#include <catch2/catch.hpp>

#include <cstdint>

namespace dflop::test {

inline void check_injected_failure(const stage_failure& failure, std::uint32_t stage, op_kind kind) {
  CHECK(failure.stage() == stage);
  CHECK(failure.kind() == kind);
  CHECK(failure.microbatch() == 1);
  CHECK(failure.message() == "injected fault");
}

}  // namespace dflop::test
