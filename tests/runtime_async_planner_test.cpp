// SPDX-License-Identifier: Apache-2.0
// The asynchronous planner: same results as synchronous planning whatever the
// timing (random planning and consumer jitter; real batch scheduling), batch
// order, exception propagation, the look-ahead bound, and clean shutdown.
// Every test case name starts with "async planner" (the ThreadSanitizer preset
// runs exactly these).
#include "error_of.hpp"
#include "plan_test_support.hpp"

#include <dflop/pipeline.hpp>
#include <dflop/runtime/async_planner.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/sampling.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

//! A planning function with random work and random duration, both from (seed, index) only.
std::vector<std::uint64_t> jittery_plan(std::uint64_t seed, std::uint64_t index) {
  dflop::random_generator random(seed * 1'000'003 + index);
  std::this_thread::sleep_for(std::chrono::microseconds(random.below(2000)));
  std::vector<std::uint64_t> result(1 + random.below(16));
  for (auto& value : result) value = random();
  result.push_back(index);
  return result;
}

}  // namespace

TEST_CASE("async planner: results equal synchronous planning whatever the timing", "[runtime][async]") {
  const std::uint64_t seed = 42;
  const std::uint64_t batches = 40;
  for (std::size_t lookahead : {1U, 2U, 5U}) {
    CAPTURE(lookahead);
    dflop::async_planner planner([&](std::uint64_t index) { return jittery_plan(seed, index); },
                                 {.lookahead = lookahead, .first_batch = 3});
    dflop::random_generator consumer(lookahead);  // the trainer's pace varies too
    for (std::uint64_t k = 3; k < 3 + batches; ++k) {
      CHECK(planner.next_batch() == k);
      const auto planned = planner.next();
      CHECK(planned == jittery_plan(seed, k));
      std::this_thread::sleep_for(std::chrono::microseconds(consumer.below(2000)));
    }
  }
}

TEST_CASE("async planner: scheduled batches equal those of schedule_batch called in line", "[runtime][async]") {
  using default_pipeline = dflop::pipeline<>;
  const auto model = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(8, 4);
  const auto workload = dflop::test::small_workload(200);
  dflop::planner_options options;
  options.global_batch = 32;
  options.batches = 2;
  options.baselines = false;
  options.batch.order_budget = 8;
  const auto plan = default_pipeline::make_plan(workload, model, cluster, options);
  // The trainer's per-batch work: draw the batch and schedule it, from (seed, index) only.
  const auto schedule = [&](std::uint64_t index) {
    const auto batch = dflop::sample_batch(workload, 32, dflop::batch_mode::without_replacement, 1000 + index);
    return default_pipeline::schedule_batch(plan, batch, 7 + index);
  };
  dflop::async_planner planner(schedule, {.lookahead = 2});
  for (std::uint64_t k = 0; k < 4; ++k) {
    const auto ahead = planner.next();
    const auto in_line = schedule(k);
    CHECK(ahead.llm_microbatches == in_line.llm_microbatches);
    CHECK(ahead.encoder_parts == in_line.encoder_parts);
    CHECK(ahead.slot_order == in_line.slot_order);
    CHECK(ahead.predicted_seconds == in_line.predicted_seconds);
  }
}

TEST_CASE("async planner: an exception reaches next() for its batch, later batches still come", "[runtime][async]") {
  dflop::async_planner planner(
      [](std::uint64_t index) -> std::uint64_t {
        if (index == 3) throw std::runtime_error("batch 3: no sample fits");
        return index * index;
      },
      {.lookahead = 3});
  CHECK(planner.next() == 0);
  CHECK(planner.next() == 1);
  CHECK(planner.next() == 4);
  CHECK(dflop::test::error_of<std::runtime_error>([&] { (void)planner.next(); }) == "batch 3: no sample fits");
  CHECK(planner.next_batch() == 4);
  CHECK(planner.next() == 16);
  CHECK(planner.next() == 25);
}

TEST_CASE("async planner: never more than lookahead batches planned ahead of the consumer", "[runtime][async]") {
  for (std::size_t lookahead : {1U, 3U}) {
    CAPTURE(lookahead);
    std::atomic<std::uint64_t> started{0}, requested{0}, worst{0};
    {
      dflop::async_planner planner(
          [&](std::uint64_t index) {
            // `requested` counts next() calls begun, so it is >= the batches taken off the queue.
            const std::uint64_t ahead = ++started - requested.load();
            std::uint64_t seen = worst.load();
            while (ahead > seen && !worst.compare_exchange_weak(seen, ahead)) {
            }
            return index;
          },
          {.lookahead = lookahead});
      for (std::uint64_t k = 0; k < 12; ++k) {
        std::this_thread::sleep_for(2ms);  // a slow trainer: the planner fills its look-ahead
        ++requested;
        CHECK(planner.next() == k);
      }
    }
    CHECK(worst.load() == lookahead);
  }
  CHECK(dflop::test::error_of([] { dflop::async_planner bad([](std::uint64_t i) { return i; }, {.lookahead = 0}); }) ==
        "async_planner_options::lookahead: must be >= 1 (batches planned ahead), got 0");
}

TEST_CASE("async planner: destruction with unconsumed or blocked planning returns promptly", "[runtime][async]") {
  SECTION("consumer stops early; the function sleeps") {
    std::atomic<int> calls{0};
    const auto start = std::chrono::steady_clock::now();
    {
      dflop::async_planner planner([&](std::uint64_t index) {
        ++calls;
        std::this_thread::sleep_for(5ms);
        return index;
      }, {.lookahead = 4});
      CHECK(planner.next() == 0);
    }
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    CHECK(calls.load() <= 5);  // one consumed + at most lookahead ahead
  }
  SECTION("the function waits on its stop token") {
    std::atomic<bool> blocked{false}, released{false};
    {
      dflop::async_planner planner(
          [&](std::uint64_t index, std::stop_token stop) {
            if (index == 1) {
              blocked = true;
              while (!stop.stop_requested()) std::this_thread::sleep_for(1ms);  // would block forever
              released = true;
            }
            return index;
          },
          {.lookahead = 2});
      CHECK(planner.next() == 0);
      while (!blocked.load()) std::this_thread::sleep_for(1ms);  // batch 1 is being planned, and blocks
    }
    CHECK(released.load());
  }
  SECTION("nothing consumed at all") {
    dflop::async_planner planner([](std::uint64_t index) { return std::to_string(index); }, {.lookahead = 2});
  }
}
