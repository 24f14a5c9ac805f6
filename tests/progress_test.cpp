// SPDX-License-Identifier: Apache-2.0
#include <dflop/util/progress.hpp>

#include <catch2/catch.hpp>

#include <sstream>

TEST_CASE("line-mode progress prints each tenth once and nothing when silent", "[util]") {
  std::ostringstream out;
  {
    dflop::progress_bar bar(&out, "search", 20, false);
    for (int i = 0; i < 20; ++i) bar.advance();
    CHECK(bar.done() == 20);
  }
  const std::string text = out.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 10);
  CHECK_THAT(text, Catch::StartsWith("search: 10% (2/20)\n"));
  CHECK_THAT(text, Catch::EndsWith("search: 100% (20/20)\n"));

  dflop::progress_bar silent(nullptr, "quiet", 5, true);
  silent.advance(5);
  CHECK(silent.done() == 5);
}

TEST_CASE("terminal-mode progress redraws in place and ends with a newline", "[util]") {
  std::ostringstream out;
  dflop::progress_bar bar(&out, "plan", 4, true);
  bar.advance(4);  // completion always draws
  bar.finish();
  bar.finish();    // idempotent
  const std::string text = out.str();
  CHECK_THAT(text, Catch::Contains("\rplan [##############################] 4/4"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
}
