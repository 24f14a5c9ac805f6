// SPDX-License-Identifier: Apache-2.0
// Overlapped gradient reduction in the executor: exactly one op per stage and
// step is marked as its last gradient-producing op; buffers a stage says final
// there are summed over the replicas while the op still runs (seen from inside
// it), give the same sums as the end-of-step reduction, and misuse is refused.
#include "error_of.hpp"

#include <dflop/exec/executor.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/schedule.hpp>
#include <dflop/workload/mixture.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace dflop;

namespace {

constexpr std::size_t buckets = 3;
constexpr std::size_t bucket_size = 5;

// What every replica's stage saw, over all ranks.
struct observations {
  std::array<std::atomic<int>, 4 * buckets> posted{};  // replicas whose gradients_ready returned, per (stage, bucket)
  std::mutex mutex;
  std::vector<std::string> final_ops;  // "stage s: B3" per op marked final
  int sums_seen_inside = 0;            // buckets whose sum arrived before the final op returned
  int sums_missing_inside = 0;         // ... and whose did not (within the wait)
  std::size_t sums_reported = 0;       // step_result::gradient_sums_overlapped over all ranks
};

// A stage whose backward adds (bucket + 1) to every element of each gradient
// bucket per microbatch; with `post`, its final op says each bucket final as it
// is written and then watches that bucket until it holds the sum over replicas.
// `Weight`: whether it has a separate weight pass (which then does the adding).
template <bool Weight>
struct bucket_stage {
  std::uint32_t stage = 0;
  std::uint32_t stages = 1;
  std::uint32_t replicas = 1;
  std::uint32_t m = 1;
  bool post = true;
  observations* seen = nullptr;
  std::vector<std::vector<double>> grads = std::vector<std::vector<double>>(buckets, std::vector<double>(bucket_size));

