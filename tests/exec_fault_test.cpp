// SPDX-License-Identifier: Apache-2.0
// A stage that throws on any rank stops every rank at once and the original error
// (rank, stage, op, microbatch, message) comes back; a rank that hangs is caught
// by the watchdog.
#include "../examples/train_toy/toy_model.hpp"
#include "injected_failure.hpp"

#include <dflop/exec/executor.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/schedule.hpp>
#include <dflop/workload/mixture.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace dflop;

namespace {

// The toy stage, with a fault or a hang injected at one (stage, kind, microbatch).
class faulty_stage : public toy::mlp_stage {
public:
  faulty_stage(std::uint32_t stage, std::uint32_t stages, std::uint32_t bad_stage, op_kind bad_kind, double hang = 0)
      : mlp_stage(stage, stages), stage_(stage), bad_stage_(bad_stage), bad_kind_(bad_kind), hang_(hang) {}
  void forward(stage_context& ctx) {
    trip(ctx);
    mlp_stage::forward(ctx);
  }
  void backward(stage_context& ctx) {
    trip(ctx);
    mlp_stage::backward(ctx);
  }

private:
  void trip(const stage_context& ctx) const {
    if (stage_ != bad_stage_ || ctx.kind != bad_kind_ || ctx.microbatch != 1) return;
    if (hang_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(hang_));
    else throw std::runtime_error("injected fault");
  }
  std::uint32_t stage_;
  std::uint32_t bad_stage_;
  op_kind bad_kind_;
  double hang_;
};

void run_faulty(std::uint32_t ranks, std::uint32_t replicas, std::uint32_t bad_stage, op_kind kind, double hang,
                double watchdog) {
  const auto samples = generate_mixture("onevision", 16, 5);
  const std::uint32_t m = 4;
  const auto lists = contiguous_microbatches(samples.size(), replicas * m);
  const auto schedule = one_f_one_b{}.make({ranks, m});
  run_inproc(
      static_cast<int>(ranks * replicas),
      [&](inproc_communicator& comm) {
        const auto stage = static_cast<std::uint32_t>(comm.rank()) % ranks;
        std::vector<faulty_stage> stages;
        stages.emplace_back(stage, ranks, bad_stage, kind, hang);
        executor<inproc_communicator, faulty_stage> run(comm, ranks, std::move(stages),
                                                        {.watchdog_seconds = watchdog});
        for (int step = 0; step < 2; ++step) (void)run.step(schedule, {samples, lists});
      },
      watchdog);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("a throwing stage on any rank stops all ranks with the original error", "[exec]") {
  for (std::uint32_t replicas : {1U, 2U})
    for (op_kind kind : {op_kind::forward, op_kind::backward})
      for (std::uint32_t bad = 0; bad < 4; ++bad) {
        INFO("replicas " << replicas << " stage " << bad << " " << kind_letter(kind));
        const auto start = std::chrono::steady_clock::now();
        try {
          run_faulty(4, replicas, bad, kind, 0, 2.0);
          FAIL("no exception");
        } catch (const stage_failure& failure) {
          test::check_injected_failure(failure, bad, kind);
          CHECK(static_cast<std::uint32_t>(failure.rank()) % 4 == bad);
          CHECK(std::string(failure.what()).find("injected fault") != std::string::npos);
        }
        CHECK(seconds_since(start) < 1.0);  // stopped by the abort, not by the 2 s watchdog
      }
}

TEST_CASE("a hanging stage is caught by the watchdog on the other ranks", "[exec]") {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(run_faulty(3, 1, 1, op_kind::forward, 0.6, 0.2), watchdog_timeout);
  // The others give up after 0.2 s; the join then waits for the sleeping stage (0.6 s).
  CHECK(seconds_since(start) < 2.0);
}

TEST_CASE("a message of the wrong size is an error, not a hang", "[exec]") {
  inproc_world world(2, 1.0);
  inproc_communicator a(world, 0);
  inproc_communicator b(world, 1);
  std::vector<std::byte> out(16);
  std::vector<std::byte> in(8);
  auto send = a.send(1, 3, out);
  auto receive = b.receive(0, 3, in);
  CHECK_THROWS_AS(b.wait(receive), error);
  CHECK_THROWS_AS(a.wait(send), error);
}

TEST_CASE("members summing buffers of different sizes or types get an error, not a corrupted sum", "[exec]") {
  for (const bool other_type : {false, true}) {
    INFO((other_type ? "floats vs doubles" : "3 vs 2 doubles"));
    std::vector<std::string> errors(3);
    std::vector<std::vector<double>> doubles(3, std::vector<double>{1.0, 2.0});
    std::vector<float> floats{1.0F, 2.0F};
    doubles[1].push_back(3.0);
    run_inproc(3, [&](inproc_communicator& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      auto buffer = gradient_buffer::of(std::span<double>(doubles[r]));
      if (r == 1 && other_type) buffer = gradient_buffer::of(std::span<float>(floats));
      if (r == 1 && !other_type) buffer.count = 3;
      try {
        comm.all_reduce_sum(buffer);
      } catch (const error& e) {
        errors[r] = e.what();
      }
    });
    for (const auto& text : errors) CHECK_THAT(text, Catch::Contains("all_reduce_sum: rank"));
    CHECK(doubles[0] == std::vector<double>{1.0, 2.0});  // nothing summed
    CHECK(doubles[2] == std::vector<double>{1.0, 2.0});
  }
}
