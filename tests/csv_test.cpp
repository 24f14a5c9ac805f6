// SPDX-License-Identifier: Apache-2.0
#include "error_of.hpp"

#include <dflop/util/csv.hpp>

#include <catch2/catch.hpp>

using dflop::read_csv_text;

TEST_CASE("CSV rows keep their line numbers and parse numbers", "[util][csv]") {
  const auto table = read_csv_text("id, a ,b\n\ns1,1.5,2\ns2,0,3e2\n", "costs.csv");
  REQUIRE(table.columns == std::vector<std::string>{"id", "a", "b"});
  REQUIRE(table.rows.size() == 2);
  CHECK(table.rows[0].line == 3);
  CHECK(table.rows[1].line == 4);
  CHECK(table.number(table.rows[0], table.require_column("a")) == 1.5);
  CHECK(table.number(table.rows[1], 2) == 300.0);
  CHECK(table.integer(table.rows[1], 2 - 1) == 0);
}

TEST_CASE("CSV errors name file, line and reason", "[util][csv]") {
  CHECK(dflop::test::error_of([] { (void)read_csv_text("", "e.csv"); }) == "e.csv: empty input: expected a header row");
  CHECK(dflop::test::error_of([] { (void)read_csv_text("id,a\nx,1,2\n", "f.csv"); }) ==
        "f.csv:2: expected 2 fields (as the header), found 3");
  CHECK(dflop::test::error_of([] { (void)read_csv_text("id,a,a\n", "g.csv"); }) == "g.csv:1: duplicate column 'a'");
  CHECK(dflop::test::error_of([] { (void)read_csv_text("id,a\n\"x\",1\n", "q.csv"); }) ==
        "q.csv:2: quoted fields are not supported");
  const auto table = read_csv_text("id,a\nx,abc\ny,-1\nz,inf\n", "h.csv");
  CHECK(dflop::test::error_of([&] { (void)table.number(table.rows[0], 1); }) == "h.csv:2: column 'a': 'abc' is not a finite number");
  CHECK(dflop::test::error_of([&] { (void)table.number(table.rows[1], 1); }) == "h.csv:3: column 'a': negative value -1");
  CHECK(table.number(table.rows[1], 1, false) == -1.0);
  CHECK(dflop::test::error_of([&] { (void)table.number(table.rows[2], 1); }) == "h.csv:4: column 'a': 'inf' is not a finite number");
  CHECK(dflop::test::error_of([&] { (void)table.require_column("b"); }) == "h.csv:1: missing column 'b' (columns: id, a)");
  CHECK(dflop::test::error_of([&] { (void)table.integer(table.rows[0], 1); }) == "h.csv:2: column 'a': 'abc' is not an integer");
}
