// SPDX-License-Identifier: Apache-2.0
// The profiler's logic with a fake timer (exact, no clocks): grid order,
// warm-up and repeats, median and spread, memory probes, validation, the
// profile CSV round trip and the fit.
#include "error_of.hpp"

#include <dflop/cost/profile.hpp>
#include <dflop/cost/table_cost_model.hpp>
#include <dflop/runtime/profile_writer.hpp>
#include <dflop/runtime/profiler.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

using dflop::module_kind;
using dflop::module_part;
using dflop::profile_case;
using dflop::profile_size;

namespace {

const dflop::module_piece llm_layer{module_kind::llm, module_part::layer};
const dflop::module_piece lm_head{module_kind::llm, module_part::head};
const dflop::module_piece encoder_layer{module_kind::encoder, module_part::layer};

//! What the fake timer reports: the duration the target announced for the run it just did.
struct fake_clock {
  double next_duration = 0;   // set by the target inside the timed work
  std::size_t measured = 0;   // timer calls
  double memory_in_use = 0;   // bytes, for the memory probes
};

//! A timer policy that runs the work and returns what the work announced: exact timings.
struct fake_timer {
  fake_clock* clock = nullptr;
  template <class Work>
  double measure(Work&& work) {
    clock->next_duration = -1;
    work();
    ++clock->measured;
    return clock->next_duration;
  }
};

//! A fake timer that also probes memory, as the CUDA event timer does.
struct fake_memory_timer : fake_timer {
  [[nodiscard]] double memory_in_use() const { return clock->memory_in_use; }
};

static_assert(dflop::profiling_timer<fake_timer>);
static_assert(!dflop::memory_probing_timer<fake_timer>);
static_assert(dflop::memory_probing_timer<fake_memory_timer>);

//! A stage whose k-th timed run at size n takes cost(n) x jitter[k % 5] (forward) and twice
//! that (backward); its forward leaves n x 1000 bytes in use until its backward.
struct fake_stage {
  fake_clock* clock;
  double a = 1e-4, b = 2e-7, c = 3e-11;
  std::vector<profile_case> prepared{};
  std::vector<std::string> calls{};
  std::size_t forwards = 0;
  static constexpr double jitter[5] = {1.2, 0.9, 1.0, 1.4, 0.8};  // median 1.0, q1 0.9, q3 1.2

  [[nodiscard]] double cost(const profile_case& at) const { return (a + b * at.size + c * at.size * at.size) / at.tp; }
  void prepare(const profile_case& at) { prepared.push_back(at); }
  void forward(const profile_case& at) {
    calls.push_back(std::string("F").append(std::to_string(at.count())));
    clock->next_duration = cost(at) * jitter[forwards++ % 5];
    clock->memory_in_use += at.size * 1000;
  }
  void backward(const profile_case& at) {
    calls.push_back(std::string("B").append(std::to_string(at.count())));
    clock->next_duration = 2 * cost(at) * jitter[(forwards - 1) % 5];
    clock->memory_in_use -= at.size * 1000;
  }
};

dflop::profile_grid llm_grid() { return {profile_size::tokens, {512, 1024, 2048, 4096}, {1, 2}}; }

}  // namespace

TEST_CASE("summarize: median, quartiles and extremes by interpolation", "[runtime][profiler]") {
  const std::vector<double> five{5, 1, 4, 2, 3};
  CHECK(dflop::summarize(five) == dflop::timing_summary{3, 1, 5, 2, 4, 5});
  const std::vector<double> four{4, 1, 3, 2};  // positions 0.75, 1.5, 2.25
  const auto even = dflop::summarize(four);
  CHECK(even.median == 2.5);
  CHECK(even.lower_quartile == 1.75);
  CHECK(even.upper_quartile == 3.25);
  CHECK(even.interquartile_range() == 1.5);
  CHECK(even.relative_spread() == Approx(0.6));
  const std::vector<double> one{7};
  CHECK(dflop::summarize(one) == dflop::timing_summary{7, 7, 7, 7, 7, 1});
  CHECK(dflop::test::error_of<dflop::error>([] { (void)dflop::summarize(std::vector<double>{}); }) ==
        "summarize: no measurements to summarize");
}

