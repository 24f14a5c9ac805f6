// SPDX-License-Identifier: Apache-2.0
// The shipped schedule policies: concept conformance, hand-checked op orders,
// completeness / dependency order / deadlock freedom for every S <= 8, m <= 32
// (v <= 4), and the activation memory each implies.
#include <dflop/schedule.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace dflop;

namespace {

std::string ops_text(const std::vector<pipeline_op>& ops) {
  std::string text;
  for (const auto& op : ops) {
    if (!text.empty()) text.append(" ");
    text.append(to_string(op));
    if (op.chunk > 0 || op.stage >= 2) text.append("s").append(std::to_string(op.stage));
  }
  return text;
}

//! A user-defined policy: plugs in like the shipped ones.
struct reverse_gpipe {
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "reverse-gpipe"; }
  [[nodiscard]] pipeline_schedule make(const schedule_shape& shape) const {
    auto result = gpipe{}.make(shape);
    result.name = std::string(name());
    for (auto& ops : result.rank_ops) std::reverse(ops.begin() + shape.microbatches, ops.end());
    return result;
  }
};

struct not_a_policy {
  int name = 0;
};

}  // namespace

TEST_CASE("shipped and user policies model the schedule concept", "[schedule]") {
  STATIC_REQUIRE(schedule<gpipe>);
  STATIC_REQUIRE(schedule<one_f_one_b>);
  STATIC_REQUIRE(schedule<interleaved_1f1b>);
  STATIC_REQUIRE(schedule<zero_bubble_h1>);
  STATIC_REQUIRE(schedule<reverse_gpipe>);
  STATIC_REQUIRE_FALSE(schedule<not_a_policy>);
  CHECK_NOTHROW(validate(reverse_gpipe{}.make({4, 6})));
}

TEST_CASE("op orders match the published schedules on small shapes", "[schedule]") {
  SECTION("GPipe: all forwards then all backwards, in microbatch order") {
    const auto s = gpipe{}.make({2, 3});
    CHECK(ops_text(s.rank_ops[0]) == "F0 F1 F2 B0 B1 B2");
    CHECK(ops_text(s.rank_ops[1]) == "F0 F1 F2 B0 B1 B2");
  }
  SECTION("1F1B: min(S-1-s, m) warm-up forwards, alternate, drain") {
    const auto s = one_f_one_b{}.make({3, 4});
    CHECK(ops_text(s.rank_ops[0]) == "F0 F1 F2 B0 F3 B1 B2 B3");
    CHECK(ops_text(s.rank_ops[1]) == "F0 F1 B0 F2 B1 F3 B2 B3");
    CHECK(ops_text(s.rank_ops[2]) == "F0s2 B0s2 F1s2 B1s2 F2s2 B2s2 F3s2 B3s2");
    const auto few = one_f_one_b{}.make({4, 2});  // warm-up capped by m
    CHECK(ops_text(few.rank_ops[0]) == "F0 F1 B0 B1");
  }
  SECTION("interleaved: Megatron's table, warm-up 2(S-1-r) + (v-1)S") {
    const auto s = interleaved_1f1b{2}.make({2, 4});
    CHECK(s.stages() == 4);
    // rank 0 holds stages 0 and 2; warm-up 2*1 + 1*2 = 4 forwards.
    CHECK(ops_text(s.rank_ops[0]) == "F0 F1 F0s2 F1s2 F2 B0s2 F3 B1s2 F2s2 B0 F3s2 B1 B2s2 B3s2 B2 B3");
    // rank 1 holds stages 1 and 3; warm-up 0*2 + 2 = 2 forwards.
    CHECK(ops_text(s.rank_ops[1]) ==
          "F0 F1 F0s3 B0s3 F1s3 B1s3 F2 B0 F3 B1 F2s3 B2s3 F3s3 B3s3 B2 B3");
  }
  SECTION("ZB-H1: 1F1B's F/B order, W deferred by s steps on stage s") {
    const auto s = zero_bubble_h1{}.make({2, 3});
    CHECK(s.split_backward);
    CHECK(ops_text(s.rank_ops[0]) == "F0 F1 B0 W0 F2 B1 W1 B2 W2");
    CHECK(ops_text(s.rank_ops[1]) == "F0 B0 F1 B1 W0 F2 B2 W1 W2");
  }
}

