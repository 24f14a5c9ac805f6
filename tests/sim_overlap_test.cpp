// SPDX-License-Identifier: Apache-2.0
// Overlapped gradient reduction in the multimodal simulator: buckets final over
// a stage's last gradient-producing op, each reduced once every replica has it
// and the previous bucket is done. Checked against the closed form
// end = max_i(max_q(s_q + (i + 1) T_q / n) + (n - i) t) on hand-timed pipelines.
#include <dflop/schedule.hpp>
#include <dflop/sim/multimodal.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

using namespace dflop;

namespace {

// An LLM-only iteration: one stage, `replicas` replicas, m microbatches; replica
// q's F and B take f and b + q * skew; `bytes` gradient bytes over `over`.
multimodal_costs one_stage(std::uint32_t replicas, std::uint32_t m, double f, double b, double skew, double bytes,
                           dflop::link over) {
  multimodal_costs c;
  c.microbatches = m;
  c.encoder.replicas = 0;
  c.llm.stages = 1;
  c.llm.replicas = replicas;
  for (std::uint32_t q = 0; q < replicas; ++q)
    for (std::uint32_t k = 0; k < m; ++k) {
      c.llm.forward.push_back(f);
      c.llm.backward.push_back(b + q * skew);
    }
  c.llm.gradient_bytes = {bytes};
  c.llm.gradient_link = over;
  return c;
}

// The closed form for buckets over ops [s_q, e_q) of every replica.
double closed_form(const std::vector<double>& s, const std::vector<double>& e, std::uint32_t n, double t) {
  double end = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    double ready = 0;
    for (std::size_t q = 0; q < s.size(); ++q) ready = std::max(ready, s[q] + (i + 1) * (e[q] - s[q]) / n);
    end = std::max(end, ready + (n - i) * t);
  }
  return end;
}

}  // namespace

TEST_CASE("bucketed reduction over one-stage 1F1B matches the closed form", "[sim]") {
  const dflop::link over{1e10, 2e-4};
  const auto schedule_for = [](std::uint32_t m) { return one_f_one_b{}.make({1, m}); };
  const auto t_of = [&](double bytes, std::uint32_t replicas) {
    return 2.0 * (replicas - 1.0) / replicas * bytes / over.bandwidth + over.latency;
  };
  int hidden = 0, exposed = 0;  // bucketed cases in each regime
  for (const std::uint32_t replicas : {2U, 3U, 5U})
    for (const std::uint32_t m : {1U, 3U})
      for (const double skew : {0.0, 0.05})
        for (const double bucket : {1e9, 2.5e8, 1e8, 3e7})
          for (const double bytes : {1e9, 2e10}) {  // reductions shorter / longer than the op's share
            const double f = 0.1, b = 0.2;
            multimodal_costs c = one_stage(replicas, m, f, b, skew, bytes, over);
            c.gradient_bucket_bytes = bucket;
            const simulation_result r = simulate(schedule_for(m), c);
            // One stage: F B F B ...; replica q's last B ends at m (f + b_q).
            std::vector<double> s, e;
            for (std::uint32_t q = 0; q < replicas; ++q) {
              const double bq = b + q * skew;
              e.push_back(m * (f + bq));
              s.push_back(e.back() - bq);
            }
            const auto n = static_cast<std::uint32_t>(std::ceil(bytes / bucket));
            if (n > 1) ++(t_of(bytes / n, replicas) <= b / n ? hidden : exposed);
            const double t = t_of(bytes / n, replicas);
            INFO("replicas " << replicas << " m " << m << " skew " << skew << " buckets " << n);
            CHECK(r.makespan == Approx(closed_form(s, e, n, t)).epsilon(1e-12));
            // The two regimes of the uniform case.
            if (skew == 0) {
              const double T = b;
              CHECK(r.makespan == Approx(t <= T / n ? e[0] + t : s[0] + T / n + n * t).epsilon(1e-12));
            }
            for (const auto& sync : r.gradient_sync) CHECK(sync.end == r.makespan);
          }
  CHECK(hidden > 10);
  CHECK(exposed > 10);
}