TEST_CASE("the profiler walks TP degrees then sizes, warms up, repeats and keeps the median", "[runtime][profiler]") {
  fake_clock clock;
  fake_stage stage{&clock};
  dflop::profiler<fake_timer> profiler({.warmup = 2, .repeats = 5}, fake_timer{&clock});
  profiler.measure(llm_layer, llm_grid(), stage);

  // prepare once per point, tp outer, sizes inner.
  REQUIRE(stage.prepared.size() == 8);
  CHECK(stage.prepared[0] == profile_case{llm_layer, 1, profile_size::tokens, 512});
  CHECK(stage.prepared[3] == profile_case{llm_layer, 1, profile_size::tokens, 4096});
  CHECK(stage.prepared[4] == profile_case{llm_layer, 2, profile_size::tokens, 512});
  // (2 warm-up + 5 timed) forward-backward pairs per point; only the timed ones hit the timer.
  CHECK(stage.calls.size() == 8 * 7 * 2);
  CHECK(stage.calls[0] == "F512");
  CHECK(stage.calls[1] == "B512");
  CHECK(stage.calls[14] == "F1024");
  CHECK(clock.measured == 8 * 5 * 2);

  const auto& table = profiler.table();
  CHECK(table.size == profile_size::tokens);
  REQUIRE(table.curves.size() == 2);
  CHECK(table.curves[0].tp == 1);
  CHECK(table.curves[1].tp == 2);
  REQUIRE(profiler.points().size() == 8);
  std::size_t line = 2;
  for (std::size_t k = 0; k < 2; ++k)
    for (std::size_t i = 0; i < 4; ++i) {
      const auto& point = table.curves[k].points[i];
      const auto& stats = profiler.points()[k * 4 + i];
      CHECK(point.line == line++);
      CHECK(stats.at == profile_case{llm_layer, table.curves[k].tp, profile_size::tokens, point.size});
      const double cost = stage.cost(stats.at);
      // Each point's 5 timed runs see the jitters in some rotation: median 1.0, q1 0.9, q3 1.2.
      CHECK(point.forward_seconds == Approx(cost).epsilon(1e-12));
      CHECK(point.backward_seconds == Approx(2 * cost).epsilon(1e-12));
      CHECK(stats.forward.minimum == Approx(0.8 * cost).epsilon(1e-12));
      CHECK(stats.forward.maximum == Approx(1.4 * cost).epsilon(1e-12));
      CHECK(stats.forward.lower_quartile == Approx(0.9 * cost).epsilon(1e-12));
      CHECK(stats.forward.upper_quartile == Approx(1.2 * cost).epsilon(1e-12));
      CHECK(stats.forward.samples == 5);
      CHECK_FALSE(point.activation_bytes.has_value());
      CHECK_FALSE(stats.activation_bytes.has_value());
    }
}

TEST_CASE("a plain callable is profiled as a forward pass with a zero backward", "[runtime][profiler]") {
  fake_clock clock;
  int runs = 0;
  dflop::profiler<fake_timer> profiler({.warmup = 1, .repeats = 3}, fake_timer{&clock});
  profiler.measure(lm_head, {profile_size::tokens, {100, 200, 300}, {1}}, [&](const profile_case& at) {
    ++runs;
    clock.next_duration = at.size * 1e-6;
  });
  CHECK(runs == 3 * 4);
  REQUIRE(profiler.table().curves.size() == 1);
  const auto& points = profiler.table().curves[0].points;
  CHECK(points[1].forward_seconds == Approx(200e-6));
  CHECK(points[1].backward_seconds == 0);
}

TEST_CASE("memory: the host hook, or else the timer's probe, measures what a forward leaves", "[runtime][profiler]") {
  SECTION("host hook") {
    fake_clock clock;
    fake_stage stage{&clock};
    dflop::profiler<fake_timer> profiler({.warmup = 1, .repeats = 3, .memory_probe = [&] { return clock.memory_in_use; }},
                                         fake_timer{&clock});
    profiler.measure(llm_layer, {profile_size::tokens, {512, 1024, 2048}, {1}}, stage);
    for (const auto& point : profiler.table().curves[0].points) {
      REQUIRE(point.activation_bytes.has_value());
      CHECK(*point.activation_bytes == point.size * 1000);
    }
    CHECK(profiler.points()[2].activation_bytes->median == 2048 * 1000);
  }
  SECTION("timer probe (as cudaMemGetInfo)") {
    fake_clock clock;
    fake_stage stage{&clock};
    dflop::profiler<fake_memory_timer> profiler({.repeats = 2}, fake_memory_timer{{&clock}});
    profiler.measure(llm_layer, {profile_size::tokens, {512, 1024, 2048}, {1}}, stage);
    CHECK(profiler.table().curves[0].points[1].activation_bytes == 1024 * 1000.0);
  }
}

