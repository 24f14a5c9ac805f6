// SPDX-License-Identifier: Apache-2.0
// Every shipped schedule, run by threads, reproduces the sequential reference:
// bitwise with one replica, within 1e-12 with two; messages are exactly the
// schedule's cross-rank edges; the buffer pool stops allocating after a step.
#include "../examples/train_toy/toy_model.hpp"
#include "gradient_difference.hpp"

#include <dflop/exec/executor.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/schedule.hpp>
#include <dflop/workload/mixture.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <mutex>
#include <vector>

using namespace dflop;

namespace {

struct pipeline_run {
  std::vector<double> losses;                  // per step (rank 0's view)
  std::vector<std::vector<double>> gradients;  // per model stage, from replica 0 after the last step
  std::vector<step_result> results;            // last step, per world rank
  bool replicas_agree = true;
};

pipeline_run run_pipeline(const pipeline_schedule& schedule, std::uint32_t replicas, const step_batch& batch,
                          int steps = 1) {
  const std::uint32_t ranks = schedule.ranks;
  pipeline_run out;
  out.gradients.resize(schedule.stages());
  out.results.resize(static_cast<std::size_t>(ranks) * replicas);
  out.losses.resize(static_cast<std::size_t>(steps));
  std::mutex mutex;
  std::vector<std::vector<double>> seen(out.gradients.size());
  run_inproc(static_cast<int>(ranks * replicas), [&](inproc_communicator& comm) {
    const auto pipeline_rank = static_cast<std::uint32_t>(comm.rank()) % ranks;
    std::vector<toy::mlp_stage> stages;
    for (std::uint32_t c = 0; c < schedule.chunks; ++c) stages.emplace_back(c * ranks + pipeline_rank, schedule.stages());
    executor<inproc_communicator, toy::mlp_stage> run(comm, ranks, std::move(stages), {.watchdog_seconds = 10});
    for (int step = 0; step < steps; ++step) {
      const auto result = run.step(schedule, batch);
      std::lock_guard lock(mutex);
      if (comm.rank() == 0) out.losses[static_cast<std::size_t>(step)] = result.loss;
      if (step + 1 == steps) out.results[static_cast<std::size_t>(comm.rank())] = result;
    }
    std::lock_guard lock(mutex);
    for (std::uint32_t c = 0; c < schedule.chunks; ++c) {
      const std::uint32_t stage = c * ranks + pipeline_rank;
      auto g = run.stages()[c].gradients();
      std::vector<double> values(g.begin(), g.end());
      if (run.replica() == 0) out.gradients[stage] = values;
      if (!seen[stage].empty() && seen[stage] != values) out.replicas_agree = false;
      seen[stage] = values;
    }
  });
  return out;
}

std::vector<pipeline_schedule> shipped(std::uint32_t ranks, std::uint32_t m) {
  return {gpipe{}.make({ranks, m}), one_f_one_b{}.make({ranks, m}), interleaved_1f1b{2}.make({ranks, m}),
          zero_bubble_h1{}.make({ranks, m})};
}

}  // namespace

TEST_CASE("stage and communicator concepts", "[exec]") {
  STATIC_REQUIRE(pipeline_stage<toy::mlp_stage>);
  STATIC_REQUIRE(has_weight_pass<toy::mlp_stage>);
  STATIC_REQUIRE(communicator<inproc_communicator>);
  struct no_backward {
    void forward(stage_context&) {}
    std::size_t input_bytes(const microbatch_view&) const { return 0; }
    std::size_t output_bytes(const microbatch_view&) const { return 0; }
    std::span<double> gradients() { return {}; }
  };
  STATIC_REQUIRE_FALSE(pipeline_stage<no_backward>);
  STATIC_REQUIRE_FALSE(detail::has_backward<no_backward, stage_context>);
  STATIC_REQUIRE(detail::has_forward<no_backward, stage_context>);
}

