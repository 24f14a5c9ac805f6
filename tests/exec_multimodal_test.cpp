// SPDX-License-Identifier: Apache-2.0
// The multimodal executor, run by threads, reproduces the multimodal sequential
// reference: bitwise with one replica and one TP rank everywhere, within 1e-12
// when the encoder's and the LLM's data-parallel degrees differ or stages are
// split over TP groups. It sends exactly the schedule's messages plus the
// hand-offs and TP broadcasts (counted here from the index lists), shapes vary
// from step to step without a handshake, a failing stage anywhere stops every
// rank, and both executors report per-op times when asked.
#include "../examples/train_toy/toy_model.hpp"
#include "exec_multimodal_support.hpp"
#include "gradient_difference.hpp"
#include "injected_failure.hpp"

#include <dflop/exec/executor.hpp>
#include <dflop/exec/handoff.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/multimodal_executor.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/schedule.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

using namespace dflop;

namespace {

using toy_executor = multimodal_executor<inproc_communicator, test::toy_encoder_stage, test::toy_llm_stage>;

toy_executor::stage_type make_stage(const world_layout& layout, const rank_role& role) {
  if (role.encoder()) return test::toy_encoder_stage(role.position);
  return test::toy_llm_stage(role.position, layout.positions(), layout.stages(module_kind::encoder));
}

struct multimodal_run {
  std::vector<double> losses;                     // per step (rank 0's view)
  std::vector<std::vector<double>> gradients;     // per position, last step: replica 0, summed over its TP ranks
  std::vector<std::vector<step_result>> results;  // [step][world rank]
  bool replicas_agree = true;
};

multimodal_run run_multimodal(const world_layout& layout, const pipeline_schedule& schedule,
                              const std::vector<test::batch_data>& batches, executor_options options = {}) {
  multimodal_run out;
  out.losses.resize(batches.size());
  out.results.assign(batches.size(), std::vector<step_result>(static_cast<std::size_t>(layout.world_size())));
  out.gradients.resize(layout.positions());
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<double>> seen;  // (position, TP rank) -> gradients
  std::mutex mutex;
  options.watchdog_seconds = 10;
  run_inproc(layout.world_size(), [&](inproc_communicator& comm) {
    toy_executor run(comm, layout, make_stage(layout, layout.role(comm.rank())), options);
    test::connect_tensor_group(run.stage(), run.tensor_group());
    for (std::size_t step = 0; step < batches.size(); ++step) {
      // As an optimizer would: the data-parallel sum makes every replica's gradients the step's total.
      std::visit([](auto& s) { std::ranges::fill(s.gradients(), 0.0); }, run.stage());
      auto result = run.step(schedule, batches[step].view());
      std::lock_guard lock(mutex);
      if (comm.rank() == 0) out.losses[step] = result.loss;
      out.results[step][static_cast<std::size_t>(comm.rank())] = std::move(result);
    }
    const auto role = run.role();
    const auto g = std::visit([](auto& s) { return s.gradients(); }, run.stage());
    const std::vector<double> values(g.begin(), g.end());
    std::lock_guard lock(mutex);
    if (role.replica == 0) {
      auto& sum = out.gradients[role.position];
      sum.resize(values.size(), 0.0);
      for (std::size_t i = 0; i < values.size(); ++i) sum[i] += values[i];  // TP shards are disjoint
    }
    auto& first = seen[{role.position, role.tp_rank}];
    if (first.empty()) first = values;
    else if (first != values) out.replicas_agree = false;
  });
  return out;
}

struct reference_run {
  std::vector<double> losses;                  // per step
  std::vector<std::vector<double>> gradients;  // per position, last step
};

reference_run run_reference(const world_layout& layout, const std::vector<test::batch_data>& batches,
                            std::uint32_t m) {
  std::vector<test::toy_encoder_stage> encoder;
  std::vector<test::toy_llm_stage> llm;
  for (std::uint32_t s = 0; s < layout.stages(module_kind::encoder); ++s) encoder.emplace_back(s);
  for (std::uint32_t s = 0; s < layout.stages(module_kind::llm); ++s)
    llm.emplace_back(layout.stages(module_kind::encoder) + s, layout.positions(), layout.stages(module_kind::encoder));
  reference_run out;
  for (const auto& batch : batches) {
    for (auto& s : encoder) std::ranges::fill(s.gradients(), 0.0);
    for (auto& s : llm) std::ranges::fill(s.gradients(), 0.0);
    out.losses.push_back(run_sequential(encoder, llm, batch.view(), m));
  }
  for (auto& s : encoder) out.gradients.emplace_back(s.gradients().begin(), s.gradients().end());
  for (auto& s : llm) out.gradients.emplace_back(s.gradients().begin(), s.gradients().end());
  return out;
}

double relative_difference(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  const auto [scale, diff] = test::compare_gradients(got, want);
  return scale > 0 ? diff / scale : diff;
}

std::size_t expected(const test::batch_data& data, const world_layout& layout, std::uint32_t m) {
  return test::expected_messages(data, m, layout.stages(module_kind::encoder), layout.replicas(module_kind::encoder), layout.tp(module_kind::encoder),
                                 layout.stages(module_kind::llm), layout.replicas(module_kind::llm), layout.tp(module_kind::llm));
}

void check_messages(const multimodal_run& run, const std::vector<test::batch_data>& batches,
                    const world_layout& layout, std::uint32_t m) {
  for (std::size_t step = 0; step < batches.size(); ++step) {
    std::size_t sent = 0;
    std::size_t received = 0;
    for (const auto& r : run.results[step]) {
      sent += r.messages_sent;
      received += r.messages_received;
    }
    INFO("step " << step);
    CHECK(sent == expected(batches[step], layout, m));
    CHECK(received == sent);
  }
}

void compare(const world_layout& layout, const pipeline_schedule& schedule,
             const std::vector<test::batch_data>& batches, double tolerance) {
  const std::uint32_t m = schedule.microbatches;
  const auto reference = run_reference(layout, batches, m);
  const auto run = run_multimodal(layout, schedule, batches);
  for (std::size_t step = 0; step < batches.size(); ++step) {
    INFO("step " << step << ": loss " << run.losses[step] << " vs " << reference.losses[step]);
    if (tolerance == 0) CHECK(run.losses[step] == reference.losses[step]);
    else CHECK(std::abs(run.losses[step] - reference.losses[step]) <= tolerance * std::abs(reference.losses[step]));
  }
  CHECK(run.replicas_agree);
  for (std::uint32_t p = 0; p < layout.positions(); ++p) {
    INFO("position " << p);
    if (tolerance == 0) CHECK(run.gradients[p] == reference.gradients[p]);
    else CHECK(relative_difference(run.gradients[p], reference.gradients[p]) <= tolerance);
    // Real gradients, not zeros that agree trivially.
    CHECK(*std::max_element(reference.gradients[p].begin(), reference.gradients[p].end()) > 0);
  }
  check_messages(run, batches, layout, m);
}

std::vector<pipeline_schedule> schedules(std::uint32_t positions, std::uint32_t m) {
  return {gpipe{}.make({positions, m}), one_f_one_b{}.make({positions, m}), zero_bubble_h1{}.make({positions, m})};
}

std::string describe(const world_layout& layout) {
  const auto module = [&](module_kind kind) {
    return std::to_string(layout.replicas(kind)) + "x" + std::to_string(layout.stages(kind)) + " tp" +
           std::to_string(layout.tp(kind));
  };
  return "encoder " + module(module_kind::encoder) + ", llm " + module(module_kind::llm);
}

}  // namespace

