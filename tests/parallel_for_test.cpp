// SPDX-License-Identifier: Apache-2.0
#include <dflop/util/parallel_for.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <numeric>
#include <stdexcept>
#include <vector>

TEST_CASE("parallel_for visits every index exactly once on any thread count", "[util]") {
  for (unsigned threads : {0U, 1U, 2U, 5U}) {
    for (std::size_t count : {0U, 1U, 3U, 100U}) {
      std::vector<std::atomic<int>> visits(count);
      std::atomic<unsigned> highest_worker{0};
      dflop::parallel_for(count, threads, [&](std::size_t i, unsigned worker) {
        visits[i].fetch_add(1);
        unsigned seen = highest_worker.load();
        while (worker > seen && !highest_worker.compare_exchange_weak(seen, worker)) {
        }
      });
      for (const auto& v : visits) CHECK(v.load() == 1);
      const unsigned limit = threads == 0 ? dflop::default_thread_count() : threads;
      CHECK(highest_worker.load() < std::max(1U, limit));
    }
  }
}

TEST_CASE("parallel_for rethrows a failing call's exception after joining", "[util]") {
  std::atomic<int> calls{0};
  CHECK_THROWS_WITH(dflop::parallel_for(64, 3,
                                        [&](std::size_t i, unsigned) {
                                          calls.fetch_add(1);
                                          if (i == 7) throw std::runtime_error("index 7 failed");
                                        }),
                    "index 7 failed");
  CHECK(calls.load() >= 1);  // indices taken after the failure may be skipped
  CHECK(calls.load() <= 64);
}