TEST_CASE("one replica equals the sequential reference bit for bit", "[exec]") {
  const auto samples = generate_mixture("onevision", 24, 7);
  for (std::uint32_t ranks : {1U, 2U, 4U}) {
    const std::uint32_t m = 8;
    const auto lists = contiguous_microbatches(samples.size(), m);
    const step_batch batch{samples, lists};
    std::vector<toy::mlp_stage> reference;
    for (const auto& schedule : shipped(ranks, m)) {
      INFO(schedule.name << " S=" << ranks);
      reference.clear();
      for (std::uint32_t s = 0; s < schedule.stages(); ++s) reference.emplace_back(s, schedule.stages());
      const double expected_loss = run_sequential(reference, batch, m);
      const auto run = run_pipeline(schedule, 1, batch);
      CHECK(run.losses[0] == expected_loss);
      for (std::uint32_t s = 0; s < schedule.stages(); ++s) {
        INFO("stage " << s);
        auto g = reference[s].gradients();
        CHECK(run.gradients[s] == std::vector<double>(g.begin(), g.end()));
      }
      std::size_t sent = 0;
      std::size_t received = 0;
      for (const auto& r : run.results) {
        sent += r.messages_sent;
        received += r.messages_received;
      }
      CHECK(sent == cross_rank_messages(schedule));
      CHECK(received == cross_rank_messages(schedule));
    }
  }
}

TEST_CASE("two replicas match the reference within 1e-12 and agree with each other", "[exec]") {
  const auto samples = generate_mixture("onevision", 40, 11);
  const std::uint32_t ranks = 2;
  const std::uint32_t m = 4;
  const auto lists = contiguous_microbatches(samples.size(), 2 * m);
  const step_batch batch{samples, lists};
  for (const auto& schedule : shipped(ranks, m)) {
    INFO(schedule.name);
    std::vector<toy::mlp_stage> reference;
    for (std::uint32_t s = 0; s < schedule.stages(); ++s) reference.emplace_back(s, schedule.stages());
    const double expected_loss = run_sequential(reference, batch, m, 2);
    const auto run = run_pipeline(schedule, 2, batch);
    CHECK(std::abs(run.losses[0] - expected_loss) <= 1e-12 * std::abs(expected_loss));
    CHECK(run.replicas_agree);
    for (std::uint32_t s = 0; s < schedule.stages(); ++s) {
      const auto [scale, diff] = test::compare_gradients(run.gradients[s], reference[s].gradients());
      CHECK(diff <= 1e-12 * scale);
    }
  }
}

TEST_CASE("the buffer pool is reused across steps", "[exec]") {
  const auto samples = generate_mixture("onevision", 16, 3);
  const auto lists = contiguous_microbatches(samples.size(), 4);
  // One rank: the same batch needs exactly the same blocks again.
  for (const auto& r : run_pipeline(one_f_one_b{}.make({1, 4}), 1, {samples, lists}, 3).results)
    CHECK(r.new_buffers == 0);
  // Several ranks: how many sends are still in flight depends on timing, so a later
  // step may add a block or two, never more than one per message it sends.
  for (const auto& r : run_pipeline(one_f_one_b{}.make({2, 4}), 1, {samples, lists}, 3).results)
    CHECK(r.new_buffers <= r.messages_sent);
}

TEST_CASE("in-process all-reduces of empty and non-empty buffers", "[exec]") {
  std::vector<std::vector<double>> results(3);
  dflop::run_inproc(3, [&](dflop::inproc_communicator& comm) {
    std::vector<double> none;
    comm.all_reduce_sum(dflop::gradient_buffer::of(std::span<double>(none)));  // takes part, copies nothing
    std::vector<double> values{1.0 * comm.rank(), 2.0};
    comm.all_reduce_sum(dflop::gradient_buffer::of(std::span<double>(values)));
    results[static_cast<std::size_t>(comm.rank())] = values;
  });
  for (const auto& values : results) CHECK(values == std::vector<double>{3.0, 6.0});
}