TEST_CASE("bucketed reduction over ZB-H1 follows the last W", "[sim]") {
  // Two LLM stages, split backward: the buckets follow each stage's last W.
  multimodal_costs c;
  c.microbatches = 4;
  c.encoder.replicas = 0;
  c.llm.stages = 2;
  c.llm.replicas = 2;
  const std::size_t n_ops = 2 * 4 * 2;
  c.llm.forward.assign(n_ops, 0.1);
  c.llm.backward.assign(n_ops, 0.1);
  c.llm.weight.assign(n_ops, 0.3);
  c.llm.gradient_bytes = {8e8, 8e8};
  c.llm.gradient_link = {1e9, 0};  // a bucket (0.1 s) outlasts its share of a W (0.3 / 8 s)
  c.gradient_bucket_bytes = 1e8;
  const auto schedule = zero_bubble_h1{}.make({2, 4});
  const simulation_result r = simulate(schedule, c);
  const simulation_result plain = [&] {
    multimodal_costs once = c;
    once.gradient_bucket_bytes = 0;
    return simulate(schedule, once);
  }();
  for (std::uint32_t p = 0; p < 2; ++p) {
    // The last W of position p on each replica, from the simulated op times.
    std::vector<double> s, e;
    for (std::uint32_t q = 0; q < 2; ++q) {
      const std::uint32_t rank = c.llm_rank(p, q);
      const auto& ops = schedule.rank_ops[p];
      std::size_t last = 0;
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (ops[i].kind == op_kind::weight) last = i;
      s.push_back(r.rank_timings(rank)[last].start);
      e.push_back(r.rank_timings(rank)[last].end);
      CHECK(plain.rank_timings(rank)[last] == r.rank_timings(rank)[last]);  // the reduction moves no op
    }
    const double t = 2.0 * 0.5 * 1e8 / 1e9;
    CHECK(r.gradient_sync[c.llm_rank(p, 0)].end == Approx(closed_form(s, e, 8, t)).epsilon(1e-12));
  }
  // No latency: overlapping is never slower, and here it hides part of the reduction.
  CHECK(r.makespan < plain.makespan);
}

TEST_CASE("one bucket is the plain reduction, and no latency makes buckets never slower", "[sim]") {
  for (const std::uint32_t m : {2U, 6U}) {
    multimodal_costs c;
    c.microbatches = m;
    c.encoder.stages = 1;
    c.encoder.replicas = 2;
    c.llm.stages = 2;
    c.llm.replicas = 2;
    for (std::uint32_t q = 0; q < 2; ++q)
      for (std::uint32_t k = 0; k < m; ++k) {
        c.encoder.forward.push_back(0.05 * (k + 1));
        c.encoder.backward.push_back(0.1 * (k + 1));
        for (std::uint32_t s = 0; s < 2; ++s) {
          c.llm.forward.push_back(0.1 + 0.01 * (q + k + s));
          c.llm.backward.push_back(0.2 + 0.02 * ((q + 2 * k + s) % 3));
        }
      }
    c.handoffs.assign(2 * m * 2, handoff{});
    for (std::uint32_t k = 0; k < m; ++k)
      for (std::uint32_t r = 0; r < 2; ++r) c.handoffs[c.handoff_at((k + r) % 2, k, r)] = {true, 0.01};
    c.encoder.gradient_bytes = {2e8};
    c.llm.gradient_bytes = {1e9, 9e8};
    for (const double latency : {0.0, 1e-3}) {
      c.encoder.gradient_link = c.llm.gradient_link = {5e9, latency};
      const auto schedule = one_f_one_b{}.make({3, m});
      c.gradient_bucket_bytes = 0;
      const simulation_result plain = simulate(schedule, c);
      c.gradient_bucket_bytes = 1e9;  // every stage's gradients fit one bucket
      const simulation_result one = simulate(schedule, c);
      CHECK(one.makespan == plain.makespan);
      CHECK(one.gradient_sync == plain.gradient_sync);
      c.gradient_bucket_bytes = 2.5e7;
      const simulation_result many = simulate(schedule, c);
      if (latency == 0) CHECK(many.makespan <= plain.makespan);
      // The cutoff stays a valid bound with buckets.
      multimodal_simulator simulator;
      CHECK(simulator.makespan_below(schedule, c, {}, many.makespan * 1.0001) == many.makespan);
      const double stopped = simulator.makespan_below(schedule, c, {}, many.makespan * 0.9);
      CHECK((stopped == std::numeric_limits<double>::infinity() || stopped == many.makespan));
    }
  }
}

