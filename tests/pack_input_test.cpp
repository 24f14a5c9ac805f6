// SPDX-License-Identifier: Apache-2.0
#include "error_of.hpp"

#include "pack_test_support.hpp"

#include <cmath>
#include <limits>
#include <string>

using namespace dflop;

TEST_CASE("cost_matrix rejects bad values with a clear message", "[pack]") {
  CHECK(test::error_of<error>([] { cost_matrix(2, 1, {1.0, -1.0}); }) == "cost matrix: sample 1, dimension 0: cost -1.000000 is negative");
  CHECK(test::error_of<error>([] { cost_matrix(1, 2, {1.0, std::nan("")}); }).find("is not finite") != std::string::npos);
  CHECK(test::error_of<error>([] { cost_matrix(1, 1, {std::numeric_limits<double>::infinity()}); }).find("not finite") != std::string::npos);
  CHECK(test::error_of<error>([] { cost_matrix(2, 2, {1.0}); }) == "cost matrix: expected 2 x 2 = 4 values, got 1");
  CHECK(test::error_of<error>([] { cost_matrix(1, 0, {}); }) == "cost matrix: needs at least one cost dimension");
  CHECK(test::error_of<error>([] { (void)cost_matrix::from_rows({{1, 2}, {3}}); }) == "cost matrix: row 1 has 1 costs, row 0 has 2");
  const auto costs = cost_matrix::from_rows({{1, 2}, {3, 4}});
  CHECK(costs.samples() == 2);
  CHECK(costs.dimensions() == 2);
  CHECK(costs(1, 0) == 3);
  CHECK(costs.row(1)[1] == 4);
}

TEST_CASE("every packer rejects N < K and K == 0 as input errors", "[pack]") {
  const auto costs = cost_matrix::from_rows({{1}, {2}, {3}});
  CHECK(test::error_of<error>([&] { (void)pack(refined_packer{}, costs, 4); }) ==
        "bins: 3 samples cannot fill 4 bins without leaving one empty (need N >= K)");
  CHECK_THROWS_AS(pack(sequential_packer{}, costs, 4), input_error);
  CHECK_THROWS_AS(pack(lpt_packer{}, costs, 4), input_error);
  CHECK_THROWS_AS(pack(karmarkar_karp_packer{}, costs, 4), input_error);
  CHECK_THROWS_AS(pack(exact_packer{}, costs, 4), input_error);
  CHECK_THROWS_AS(pack(refined_packer{}, costs, 0), input_error);
  CHECK_THROWS_AS(pack(refined_packer{}, cost_matrix{}, 1), input_error);
}

TEST_CASE("caps of the wrong shape are input errors", "[pack]") {
  const auto costs = cost_matrix::from_rows({{1}, {2}, {3}});
  const bin_caps short_amounts{cost_matrix::from_rows({{1}, {1}}), {5}};
  CHECK_THROWS_AS(pack(refined_packer{}, costs, 2, {.caps = &short_amounts}), input_error);
  const bin_caps missing_limit{cost_matrix::from_rows({{1}, {1}, {1}}), {}};
  CHECK_THROWS_AS(pack(refined_packer{}, costs, 2, {.caps = &missing_limit}), input_error);
  const bin_caps negative_limit{cost_matrix::from_rows({{1}, {1}, {1}}), {-1}};
  CHECK_THROWS_AS(pack(refined_packer{}, costs, 2, {.caps = &negative_limit}), input_error);
}

TEST_CASE("caps prove infeasibility with the reason", "[pack]") {
  const auto costs = cost_matrix::from_rows({{1}, {2}, {3}});
  const bin_caps caps = bin_caps::on_dimension(costs, 0, 2.5);
  CHECK(test::error_of<error>([&] { (void)pack(lpt_packer{}, costs, 2, {.caps = &caps}); })
            .starts_with("infeasible caps: sample 2 alone needs 3.000000 of capped quantity 0"));
}