TEST_CASE("the profiler rejects bad grids and options, saying which entry and why", "[runtime][profiler]") {
  using dflop::test::error_of;
  fake_clock clock;
  fake_stage stage{&clock};
  dflop::profiler<fake_timer> profiler({}, fake_timer{&clock});
  const auto measure = [&](dflop::module_piece piece, dflop::profile_grid grid) {
    return error_of([&] { profiler.measure(piece, grid, stage); });
  };
  CHECK(measure(llm_layer, {profile_size::tokens, {}, {1}}) == "profile_grid for 'llm': no sizes to profile");
  CHECK(measure(llm_layer, {profile_size::tokens, {512}, {}}) == "profile_grid for 'llm': no TP degrees to profile");
  CHECK(measure(llm_layer, {profile_size::tokens, {512, 0}, {1}}) ==
        "profile_grid for 'llm': sizes[1] = 0.000000: sizes must be finite and > 0");
  CHECK(measure(llm_layer, {profile_size::tokens, {512, 1024, 512}, {1}}) ==
        "profile_grid for 'llm': sizes[2] repeats sizes[0] (512.000000)");
  CHECK(measure(llm_layer, {profile_size::tokens, {512}, {1, 0}}) ==
        "profile_grid for 'llm': tp_degrees[1] = 0: TP degrees must be in [1, 1024]");
  CHECK(measure(llm_layer, {profile_size::tokens, {512}, {2, 2}}) ==
        "profile_grid for 'llm': tp_degrees[1] repeats tp_degrees[0] (2)");
  CHECK(measure(lm_head, {profile_size::items, {1, 2, 4}, {1}}) ==
        "profile_grid for 'lm_head': an LLM part is profiled by tokens, not items");
  CHECK(profiler.table().curves.empty());  // nothing was measured by the rejected calls

  profiler.measure(llm_layer, {profile_size::tokens, {512, 1024, 2048}, {1}}, stage);
  CHECK(measure(llm_layer, {profile_size::tokens, {512, 1024, 2048}, {2, 1}}) ==
        "profile_grid for 'llm': tp 1 was profiled already for this part");
  CHECK(measure(encoder_layer, {profile_size::items, {1, 2, 4}, {1}}) ==
        "profile_grid for 'encoder': sizes count items but this profiler's table counts tokens (one profile has "
        "one size column)");
  CHECK(profiler.table().curves.size() == 1);

  CHECK(error_of([] { dflop::profiler<> bad({.warmup = -1}); }) == "profiler_options::warmup: must be >= 0, got -1");
  CHECK(error_of([] { dflop::profiler<> bad({.repeats = 0}); }) == "profiler_options::repeats: must be >= 1, got 0");
  // A target that throws mid-grid leaves nothing behind; the part can be profiled again.
  dflop::profiler<fake_timer> fresh({}, fake_timer{&clock});
  CHECK(error_of<std::runtime_error>([&] {
          fresh.measure(llm_layer, llm_grid(), [&](const profile_case& at) {
            if (at.tp == 2) throw std::runtime_error("tp 2 group is not set up");
            clock.next_duration = 1e-3;
          });
        }) == "tp 2 group is not set up");
  CHECK(fresh.table().curves.empty());
  CHECK(fresh.points().empty());
  fresh.measure(llm_layer, {profile_size::tokens, {512, 1024, 2048}, {1, 2}}, stage);
  CHECK(fresh.table().curves[0].points[0].line == 2);
  CHECK(fresh.points().size() == 6);
  // A fit needs three sizes per curve; the error names the profile.
  dflop::profiler<fake_timer> short_profile({.source = "short.csv"}, fake_timer{&clock});
  short_profile.measure(llm_layer, {profile_size::tokens, {512, 1024}, {1}}, stage);
  CHECK(error_of([&] { (void)short_profile.fit(); }) ==
        "short.csv:2: module 'llm' at tp 1 has 2 sizes; a quadratic fit needs at least 3");
}