TEST_CASE("toy multimodal stages model the stage concept", "[exec][multimodal]") {
  STATIC_REQUIRE(pipeline_stage<test::toy_encoder_stage>);
  STATIC_REQUIRE(pipeline_stage<test::toy_llm_stage>);
  STATIC_REQUIRE(has_weight_pass<test::toy_llm_stage>);
}

TEST_CASE("handoff_routes: one message range per replica pair, LLM order kept with one encoder replica",
          "[exec][multimodal]") {
  const std::uint32_t m = 3;
  for (std::uint32_t encoders : {1U, 2U, 3U})
    for (std::uint32_t llms : {1U, 2U}) {
      INFO("encoders " << encoders << " llms " << llms);
      const auto data = test::make_batch(30, 5, m, encoders, llms);
      handoff_routes plan;
      plan.build(data.view(), m, encoders, llms);
      for (std::uint32_t k = 0; k < m; ++k) {
        for (std::uint32_t r = 0; r < llms; ++r) {
          const auto mine = plan.llm_samples(r, k);
          auto sorted = std::vector<std::uint32_t>(mine.begin(), mine.end());
          auto planned = data.llm[r * m + k];
          if (encoders == 1) CHECK(sorted == planned);
          std::sort(sorted.begin(), sorted.end());
          std::sort(planned.begin(), planned.end());
          CHECK(sorted == planned);  // the same samples, maybe regrouped
        }
        for (std::uint32_t e = 0; e < encoders; ++e) {
          const auto encoded = plan.encoder_samples(e, k);
          CHECK(encoded.size() == data.parts[e * m + k].size());
          for (std::uint32_t r = 0; r < llms; ++r) {
            CHECK(plan.feeds(e, r, k) == test::shares_samples(data, m, e, r, k));
            // The rows e sends r are one range on both sides, the same samples in the same order.
            const auto from = plan.encoder_range(e, r, k);
            const auto to = plan.llm_range(e, r, k);
            std::vector<std::uint32_t> sent(encoded.begin() + from.first, encoded.begin() + from.end);
            std::vector<std::uint32_t> arrived;
            const auto samples = plan.llm_samples(r, k);
            const auto sources = plan.llm_sources(r, k);
            for (std::uint32_t p = to.first; p < to.end; ++p) {
              if (sources[p] == handoff_routes::none) continue;  // text only: no rows
              CHECK(sources[p] == e);
              arrived.push_back(samples[p]);
            }
            CHECK(sent == arrived);
            for (auto i : sent) CHECK(std::count(data.llm[r * m + k].begin(), data.llm[r * m + k].end(), i) == 1);
          }
        }
      }
    }
}