TEST_CASE("every schedule is complete, ordered and deadlock-free for S <= 8, m <= 32", "[schedule]") {
  std::size_t checked = 0;
  for (std::uint32_t stages = 1; stages <= 8; ++stages)
    for (std::uint32_t m = 1; m <= 32; ++m) {
      const schedule_shape shape{stages, m};
      for (const auto& s : {gpipe{}.make(shape), one_f_one_b{}.make(shape), zero_bubble_h1{}.make(shape)}) {
        INFO(s.name << " S=" << stages << " m=" << m);
        REQUIRE_NOTHROW(validate(s));
        ++checked;
      }
      for (std::uint32_t v = 1; v <= 4; ++v) {
        INFO("interleaved S=" << stages << " m=" << m << " v=" << v);
        if (v > 1 && m % stages != 0) {
          REQUIRE_THROWS_AS(interleaved_1f1b{v}.make(shape), schedule_error);
          continue;
        }
        const auto s = interleaved_1f1b{v}.make(shape);
        REQUIRE(s.chunks == v);
        REQUIRE_NOTHROW(validate(s));
        ++checked;
      }
    }
  CHECK(checked == 1279);  // 768 plain + 511 interleaved shapes
}

TEST_CASE("interleaved rejects shapes Megatron rejects, naming them", "[schedule]") {
  CHECK_THROWS_WITH(interleaved_1f1b{2}.make({4, 6}),
                    "interleaved: with 2 chunks per rank the microbatches (m=6) must be a multiple of the stages (S=4)");
  CHECK_THROWS_AS(interleaved_1f1b{0}.make({4, 8}), schedule_error);
  CHECK_THROWS_WITH(gpipe{}.make({0, 3}), Catch::Contains("at least one stage"));
  CHECK(interleaved_1f1b{1}.make({3, 5}).rank_ops == one_f_one_b{}.make({3, 5}).rank_ops);
}

TEST_CASE("activations in flight: 1F1B and ZB-H1 hold min(S-s, m), GPipe m", "[schedule]") {
  for (std::uint32_t stages = 1; stages <= 8; ++stages)
    for (std::uint32_t m = 1; m <= 32; ++m) {
      const auto one = peak_activations(one_f_one_b{}.make({stages, m}));
      const auto zero = peak_activations(zero_bubble_h1{}.make({stages, m}));
      const auto all = peak_activations(gpipe{}.make({stages, m}));
      for (std::uint32_t s = 0; s < stages; ++s) {
        INFO("S=" << stages << " m=" << m << " s=" << s);
        REQUIRE(one[s] == std::min(stages - s, m));
        REQUIRE(zero[s] == one[s]);
        REQUIRE(all[s] == m);
      }
    }
}

TEST_CASE("dependencies and dependents are each other's inverse", "[schedule]") {
  for (const auto& s : {one_f_one_b{}.make({3, 4}), interleaved_1f1b{3}.make({2, 4}), zero_bubble_h1{}.make({4, 5})}) {
    for (const auto& ops : s.rank_ops)
      for (const auto& op : ops) {
        for (const auto& next : dependents(s, op)) {
          const auto back = dependencies(s, next);
          CHECK(std::find(back.begin(), back.end(), op) != back.end());
        }
        for (const auto& need : dependencies(s, op)) {
          const auto forward = dependents(s, need);
          CHECK(std::find(forward.begin(), forward.end(), op) != forward.end());
        }
      }
  }
  const auto s = one_f_one_b{}.make({3, 2});
  const pipeline_op middle_backward{op_kind::backward, 1, 1, 0};
  const auto needs = dependencies(s, middle_backward);
  REQUIRE(needs.count == 2);
  CHECK(needs.ops[0] == pipeline_op{op_kind::forward, 1, 1, 0});
  CHECK(needs.ops[1] == pipeline_op{op_kind::backward, 1, 2, 0});
  CHECK(crosses_ranks(s, needs.ops[1], middle_backward));
  CHECK_FALSE(crosses_ranks(s, needs.ops[0], middle_backward));
}

TEST_CASE("schedules by name", "[schedule]") {
  CHECK(make_schedule("1f1b", {4, 8}) == one_f_one_b{}.make({4, 8}));
  CHECK(make_schedule("interleaved", {4, 8}, 2) == interleaved_1f1b{2}.make({4, 8}));
  CHECK(make_schedule("zb-h1", {4, 8}).split_backward);
  CHECK_THROWS_WITH(make_schedule("pipedream", {4, 8}), "unknown schedule 'pipedream' (known: gpipe 1f1b interleaved zb-h1)");
  CHECK_THROWS_AS(make_schedule("gpipe", {4, 8}, 2), schedule_error);
}