TEST_CASE("a measured profile survives the CSV round trip and fits its curve exactly", "[runtime][profiler]") {
  fake_clock clock;
  fake_stage stage{&clock};
  dflop::profiler<fake_timer> profiler({.warmup = 0, .repeats = 5, .memory_probe = [&] { return clock.memory_in_use; },
                                        .source = "measured.csv"},
                                       fake_timer{&clock});
  profiler.measure(llm_layer, llm_grid(), stage);
  fake_stage head{&clock, 5e-5, 1e-7, 0};
  profiler.measure(lm_head, {profile_size::tokens, {512, 1024, 2048}, {1}}, head);
  const auto& measured = profiler.table();

  const std::string csv = dflop::profile_csv(measured);
  CHECK(csv.substr(0, csv.find('\n')) == "module,tp,tokens,forward_ms,backward_ms,memory_mib");
  const auto read = dflop::read_profile_text(csv, "measured.csv");
  REQUIRE(read.curves.size() == measured.curves.size());
  CHECK(read.size == measured.size);
  for (std::size_t k = 0; k < read.curves.size(); ++k) {
    const auto& a = measured.curves[k];
    const auto& b = read.curves[k];
    CHECK(b.piece == a.piece);
    CHECK(b.tp == a.tp);
    REQUIRE(b.points.size() == a.points.size());
    for (std::size_t i = 0; i < a.points.size(); ++i) {
      CHECK(b.points[i].size == a.points[i].size);
      CHECK(b.points[i].line == a.points[i].line);
      CHECK(b.points[i].forward_seconds == Approx(a.points[i].forward_seconds).epsilon(1e-14));
      CHECK(b.points[i].backward_seconds == Approx(a.points[i].backward_seconds).epsilon(1e-14));
      CHECK(*b.points[i].activation_bytes == Approx(*a.points[i].activation_bytes).epsilon(1e-14));
    }
  }
  // The table cost model reads the written file and prices a profiled size as measured.
  const std::string path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/runtime_profile.csv";
  dflop::write_profile_file(path, measured);
  CHECK(dflop::read_profile_file(path).curves.size() == 3);

  // The medians are exact quadratics, so the fit recovers the coefficients.
  const auto fitted = profiler.fit();
  REQUIRE(fitted.curves().size() == 3);
  for (const auto& curve : fitted.curves()) {
    if (curve.piece == lm_head) {
      CHECK(curve.forward.b == Approx(1e-7).epsilon(1e-9));
      continue;
    }
    CHECK(curve.forward.a == Approx(stage.a / curve.tp).epsilon(1e-9));
    CHECK(curve.forward.b == Approx(stage.b / curve.tp).epsilon(1e-9));
    CHECK(curve.forward.c == Approx(stage.c / curve.tp).epsilon(1e-9));
    CHECK(curve.backward.c == Approx(2 * stage.c / curve.tp).epsilon(1e-9));
  }
}

TEST_CASE("the profile writer refuses tables the reader could not read back", "[runtime][profiler]") {
  using dflop::test::error_of;
  dflop::profile table{"t.csv", profile_size::tokens, {}};
  CHECK(error_of<dflop::error>([&] { (void)dflop::profile_csv(table); }) ==
        "write_profile: the profile has no points (a profile CSV needs at least one row)");
  table.curves.push_back({llm_layer, 1, profile_size::tokens, {{512, 1e-3, 2e-3, 1e6, 2}, {1024, 2e-3, 4e-3, {}, 3}}, ""});
  CHECK(error_of<dflop::error>([&] { (void)dflop::profile_csv(table); }).starts_with(
      "write_profile: some points have activation memory and some do not"));
  table.curves[0].points[1].activation_bytes = 2e6;
  table.curves[0].points[1].forward_seconds = -1;
  CHECK(error_of<dflop::error>([&] { (void)dflop::profile_csv(table); }) ==
        "write_profile: 'llm' at tp 1, size 1024.000000: times must be finite and >= 0");
  table.curves[0].points[1].forward_seconds = 2e-3;
  table.size = profile_size::items;
  CHECK(error_of<dflop::error>([&] { (void)dflop::profile_csv(table); }) ==
        "write_profile: 'llm' at tp 1 counts tokens but the table's size column is items");
  table.size = profile_size::tokens;
  CHECK(dflop::profile_csv(table) ==
        "module,tp,tokens,forward_ms,backward_ms,memory_mib\nllm,1,512,1,2,0.95367431640625\n"
        "llm,1,1024,2,4,1.9073486328125\n");
  CHECK(error_of([&] { dflop::write_profile_file("/nonexistent-dir/x.csv", table); }) ==
        "/nonexistent-dir/x.csv: cannot open file for writing");
}