TEST_CASE("handoff_routes rejects inconsistent lists", "[exec][multimodal]") {
  auto data = test::make_batch(12, 3, 2, 1, 1);
  handoff_routes plan;
  CHECK_THROWS_WITH(plan.build(data.view(), 2, 2, 1), Catch::Contains("encoder_parts has 2 lists"));
  auto orphan = data;
  orphan.parts[0].push_back(orphan.llm[1].front());  // a slot-1 sample encoded for slot 0
  CHECK_THROWS_WITH(plan.build(orphan.view(), 2, 1, 1), Catch::Contains("no LLM microbatch of that slot holds"));
  auto twice = data;
  twice.llm[0].push_back(twice.llm[0].front());
  CHECK_THROWS_WITH(plan.build(twice.view(), 2, 1, 1), Catch::Contains("two LLM microbatches"));
}

TEST_CASE("one replica and one TP rank everywhere equal the multimodal reference bit for bit", "[exec][multimodal]") {
  const std::uint32_t m = 4;
  for (const world_layout layout : {world_layout({1, 1, 1}, {1, 2, 1}), world_layout({1, 2, 1}, {1, 1, 1}),
                                         world_layout({1, 1, 1}, {1, 1, 1})})
    for (const auto& schedule : schedules(layout.positions(), m)) {
      INFO(describe(layout) << ", " << schedule.name);
      compare(layout, schedule, {test::make_batch(22, 7, m, 1, 1)}, 0.0);
    }
}