  void forward(stage_context& ctx) {
    if (!ctx.last_stage()) std::fill(ctx.output.begin(), ctx.output.end(), std::byte{1});
    else ctx.loss = static_cast<double>(ctx.samples.size());
  }
  void backward(stage_context& ctx) {
    if (!ctx.first_stage()) std::fill(ctx.input_grad.begin(), ctx.input_grad.end(), std::byte{2});
    if constexpr (!Weight) accumulate(ctx);
  }
  void weight(stage_context& ctx)
    requires Weight
  {
    accumulate(ctx);
  }
  [[nodiscard]] std::size_t input_bytes(const microbatch_view& mb) const { return stage == 0 ? 0 : 8 * mb.size(); }
  [[nodiscard]] std::size_t output_bytes(const microbatch_view& mb) const {
    return stage + 1 == stages ? 0 : 8 * mb.size();
  }
  [[nodiscard]] std::vector<gradient_buffer> gradients() {
    std::vector<gradient_buffer> out;
    for (auto& g : grads) out.push_back(gradient_buffer::of(std::span<double>(g)));
    return out;
  }

private:
  void accumulate(stage_context& ctx) {
    if (ctx.final_gradients) {
      std::lock_guard lock(seen->mutex);
      seen->final_ops.push_back("stage " + std::to_string(stage) + ": " + kind_letter(ctx.kind) +
                                std::to_string(ctx.microbatch));
    }
    for (std::size_t b = 0; b < buckets; ++b) {
      for (double& value : grads[b]) value += static_cast<double>(b + 1);
      if (!(post && ctx.final_gradients)) continue;
      ctx.gradients_ready(gradient_buffer::of(std::span<double>(grads[b])));
      // The other replicas say it final in their own final op. Once every one
      // has returned from saying so, the in-process sum (done by the last one,
      // inside its call) is in this buffer: seen here, while this op still runs.
      std::atomic<int>& arrived = seen->posted[stage * buckets + b];
      arrived.fetch_add(1, std::memory_order_release);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (arrived.load(std::memory_order_acquire) < static_cast<int>(replicas) &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      const double total = static_cast<double>(replicas) * m * static_cast<double>(b + 1);
      std::lock_guard lock(seen->mutex);
      ++(grads[b][0] == total ? seen->sums_seen_inside : seen->sums_missing_inside);
    }
  }
};

// Runs one step of `schedule` over `replicas` replicas; returns each (stage, replica)'s gradients.
template <bool Weight>
std::vector<std::vector<std::vector<double>>> run_buckets(const pipeline_schedule& schedule, std::uint32_t replicas,
                                                          bool post, observations& seen) {
  const std::uint32_t ranks = schedule.ranks;
  const std::uint32_t m = schedule.microbatches;
  const auto samples = generate_mixture("onevision", 4 * m * replicas, 3);
  const auto lists = contiguous_microbatches(samples.size(), m * replicas);
  const step_batch batch{samples, lists};
  std::vector<std::vector<std::vector<double>>> out(static_cast<std::size_t>(ranks) * replicas);
  std::mutex mutex;
  run_inproc(static_cast<int>(ranks * replicas), [&](inproc_communicator& comm) {
    const auto pipeline_rank = static_cast<std::uint32_t>(comm.rank()) % ranks;
    std::vector<bucket_stage<Weight>> stages(1);
    stages[0] = {pipeline_rank, ranks, replicas, m, post, &seen};
    executor<inproc_communicator, bucket_stage<Weight>> run(comm, ranks, std::move(stages), {.watchdog_seconds = 20});
    const step_result result = run.step(schedule, batch);
    std::lock_guard lock(mutex);
    out[static_cast<std::size_t>(comm.rank())] = run.stages()[0].grads;
    std::lock_guard counting(seen.mutex);
    seen.sums_reported += result.gradient_sums_overlapped;
  });
  return out;
}

}  // namespace

TEST_CASE("sums said final in the last gradient op land while it runs and equal the end-of-step sums", "[exec]") {
  for (const std::uint32_t replicas : {2U, 3U})
    for (const bool split : {false, true}) {
      const auto schedule = split ? zero_bubble_h1{}.make({2, 4}) : one_f_one_b{}.make({2, 4});
      INFO(schedule.name << " x " << replicas << " replicas");
      observations overlapped;
      observations plain;
      const auto posted = run_buckets<true>(schedule, replicas, true, overlapped);
      const auto at_end = run_buckets<true>(schedule, replicas, false, plain);
      CHECK(posted == at_end);
      for (const auto& rank : posted)
        for (std::size_t b = 0; b < buckets; ++b)
          CHECK(rank[b] == std::vector<double>(bucket_size, replicas * 4.0 * static_cast<double>(b + 1)));
      // Every bucket of every rank was summed before its final op returned.
      CHECK(overlapped.sums_seen_inside == static_cast<int>(2 * replicas * buckets));
      CHECK(overlapped.sums_missing_inside == 0);
      // The step reports those sums as overlapped, and none when nothing was said final.
      CHECK(overlapped.sums_reported == 2 * replicas * buckets);
      CHECK(plain.sums_reported == 0);
      // One final op per rank: the last W when split (the stage has a weight pass), else the last B.
      CHECK(overlapped.final_ops.size() == 2 * replicas);
      for (const auto& op : overlapped.final_ops) {
        INFO(op);
        CHECK(op.find(split ? ": W3" : ": B3") != std::string::npos);
      }
    }
}

TEST_CASE("without a weight pass a split schedule's final op is the last B", "[exec]") {
  observations seen;
  const auto posted = run_buckets<false>(zero_bubble_h1{}.make({2, 4}), 2, true, seen);
  CHECK(seen.final_ops.size() == 4);
  for (const auto& op : seen.final_ops) CHECK(op.find(": B3") != std::string::npos);
  CHECK(seen.sums_seen_inside == 2 * 2 * static_cast<int>(buckets));
  for (const auto& rank : posted) CHECK(rank[1] == std::vector<double>(bucket_size, 2 * 4.0 * 2));
}

TEST_CASE("gradients_ready outside the final op, twice for a buffer, for part of one or for another is refused",
          "[exec]") {
  const auto samples = generate_mixture("onevision", 8, 1);
  const auto lists = contiguous_microbatches(samples.size(), 4);
  const step_batch batch{samples, lists};
  struct early_stage : bucket_stage<false> {
    bool twice = false;
    void backward(stage_context& ctx) {
      if (twice && !ctx.final_gradients) return;
      ctx.gradients_ready(gradient_buffer::of(std::span<double>(grads[0])));
      if (twice) ctx.gradients_ready(gradient_buffer::of(std::span<double>(grads[0])));
    }
  };
  struct foreign_stage : bucket_stage<false> {
    std::vector<double> elsewhere = std::vector<double>(4, 1.0);
    void backward(stage_context& ctx) {
      // A buffer gradients() never returns: the sum would land in memory the stage may not hold.
      if (ctx.final_gradients) ctx.gradients_ready(gradient_buffer::of(std::span<double>(elsewhere)));
    }
  };
  // The message one step of a one-stage pipeline on two replicas of `stage` fails with.
  const auto failure_of = [&]<class Stage>(Stage stage) {
    return test::error_of<std::exception>([&] {
      run_inproc(2, [&](inproc_communicator& comm) {
        executor<inproc_communicator, Stage> run(comm, 1, std::vector<Stage>(1, stage), {.watchdog_seconds = 10});
        (void)run.step(one_f_one_b{}.make({1, 2}), batch);
      });
    });
  };
  CHECK_THAT(failure_of(foreign_stage{}), Catch::Contains("is none of the buffers the stage's gradients() returns"));
  struct partial_stage : bucket_stage<false> {
    void backward(stage_context& ctx) {
      // Part of a buffer gradients() returns whole: the end-of-step sum would add it twice.
      if (ctx.final_gradients) ctx.gradients_ready(gradient_buffer::of(std::span<double>(grads[0]).first(2)));
    }
  };
  CHECK_THAT(failure_of(partial_stage{}), Catch::Contains("covers part of a gradients() buffer"));
  for (const bool twice : {false, true}) {
    early_stage stage;
    stage.twice = twice;
    CHECK_THAT(failure_of(stage),
               Catch::Contains(twice ? "said final twice" : "not the stage's last gradient-producing op"));
  }
}

TEST_CASE("in-process started sums complete on the last member and check sizes", "[exec]") {
  std::vector<std::vector<double>> values(3);
  std::vector<std::string> errors(3);
  run_inproc(3, [&](inproc_communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    values[r] = {1.0 + static_cast<double>(r), 10.0};
    auto started = comm.all_reduce_sum_start(gradient_buffer::of(std::span<double>(values[r])));
    // A blocking sum after the started one: the two are matched by order, not mixed up.
    double also = static_cast<double>(r);
    comm.all_reduce_sum(gradient_buffer::of(std::span<double>(&also, 1)));
    CHECK(also == 3.0);
    comm.wait(started);
    // Sizes that disagree fail every member's wait.
    std::vector<double> odd(r == 1 ? 2 : 1, 1.0);
    auto bad = comm.all_reduce_sum_start(gradient_buffer::of(std::span<double>(odd)));
    try {
      comm.wait(bad);
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& v : values) CHECK(v == std::vector<double>{6.0, 30.0});
  for (const auto& e : errors) CHECK(e.find("passed") != std::string::npos);
}

TEST_CASE("a started sum a member never joins times out naming the sum, not a message", "[exec]") {
  // Rank 1 never starts the sum rank 0 waits for: the watchdog must say what was awaited.
  std::string text;
  try {
    run_inproc(
        2,
        [&](inproc_communicator& comm) {
          if (comm.rank() != 0) return;
          double value = 1.0;
          auto started = comm.all_reduce_sum_start(gradient_buffer::of(std::span<double>(&value, 1)));
          comm.wait(started);
        },
        0.2);
  } catch (const watchdog_timeout& e) {
    text = e.what();
  }
  CHECK(text.find("waiting for a started gradient all-reduce") != std::string::npos);
}
