// SPDX-License-Identifier: Apache-2.0
// world_layout against a brute-force enumeration: walking the GPUs in the order
// the planner places them (encoder first; replica, then stage, then TP rank)
// gives every rank's role, and the groups are exactly the ranks sharing the
// right coordinates.
#include <dflop/plan/rank_layout.hpp>
#include <dflop/plan/world_layout.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

using namespace dflop;

namespace {

// Every rank's role, listed in GPU order by nested loops.
std::vector<rank_role> enumerate_roles(const module_parallelism& encoder, const module_parallelism& llm) {
  std::vector<rank_role> roles;
  for (module_kind kind : {module_kind::encoder, module_kind::llm}) {
    const module_parallelism& d = kind == module_kind::encoder ? encoder : llm;
    for (int q = 0; q < (d.pp > 0 ? d.dp : 0); ++q)
      for (int s = 0; s < d.pp; ++s)
        for (int t = 0; t < d.tp; ++t) {
          rank_role role;
          role.module = kind;
          role.replica = static_cast<std::uint32_t>(q);
          role.stage = static_cast<std::uint32_t>(s);
          role.tp_rank = static_cast<std::uint32_t>(t);
          role.position = static_cast<std::uint32_t>(kind == module_kind::encoder ? s : encoder.pp + s);
          roles.push_back(role);
        }
  }
  return roles;
}

template <class Same>
std::vector<int> ranks_where(const std::vector<rank_role>& roles, Same&& same) {
  std::vector<int> out;
  for (std::size_t r = 0; r < roles.size(); ++r)
    if (same(roles[r])) out.push_back(static_cast<int>(r));
  return out;
}

}  // namespace

TEST_CASE("world_layout: roles, ranks and groups match a brute-force enumeration", "[plan][layout]") {
  random_generator random(7);
  for (int trial = 0; trial < 300; ++trial) {
    const auto pick = [&](int low, int high) { return low + static_cast<int>(random.below(static_cast<std::uint64_t>(high - low + 1))); };
    const module_parallelism encoder{pick(1, 3), pick(0, 3), pick(1, 3)};
    const module_parallelism llm{pick(1, 4), pick(1, 4), pick(1, 3)};
    INFO("encoder " << encoder << ", llm " << llm);
    const world_layout layout(encoder, llm);
    const auto roles = enumerate_roles(encoder, llm);
    REQUIRE(layout.world_size() == static_cast<int>(roles.size()));
    CHECK(layout.positions() == static_cast<std::uint32_t>(encoder.pp + llm.pp));
    CHECK(layout.has_encoder() == (encoder.pp > 0));
    for (int rank = 0; rank < layout.world_size(); ++rank) {
      const rank_role& want = roles[static_cast<std::size_t>(rank)];
      REQUIRE(layout.role(rank) == want);
      CHECK(layout.rank_of(want.module, want.stage, want.replica, want.tp_rank) == rank);
      CHECK(layout.rank_at(want.position, want.replica, want.tp_rank) == rank);
      CHECK(layout.tensor_group(rank) == ranks_where(roles, [&](const rank_role& r) {
              return r.module == want.module && r.stage == want.stage && r.replica == want.replica;
            }));
      CHECK(layout.data_parallel_group(rank) == ranks_where(roles, [&](const rank_role& r) {
              return r.module == want.module && r.stage == want.stage && r.tp_rank == want.tp_rank;
            }));
      const auto neighbour = [&](int step) {
        const auto found = ranks_where(roles, [&](const rank_role& r) {
          return r.module == want.module && r.replica == want.replica && r.tp_rank == want.tp_rank &&
                 static_cast<int>(r.stage) == static_cast<int>(want.stage) + step;
        });
        return found.empty() ? -1 : found.front();
      };
      CHECK(layout.previous_in_module(rank) == neighbour(-1));
      CHECK(layout.next_in_module(rank) == neighbour(+1));
    }
  }
}

TEST_CASE("world_layout: a parallel_config's world is its GPUs; bad degrees are refused", "[plan][layout]") {
  const parallel_config config{{2, 1, 2}, {2, 2, 3}, 8};
  const world_layout layout(config);
  CHECK(layout.world_size() == config.gpus());
  // A TP group sits on consecutive GPUs, so with tp dividing the node size it never spans nodes.
  const cluster_spec cluster{config.gpus(), 4, {}};
  const rank_layout placement(config, cluster);
  for (int rank = 0; rank < layout.world_size(); ++rank) {
    const auto group = layout.tensor_group(rank);
    CHECK(placement.node_of(group.front()) == placement.node_of(group.back()));
    const auto role = layout.role(rank);
    if (role.tp_rank == 0)
      CHECK(placement.first_gpu(role.module, static_cast<int>(role.replica), static_cast<int>(role.stage)) == rank);
  }
  CHECK_THROWS_AS(world_layout({1, 1, 1}, {1, 0, 1}), error);
  CHECK_THROWS_AS(world_layout({0, 1, 1}, {1, 1, 1}), error);
  CHECK_THROWS_AS(layout.role(layout.world_size()), error);
  CHECK_THROWS_AS(layout.role(-1), error);
  CHECK(world_layout({1, 0, 1}, {1, 2, 1}).world_size() == 2);  // no encoder
}