TEST_CASE("encoder and LLM data-parallel degrees differ: within 1e-12 of the reference", "[exec][multimodal]") {
  const std::uint32_t m = 4;
  for (const world_layout layout : {world_layout({1, 1, 2}, {1, 2, 1}), world_layout({1, 2, 1}, {1, 1, 2}),
                                         world_layout({1, 1, 3}, {1, 1, 2})})
    for (const auto& schedule : {one_f_one_b{}.make({layout.positions(), m}), zero_bubble_h1{}.make({layout.positions(), m})}) {
      INFO(describe(layout) << ", " << schedule.name);
      compare(layout, schedule, {test::make_batch(40, 11, m, layout.replicas(module_kind::encoder), layout.replicas(module_kind::llm))}, 1e-12);
    }
}

TEST_CASE("a slot order runs each schedule microbatch on its slot", "[exec][multimodal]") {
  const std::uint32_t m = 4;
  const world_layout layout({1, 1, 2}, {1, 2, 1});
  auto data = test::make_batch(30, 13, m, 2, 1);
  data.order = {2, 0, 3, 1};
  compare(layout, one_f_one_b{}.make({3, m}), {data}, 1e-12);
}

TEST_CASE("tensor-parallel stages: one hand-off per replica pair, then a broadcast in the TP group",
          "[exec][multimodal]") {
  const std::uint32_t m = 4;
  for (const world_layout layout : {world_layout({2, 1, 2}, {2, 2, 1}), world_layout({1, 1, 1}, {2, 1, 2})}) {
    INFO(describe(layout));
    compare(layout, one_f_one_b{}.make({layout.positions(), m}),
            {test::make_batch(24, 17, m, layout.replicas(module_kind::encoder), layout.replicas(module_kind::llm))}, 1e-12);
  }
}

TEST_CASE("shapes vary from step to step without a handshake", "[exec][multimodal]") {
  const std::uint32_t m = 3;
  const world_layout layout({1, 1, 2}, {1, 2, 1});
  std::vector<test::batch_data> batches{test::make_batch(18, 1, m, 2, 1), test::make_batch(33, 2, m, 2, 1),
                                        test::make_batch(9, 3, m, 2, 1)};
  compare(layout, one_f_one_b{}.make({3, m}), batches, 1e-12);
}

TEST_CASE("a stage that throws on any rank of either module stops every rank", "[exec][multimodal]") {
  const std::uint32_t m = 4;
  const world_layout layout({1, 1, 2}, {1, 2, 1});
  const auto data = test::make_batch(20, 9, m, 2, 1);
  const auto schedule = one_f_one_b{}.make({3, m});
  for (std::uint32_t bad = 0; bad < 3; ++bad)
    for (op_kind kind : {op_kind::forward, op_kind::backward}) {
      INFO("position " << bad << " " << kind_letter(kind));
      // A long watchdog: the other ranks can only stop this soon through the abort.
      try {
        run_inproc(
            layout.world_size(),
            [&](inproc_communicator& comm) {
              const auto role = layout.role(comm.rank());
              auto stage = make_stage(layout, role);
              if (role.position == bad && role.replica == 0)
                std::visit([&](auto& s) { s.fault = std::pair{kind, 1U}; }, stage);
              toy_executor run(comm, layout, std::move(stage), {.watchdog_seconds = 300});
              for (int step = 0; step < 2; ++step) (void)run.step(schedule, data.view());
            },
            300.0);
        FAIL("no exception");
      } catch (const stage_failure& failure) {
        test::check_injected_failure(failure, bad, kind);
        CHECK(layout.role(failure.rank()).position == bad);
      }
    }
}

namespace {
// An encoder stage whose output carries a header: not a per-sample sum, so the hand-off cannot split it.
struct headed_encoder_stage : test::toy_encoder_stage {
  using toy_encoder_stage::toy_encoder_stage;
  std::size_t output_bytes(const microbatch_view& mb) const { return toy_encoder_stage::output_bytes(mb) + 8; }
};
}  // namespace

