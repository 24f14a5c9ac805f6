// SPDX-License-Identifier: Apache-2.0
#include "pack_test_support.hpp"

#include <sstream>

using namespace dflop;
using dflop::test::check_packing;
using dflop::test::random_costs;

TEST_CASE("shipped packers model the packer concept", "[pack]") {
  STATIC_REQUIRE(packer<sequential_packer>);
  STATIC_REQUIRE(packer<lpt_packer>);
  STATIC_REQUIRE(packer<karmarkar_karp_packer>);
  STATIC_REQUIRE(packer<refined_packer>);
  STATIC_REQUIRE(packer<exact_packer>);
  STATIC_REQUIRE_FALSE(packer<int>);
}

template <class Packer>
void check_random_instances(std::uint64_t first_seed) {
  pack_workspace workspace;
  packing result;
  for (std::uint64_t seed = first_seed; seed < first_seed + 40; ++seed) {
    random_generator random(seed);
    const std::size_t bins = 1 + random.below(24);
    const std::size_t samples = bins + random.below(6 * bins + 5);
    const std::size_t dimensions = 1 + random.below(3);
    const auto costs = random_costs(samples, dimensions, seed);
    CAPTURE(Packer::name(), seed, samples, bins, dimensions);
    Packer{}.pack(costs, bins, {.seed = seed}, workspace, result);
    check_packing(result, costs, bins);
  }
}

TEST_CASE("every heuristic returns a valid partition with no empty bin", "[pack]") {
  check_random_instances<sequential_packer>(100);
  check_random_instances<lpt_packer>(200);
  check_random_instances<karmarkar_karp_packer>(300);
  check_random_instances<refined_packer>(400);
}

TEST_CASE("N == K puts one sample per bin; K == 1 puts all in one", "[pack]") {
  const auto costs = random_costs(7, 2, 5);
  for (const packing& result : {pack(refined_packer{}, costs, 7), pack(karmarkar_karp_packer{}, costs, 7),
                                pack(lpt_packer{}, costs, 7), pack(sequential_packer{}, costs, 7)}) {
    check_packing(result, costs, 7);
    CHECK(result.makespan == result.lower_bound);  // the largest single cost
  }
  const auto one = pack(refined_packer{}, costs, 1);
  check_packing(one, costs, 1);
  CHECK(one.gap == 0);
}

TEST_CASE("zero costs still give non-empty bins", "[pack]") {
  const cost_matrix zeros(10, 2, std::vector<double>(20, 0.0));
  for (const packing& result : {pack(refined_packer{}, zeros, 4), pack(karmarkar_karp_packer{}, zeros, 4),
                                pack(lpt_packer{}, zeros, 4)}) {
    check_packing(result, zeros, 4);
    CHECK(result.makespan == 0);
    CHECK(result.gap == 0);
  }
}

TEST_CASE("refined_packer is never worse than its starts", "[pack]") {
  pack_workspace workspace;
  packing refined, lpt, kk;
  for (std::uint64_t seed = 0; seed < 30; ++seed) {
    const auto costs = random_costs(40 + 20 * seed, 2, seed);
    const std::size_t bins = 2 + seed % 12;
    refined_packer{}.pack(costs, bins, {.seed = seed}, workspace, refined);
    // refined starts from the better of KK and LPT with every bin as candidate (K <= 128 here).
    lpt_packer{.candidates = bins}.pack(costs, bins, {}, workspace, lpt);
    karmarkar_karp_packer{}.pack(costs, bins, {}, workspace, kk);
    CAPTURE(seed, bins);
    CHECK(refined.makespan <= std::min(lpt.makespan, kk.makespan));
  }
}

TEST_CASE("same seed, same packing; a reused workspace changes nothing", "[pack]") {
  const auto costs = random_costs(500, 2, 77);
  pack_workspace workspace;
  const auto first = pack(refined_packer{}, costs, 24, {.seed = 9}, workspace);
  (void)pack(refined_packer{}, random_costs(300, 3, 1), 50, {.seed = 3}, workspace);
  const auto again = pack(refined_packer{}, costs, 24, {.seed = 9}, workspace);
  const auto fresh = pack(refined_packer{}, costs, 24, {.seed = 9});
  CHECK(first == again);
  CHECK(first == fresh);
  CHECK(pack(lpt_packer{}, costs, 24) == pack(lpt_packer{}, costs, 24));
  CHECK(pack(karmarkar_karp_packer{}, costs, 24) == pack(karmarkar_karp_packer{}, costs, 24));
}

TEST_CASE("refined_packer balances many small items close to the bound", "[pack]") {
  const auto costs = random_costs(2000, 2, 11);
  const auto result = pack(refined_packer{}, costs, 32);
  check_packing(result, costs, 32);
  CHECK(result.gap < 0.005);
  CHECK(result.gap <= pack(lpt_packer{}, costs, 32).gap);
}

TEST_CASE("sequential_packer keeps arrival order with equal counts", "[pack]") {
  const auto costs = random_costs(10, 1, 3);
  const auto result = pack(sequential_packer{}, costs, 3);
  CHECK(result.bins() == std::vector<std::vector<std::size_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8, 9}});
}

TEST_CASE("lower bound: largest item, average, pigeonhole", "[pack]") {
  CHECK(lower_bound(cost_matrix::from_rows({{10}, {1}, {1}}), 2) == 10);               // largest item
  CHECK(lower_bound(cost_matrix::from_rows({{3}, {3}, {3}, {3}}), 2) == 6);            // total / K
  CHECK(lower_bound(cost_matrix::from_rows({{5}, {5}, {5}, {0}, {0}, {0}}), 2) == 10); // a_K + a_(K+1) > 15 / 2
  // j = 2: of the 5 largest, some bin of 2 holds 3: at least 4 + 4 + 4 > total / K = 26 / 2.
  CHECK(lower_bound(cost_matrix::from_rows({{10}, {4}, {4}, {4}, {4}, {0}}), 2) == 13);
  CHECK(lower_bound(cost_matrix::from_rows({{6}, {6}, {6}, {6}, {6}, {1}}), 2) == 18);
  CHECK(lower_bound(cost_matrix::from_rows({{1, 9}, {1, 0}, {1, 0}}), 2) == 9);        // max over dimensions
  CHECK_THROWS_AS(lower_bound(cost_matrix::from_rows({{1}}), 0), input_error);
}

TEST_CASE("packing prints its figures and bins", "[pack]") {
  const auto result = pack(sequential_packer{}, cost_matrix::from_rows({{1}, {2}, {3}, {4}}), 2);
  std::ostringstream out;
  out << result;
  CHECK(out.str() == "packing{makespan=7, lower_bound=5, gap=40%, bins=[[0, 1], [2, 3]]}");
}
