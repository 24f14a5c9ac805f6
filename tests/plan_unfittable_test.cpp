// SPDX-License-Identifier: Apache-2.0
// Samples no configuration can hold: the planner's bisection over token counts
// and Pareto front against a brute force over every candidate, stage and
// sample; the error that names them; planning without them when asked; and
// byte counts that saturate instead of wrapping.
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/trace.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using dflop::analytic_memory_model;
using dflop::flops_cost_model;
using dflop::parallel_config;
using small_planner = dflop::planner<flops_cost_model, analytic_memory_model>;

namespace {

dflop::planner_options small_options(int global_batch = 16) {
  dflop::planner_options options;
  options.global_batch = global_batch;
  options.batches = 2;
  options.seed = 3;
  options.baselines = false;
  options.batch.order_budget = 8;
  return options;
}

small_planner make_planner(const dflop::cluster_spec& cluster, dflop::planner_options options = small_options()) {
  const auto model = dflop::test::small_model();
  return small_planner(model, cluster, flops_cost_model(model, cluster.gpu), analytic_memory_model(model),
                       std::move(options));
}

// Samples whose token counts spread over five decades (log-uniform), so a
// memory-tight cluster holds some alone and not others.
std::vector<dflop::sample> heavy_tailed_workload(std::size_t count, std::uint64_t seed) {
  dflop::random_generator random(seed);
  const auto log_uniform = [&](double low, double high) {
    return static_cast<std::int64_t>(std::exp(std::log(low) + random.uniform() * (std::log(high) - std::log(low))));
  };
  std::vector<dflop::sample> samples;
  for (std::size_t i = 0; i < count; ++i) {
    std::string id = "t";  // appended: GCC 12 at -O3 warns falsely (-Wrestrict) on "t" + std::to_string(i)
    id.append(std::to_string(i));
    dflop::sample s{id, dflop::modality::text, 0, 0, log_uniform(100, 1e7)};
    if (random.uniform() < 0.6) {
      s.kind = dflop::modality::image;
      s.encoder_items = 1 + static_cast<std::int64_t>(random.uniform() * 8);
      s.encoder_tokens = s.encoder_items * log_uniform(50, 1e6);
      // LLM tokens drawn apart from encoder tokens, so either module can be the one that does not fit.
    }
    samples.push_back(s);
  }
  return samples;
}

// Brute force: positions of the samples that no candidate (with its most
// memory-saving variant) holds alone on every stage, by pricing each one.
std::vector<std::size_t> brute_force_unfittable(small_planner& planner, const dflop::multimodal_spec& model,
                                                const dflop::cluster_spec& cluster,
                                                const std::vector<dflop::sample>& workload) {
  const analytic_memory_model memory(model);
  const double capacity = static_cast<double>(cluster.gpu.memory_bytes) * (1 - small_options().memory_headroom);
  std::vector<char> fits(workload.size(), 0);
  std::set<std::pair<std::string, std::string>> seen;  // (encoder, llm) shapes already priced
  for (const parallel_config& base : planner.candidates()) {
    const parallel_config saver = planner.memory_variants(base).back();
    std::ostringstream key_e, key_l;
    key_e << saver.encoder.tp << saver.encoder.pp << saver.encoder.dp << saver.encoder.recompute
          << saver.encoder.distributed_optimizer;
    key_l << saver.llm.tp << saver.llm.pp << saver.llm.dp << saver.llm.recompute << saver.llm.distributed_optimizer;
    if (!seen.insert({key_e.str(), key_l.str()}).second) continue;
    dflop::method_result chosen;
    chosen.method = dflop::plan_method::dflop;
    chosen.config = saver;
    const auto layout = planner.layout_of(chosen);
    const auto holds = [&](const dflop::module_plan& plan, dflop::module_kind kind, std::span<const dflop::sample> mb) {
      for (int stage = 0; stage < plan.degrees.pp; ++stage)
        if (static_cast<double>(dflop::estimate_memory_with(memory, kind, plan.degrees.tp, plan.slice(stage), 1, mb,
                                                            dflop::memory_choices_of(plan.degrees))
                                    .total()) > capacity)
          return false;
      return true;
    };
    if (!holds(layout.encoder, dflop::module_kind::encoder, {}) || !holds(layout.llm, dflop::module_kind::llm, {}))
      continue;
    for (std::size_t i = 0; i < workload.size(); ++i)
      if (!fits[i] && holds(layout.encoder, dflop::module_kind::encoder, std::span(workload).subspan(i, 1)) &&
          holds(layout.llm, dflop::module_kind::llm, std::span(workload).subspan(i, 1)))
        fits[i] = 1;
  }
  std::vector<std::size_t> unfittable;
  for (std::size_t i = 0; i < workload.size(); ++i)
    if (!fits[i]) unfittable.push_back(i);
  return unfittable;
}

}  // namespace