TEST_CASE("multimodal misuse is reported in words", "[exec][multimodal]") {
  const std::uint32_t m = 2;
  const world_layout layout({1, 1, 1}, {1, 1, 1});
  const auto data = test::make_batch(8, 4, m, 1, 1);
  // The world must have the layout's ranks.
  CHECK_THROWS_WITH(run_inproc(3, [&](inproc_communicator& comm) {
                      toy_executor run(comm, layout, make_stage(layout, layout.role(0)));
                    }),
                    Catch::Contains("the layout needs 2 ranks, the world has 3"));
  // Interleaved schedules do not fit a multimodal pipeline.
  CHECK_THROWS_AS(run_inproc(2,
                             [&](inproc_communicator& comm) {
                               toy_executor run(comm, layout, make_stage(layout, layout.role(comm.rank())));
                               (void)run.step(interleaved_1f1b{2}.make({2, m}), data.view());
                             }),
                  schedule_error);
  // The encoder's output must be the sum of per-sample rows.
  using headed_executor = multimodal_executor<inproc_communicator, headed_encoder_stage, test::toy_llm_stage>;
  CHECK_THROWS_WITH(run_inproc(2,
                               [&](inproc_communicator& comm) {
                                 const auto role = layout.role(comm.rank());
                                 headed_executor::stage_type stage = headed_encoder_stage(0);
                                 if (!role.encoder()) stage = test::toy_llm_stage(1, 2, 1);
                                 headed_executor run(comm, layout, std::move(stage), {.watchdog_seconds = 2});
                                 (void)run.step(one_f_one_b{}.make({2, m}), data.view());
                               },
                               2.0),
                    Catch::Contains("not the sum over its samples"));
}

namespace {
template <class Ops>
void check_op_times(const step_result& result, const Ops& ops) {
  REQUIRE(result.op_times.size() == ops.size());
  double previous = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto& t = result.op_times[i];
    CHECK(t.kind == ops[i].kind);
    CHECK(t.microbatch == ops[i].microbatch);
    CHECK(t.stage == ops[i].stage);
    CHECK(t.start >= previous);
    CHECK(t.end >= t.start);
    CHECK(t.end <= result.seconds);
    previous = t.end;
  }
}
}  // namespace

TEST_CASE("both executors record per-op times when asked, and only then", "[exec][multimodal]") {
  const std::uint32_t m = 4;
  const world_layout layout({1, 1, 2}, {1, 2, 1});
  const auto data = test::make_batch(20, 9, m, 2, 1);
  const auto schedule = zero_bubble_h1{}.make({3, m});
  for (bool record : {false, true}) {
    const auto run = run_multimodal(layout, schedule, {data}, {.record_op_times = record});
    for (int rank = 0; rank < layout.world_size(); ++rank) {
      const auto& result = run.results[0][static_cast<std::size_t>(rank)];
      if (!record) CHECK(result.op_times.empty());
      else check_op_times(result, schedule.rank_ops[layout.role(rank).position]);
    }
  }

  const auto samples = generate_mixture("onevision", 16, 3);
  const auto lists = contiguous_microbatches(samples.size(), 2 * m);
  const auto pipeline = interleaved_1f1b{2}.make({2, m});
  std::mutex mutex;
  std::vector<step_result> results(4);
  run_inproc(4, [&](inproc_communicator& comm) {
    const auto rank = static_cast<std::uint32_t>(comm.rank()) % 2;
    std::vector<toy::mlp_stage> stages;
    for (std::uint32_t c = 0; c < 2; ++c) stages.emplace_back(c * 2 + rank, 4);
    executor<inproc_communicator, toy::mlp_stage> run(comm, 2, std::move(stages), {.record_op_times = true});
    auto result = run.step(pipeline, {samples, lists});
    std::lock_guard lock(mutex);
    results[static_cast<std::size_t>(comm.rank())] = std::move(result);
  });
  for (int rank = 0; rank < 4; ++rank) check_op_times(results[static_cast<std::size_t>(rank)], pipeline.rank_ops[static_cast<std::size_t>(rank % 2)]);
}
