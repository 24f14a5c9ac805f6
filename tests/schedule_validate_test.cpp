// SPDX-License-Identifier: Apache-2.0
// validate() rejects broken schedules with messages that say what and where.
#include <dflop/schedule.hpp>

#include <catch2/catch.hpp>

#include <utility>

using namespace dflop;

TEST_CASE("validate names a duplicate, a missing and a misplaced op", "[schedule]") {
  auto s = one_f_one_b{}.make({2, 2});  // rank 0: F0 F1 B0 B1; rank 1: F0 B0 F1 B1
  SECTION("duplicate") {
    s.rank_ops[0][1] = s.rank_ops[0][0];
    CHECK_THROWS_WITH(validate(s), "schedule '1f1b': rank 0 op 1 (F0 stage 0): appears twice (first at rank 0 op 0 "
                                   "(F0 stage 0))");
  }
  SECTION("missing") {
    s.rank_ops[1].pop_back();
    CHECK_THROWS_WITH(validate(s), "schedule '1f1b': op B1 of stage 1 is missing (rank 1)");
  }
  SECTION("wrong rank") {
    s.rank_ops[0][0].stage = 1;
    CHECK_THROWS_WITH(validate(s), Catch::Contains("stage belongs to another rank"));
  }
  SECTION("weight op without a split backward") {
    s.rank_ops[0][0].kind = op_kind::weight;
    CHECK_THROWS_WITH(validate(s), Catch::Contains("weight-gradient op in a schedule whose backward is not split"));
  }
  SECTION("out of range") {
    s.rank_ops[1][0].microbatch = 7;
    CHECK_THROWS_WITH(validate(s), Catch::Contains("microbatch out of range"));
  }
  SECTION("wrong number of rank lists") {
    s.rank_ops.pop_back();
    CHECK_THROWS_WITH(validate(s), "schedule '1f1b': has 1 op lists for 2 ranks");
  }
}

TEST_CASE("validate reports a deadlock and what each stuck rank waits for", "[schedule]") {
  auto s = one_f_one_b{}.make({2, 2});
  // Rank 0 wants B0 before its second forward; rank 1 wants F1 before B0: a cycle.
  s.rank_ops[0] = {{op_kind::forward, 0, 0, 0}, {op_kind::backward, 0, 0, 0}, {op_kind::forward, 1, 0, 0},
                   {op_kind::backward, 1, 0, 0}};
  s.rank_ops[1] = {{op_kind::forward, 0, 1, 0}, {op_kind::forward, 1, 1, 0}, {op_kind::backward, 0, 1, 0},
                   {op_kind::backward, 1, 1, 0}};
  CHECK_THROWS_WITH(validate(s), "schedule '1f1b': deadlock: rank 0 op 1 (B0 stage 0) waits for B0 stage 1; "
                                 "rank 1 op 1 (F1 stage 1) waits for F1 stage 0");
  s = one_f_one_b{}.make({2, 2});
  CHECK_NOTHROW(validate(s));
  std::swap(s.rank_ops[1][0], s.rank_ops[1][1]);  // rank 1: B0 before the F0 it needs
  CHECK_THROWS_WITH(validate(s), "schedule '1f1b': deadlock: rank 0 op 2 (B0 stage 0) waits for B0 stage 1; "
                                 "rank 1 op 0 (B0 stage 1) waits for F0 stage 1");
  auto z = zero_bubble_h1{}.make({2, 2});
  std::swap(z.rank_ops[0].front(), z.rank_ops[0].back());  // a W first
  CHECK_THROWS_WITH(validate(z), Catch::Contains("deadlock"));
}