TEST_CASE("the samples found unfittable are exactly those a brute force over every candidate finds", "[plan]") {
  const auto model = dflop::test::small_model();
  std::size_t cases_with_some = 0, cases_with_all_fitting = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    // 8 GPUs of 8 to 24 GiB: some samples fit only on the most sharded shapes, some nowhere.
    const auto cluster = dflop::test::small_cluster(8, 4, 8 + 4 * static_cast<std::int64_t>(seed % 5));
    const auto workload = heavy_tailed_workload(60, seed);
    auto planner = make_planner(cluster);
    planner.prepare(workload);
    INFO("seed " << seed << ", " << cluster.gpu.memory_bytes / (1 << 30) << " GiB");
    const auto found = planner.unfittable_samples(workload);
    CHECK(found == brute_force_unfittable(planner, model, cluster, workload));
    cases_with_some += !found.empty() && found.size() < workload.size();
    cases_with_all_fitting += found.empty();
  }
  // The instances exercise both outcomes: otherwise the comparison proves little.
  CHECK(cases_with_some >= 2);
}

TEST_CASE("a workload with unfittable samples stops the plan, naming them, unless asked to exclude them", "[plan]") {
  const auto cluster = dflop::test::small_cluster(8, 4);
  auto workload = dflop::test::small_workload(200, 4);
  // Twelve giants: the message lists ten and counts the rest.
  std::vector<std::string> giants;
  for (int k = 0; k < 12; ++k) {
    auto& s = workload[static_cast<std::size_t>(7 + 13 * k)];
    s = dflop::sample{"giant" + std::to_string(k), dflop::modality::text, 0, 0, 1'000'000'000'000'000 + k};
    giants.push_back(s.id);
  }
  {
    auto planner = make_planner(cluster);
    try {
      (void)planner.make_plan(workload);
      FAIL("a sample of 10^15 tokens must not be planned for");
    } catch (const dflop::unfittable_samples_error& e) {
      const std::string text = e.what();
      CHECK(e.sample_ids() == giants);
      CHECK_THAT(text, Catch::StartsWith("workload: 12 samples cannot fit in memory under any configuration"));
      CHECK_THAT(text, Catch::Contains("giant0 (0 encoder, 1000000000000000 LLM tokens)"));
      CHECK_THAT(text, Catch::Contains("giant9 (0 encoder, 1000000000000009 LLM tokens), and 2 more"));
      CHECK_THAT(text, !Catch::Contains("giant10"));
      CHECK_THAT(text, Catch::Contains("planner_options::exclude_unfittable"));
    }
  }
  auto options = small_options();
  options.exclude_unfittable = true;
  auto planner = make_planner(cluster, options);
  const auto result = planner.make_plan(workload);
  CHECK(result.excluded_samples == giants);
  for (const auto& batch : planner.sampled_batches())
    for (const auto& s : batch) CHECK(s.id.rfind("giant", 0) != 0);
  // The plan file keeps what was excluded.
  const auto read_back = dflop::plan_from_json(dflop::to_json(result), "round trip");
  CHECK(read_back.excluded_samples == giants);
  CHECK(dflop::to_json(read_back)["excluded_samples"].size() == 12);

  // Excluding may leave too few samples for a global batch: said, with the count.
  std::vector<dflop::sample> few(workload.begin(), workload.begin() + 16);  // holds giant0
  CHECK_THROWS_WITH(planner.make_plan(few),
                    Catch::Contains("15 samples after excluding 1 unfittable sample cannot fill a global batch of 16"));
}

TEST_CASE("when most samples cannot fit, the error says the GPUs are too small rather than blaming outliers", "[plan]") {
  auto planner = make_planner(dflop::test::small_cluster(8, 4, 2));
  const auto workload = dflop::test::small_workload(200, 4);
  CHECK_THROWS_WITH(planner.make_plan(workload), Catch::Contains("samples: the GPUs are too small for this workload"));
  auto roomy = make_planner(dflop::test::small_cluster(8, 4));
  roomy.prepare(workload);
  CHECK(roomy.unfittable_samples(workload).empty());
}

TEST_CASE("a plan without unfittable samples excludes nothing and is the plan it always was", "[plan]") {
  const auto cluster = dflop::test::small_cluster(8, 4);
  const auto workload = dflop::test::small_workload(200, 4);
  auto asking = small_options();
  asking.exclude_unfittable = true;
  auto planner = make_planner(cluster), excluding = make_planner(cluster, asking);
  const auto plain = planner.make_plan(workload), with_option = excluding.make_plan(workload);
  CHECK(with_option.excluded_samples.empty());
  CHECK(plain.chosen == with_option.chosen);
  CHECK(dflop::plan_from_json(dflop::to_json(plain), "plain").excluded_samples.empty());
}

TEST_CASE("plan files reject excluded sample ids that are not strings", "[plan]") {
  const auto cluster = dflop::test::small_cluster(8, 4);
  auto planner = make_planner(cluster);
  auto document = dflop::to_json(planner.make_plan(dflop::test::small_workload(200, 4)));
  document["excluded_samples"] = {"ok", 7};
  CHECK_THROWS_WITH(dflop::plan_from_json(document, "edited.json"),
                    Catch::Contains("edited.json: field 'excluded_samples[1]': must be a non-empty sample id string"));
}

TEST_CASE("byte and token counts saturate instead of wrapping around", "[plan][memory]") {
  const auto model = dflop::test::small_model();
  const analytic_memory_model memory(model);
  const dflop::sample giant{"giant", dflop::modality::text, 0, 0, dflop::max_sample_count};
  const std::vector<dflop::sample> batch(4, giant);
  const dflop::stage_slice slice{model.llm.layers, true, true};
  // 2^53 tokens x ~10^5 bytes per token is far beyond 2^63: the estimate says "more than anything".
  const auto bytes = memory.estimate_memory(dflop::module_kind::llm, 1, slice, 3, batch);
  CHECK(bytes.activations == dflop::saturated_count);
  CHECK(bytes.total() == dflop::saturated_count);
  CHECK(bytes.parameters > 0);
  // A modest sample still prices exactly (the saturating arithmetic is invisible there).
  const dflop::sample modest{"m", dflop::modality::text, 0, 0, 1000};
  const auto small = memory.estimate_memory(dflop::module_kind::llm, 2, slice, 2, std::span(&modest, 1));
  CHECK(small.total() == small.parameters + small.gradients + small.optimizer_states + small.activations);
  CHECK(small.activations == 2 * memory.activation_bytes(dflop::module_kind::llm, 2, slice, 1,
                                                         dflop::shape_of(dflop::module_kind::llm, std::span(&modest, 1))));
  // Integer token sums of a microbatch saturate too.
  std::vector<dflop::sample> many(1100, giant);
  std::vector<std::uint32_t> all(many.size());
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  CHECK(dflop::microbatch_view(many, all).llm_tokens() == dflop::saturated_count);
}

TEST_CASE("a trace count above 2^53 is rejected with its line", "[plan][workload]") {
  std::istringstream in("{\"id\":\"a\",\"modality\":\"text\",\"encoder_items\":0,\"encoder_tokens\":0,\"llm_tokens\":5}\n"
                        "{\"id\":\"b\",\"modality\":\"text\",\"encoder_items\":0,\"encoder_tokens\":0,"
                        "\"llm_tokens\":9007199254740993}\n");
  CHECK_THROWS_WITH(dflop::read_trace(in, "big.jsonl"),
                    Catch::Contains("big.jsonl:2: sample \"b\": llm_tokens (9007199254740993) exceeds "
                                    "9007199254740992 (2^53)"));
}