TEST_CASE("bucket sizes that are negative, not finite or too small are refused", "[sim]") {
  multimodal_costs c = one_stage(2, 2, 0.1, 0.2, 0, 1e9, {1e10, 0});
  const auto schedule = one_f_one_b{}.make({1, 2});
  for (const double bad : {-1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    c.gradient_bucket_bytes = bad;
    CHECK_THROWS_WITH(simulate(schedule, c), Catch::Contains("gradient_bucket_bytes"));
  }
  c.gradient_bucket_bytes = 10;  // 1e8 buckets
  CHECK_THROWS_WITH(simulate(schedule, c), Catch::Contains("buckets"));
}

TEST_CASE("the distributed optimizer: a gather before each replica's first op, reduce-scatters in buckets after",
          "[sim]") {
  // Closed form on one stage: replica q's ops run back to back from the gather's
  // end g, so its last B is [g + m (f + b_q) - b_q, g + m (f + b_q)); the buckets
  // follow the closed form with reduce-scatters of half the ring's traffic (one
  // bucket: after the slowest replica's last op).
  const dflop::link over{1e10, 2e-4};
  for (const std::uint32_t replicas : {2U, 3U, 5U})
    for (const std::uint32_t m : {1U, 4U})
      for (const double bucket : {0.0, 1e9, 1e8}) {
        const double f = 0.1, b = 0.2, skew = 0.03, bytes = 4e9, parameters = 2e9;
        multimodal_costs c = one_stage(replicas, m, f, b, skew, bytes, over);
        c.gradient_bucket_bytes = bucket;
        c.llm.sharded_parameter_bytes = {parameters};
        const simulation_result r = simulate(one_f_one_b{}.make({1, m}), c);
        const double d = replicas;
        const double gather = (d - 1) / d * parameters / over.bandwidth + over.latency;
        const auto n = static_cast<std::uint32_t>(bucket > 0 ? std::ceil(bytes / bucket) : 1);
        const double scatter = (d - 1) / d * (bytes / n) / over.bandwidth + over.latency;
        std::vector<double> s, e;
        for (std::uint32_t q = 0; q < replicas; ++q) {
          const double bq = b + q * skew;
          e.push_back(gather + m * (f + bq));
          s.push_back(e.back() - bq);
        }
        const double last = e.back();
        INFO("replicas " << replicas << " m " << m << " buckets " << n);
        CHECK(r.makespan == Approx(closed_form(s, e, n, scatter)).epsilon(1e-12));
        if (n == 1) CHECK(r.makespan == Approx(last + scatter).epsilon(1e-12));
        for (std::uint32_t q = 0; q < replicas; ++q) {
          CHECK(r.rank_timings(q).front().start == Approx(gather).epsilon(1e-12));
          CHECK(r.parameter_gather[q].start == 0);
          CHECK(r.parameter_gather[q].end == Approx(gather).epsilon(1e-12));
          // The first bucket waits for the slowest replica (the last: its B ends latest and is longest).
          CHECK(r.gradient_sync[q].start == Approx(s.back() + (e.back() - s.back()) / n).epsilon(1e-12));
        }
        // Unsharded, the same iteration ends a whole all-reduce after the last op (no buckets).
        c.llm.sharded_parameter_bytes.clear();
        c.gradient_bucket_bytes = 0;
        const double whole = 2 * (d - 1) / d * bytes / over.bandwidth + over.latency;
        CHECK(simulate(one_f_one_b{}.make({1, m}), c).makespan ==
              Approx(m * (f + b + (replicas - 1) * skew) + whole).epsilon(1e-12));
      }
}

TEST_CASE("a module's gradient reduction and parameter gather per stage: closed forms", "[sim]") {
  module_costs module;
  module.stages = 2;
  module.replicas = 4;
  module.gradient_bytes = {100e6, 0};
  module.gradient_link = {2e9, 1e-5};
  // 100 MB in 25 MB buckets: 4 ring all-reduces of 25 MB over 4 replicas.
  const auto bucketed = module.gradient_reduction(0, 25e6);
  CHECK(bucketed.buckets == 4);
  CHECK(bucketed.bucket_seconds == Approx(2.0 * 3 / 4 * 25e6 / 2e9 + 1e-5));
  // 30 MB buckets: ceil(100 / 30) = 4 buckets of 25 MB each; 0: one of 100 MB.
  CHECK(module.gradient_reduction(0, 30e6).buckets == 4);
  CHECK(module.gradient_reduction(0, 0).buckets == 1);
  CHECK(module.gradient_reduction(0, 0).bucket_seconds == Approx(2.0 * 3 / 4 * 100e6 / 2e9 + 1e-5));
  // No bytes, or one replica: nothing to reduce.
  CHECK(module.gradient_reduction(1, 25e6).buckets == 0);
  CHECK(module.parameter_gather_seconds(0) == 0);
  CHECK_FALSE(module.sharded_optimizer());
  // The distributed optimizer: reduce-scatters (half the traffic), and a gather of the parameters.
  module.sharded_parameter_bytes = {50e6, 10e6};
  CHECK(module.sharded_optimizer());
  CHECK(module.gradient_reduction(0, 25e6).bucket_seconds == Approx(3.0 / 4 * 25e6 / 2e9 + 1e-5));
  CHECK(module.parameter_gather_seconds(1) == Approx(3.0 / 4 * 10e6 / 2e9 + 1e-5));
  CHECK_THROWS_WITH(module.gradient_reduction(0, 1e-3), Catch::Contains("more than 1000000 buckets"));
  module.replicas = 1;
  CHECK_FALSE(module.sharded_optimizer());
  CHECK(module.gradient_reduction(0, 25e6).buckets == 0);
  CHECK(module.parameter_gather_seconds(0) == 0);
}
