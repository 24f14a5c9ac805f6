// SPDX-License-Identifier: Apache-2.0
//! \file
//! The planner's answer as a value: the chosen configuration with its layer
//! splits, predicted iteration time and memory per stage, the ideal bound, and
//! the baselines chosen and scored the same way. Printable as a table; see
//! plan_json.hpp for JSON.
#pragma once

#include <dflop/cost/memory_model.hpp>
#include <dflop/error.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/batch_options.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan_method.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace dflop {

//! Memory of one GPU of one pipeline stage.
struct stage_memory {
  module_kind module = module_kind::llm;  //!< which module the stage belongs to
  int stage = 0;                          //!< stage index inside the module
  int in_flight = 0;                      //!< microbatches whose activations the schedule keeps at its peak
  memory_breakdown bytes;                 //!< parameters, gradients, optimizer states, activations (tail microbatch)

  friend bool operator==(const stage_memory&, const stage_memory&) = default;
};

//! One method's choice and how it scores in the common simulator.
struct method_result {
  plan_method method = plan_method::dflop;  //!< which method chose it
  parallel_config config;          //!< chosen degrees and microbatches
  module_plan encoder;             //!< encoder split
  module_plan llm;                 //!< LLM split
  double estimated_seconds = 0;    //!< what the method's own model predicted when choosing
  double iteration_seconds = 0;    //!< mean simulated iteration time over the sampled batches
  bool fits_memory = true;         //!< whether its tail microbatches fit in GPU memory (dflop's always do)
  double peak_memory_gib = 0;      //!< largest stage memory, GiB
  std::size_t out_of_memory_attempts = 0;  //!< earlier choices of the method that ran out of memory

  friend bool operator==(const method_result&, const method_result&) = default;
};

//! One schedule the search scored its finalists under (`named_schedule("auto")`).
struct schedule_trial {
  std::string schedule;      //!< schedule name
  //! Predicted iteration of its best finalist (0: none fit under it). When
  //! every finalist under it was given up after half the batches, over 2%
  //! slower than the winner (`planner_options::give_up_on_slow`), the lowest
  //! mean over that half.
  double seconds = 0;

  friend bool operator==(const schedule_trial&, const schedule_trial&) = default;
};

//! What the search did.
struct search_statistics {
  std::size_t candidates = 0;         //!< configurations enumerated (splits x degrees x microbatches)
  std::size_t memory_rejected = 0;    //!< rejected: parameters, optimizer states or activations do not fit
  std::size_t bound_pruned = 0;       //!< skipped: their lower bound could not beat the best found
  std::size_t over_budget = 0;        //!< not scored: the simulation budget was spent
  std::size_t simulated = 0;          //!< scored on the sampled batches
  //! of the scanned, and of the (finalist, schedule) pairs scored again: given
  //! up after the first half of the batches, too slow to matter
  //! (`planner_options::give_up_on_slow`)
  std::size_t given_up = 0;
  double seconds = 0;                 //!< wall time of `make_plan`, all of it
  double enumeration_seconds = 0;     //!< of which: sampling batches, enumerating and ranking candidates
  double scoring_seconds = 0;         //!< of which: simulating candidates and finalists (dflop's own search)
  double finalist_seconds = 0;        //!< of `scoring_seconds`: scoring the finalists again with the configured order
  double baseline_seconds = 0;        //!< of which: choosing and scoring the baselines
  //! The schedules the finalists were scored under, in order (empty: the schedule was given, not searched).
  std::vector<schedule_trial> schedules;

  friend bool operator==(const search_statistics&, const search_statistics&) = default;
};

//! How often the memory budget acts on a plan's batches, counted on fresh
//! global batches packed as `schedule_batch` packs them.
struct memory_cap_estimate {
  std::size_t batches = 0;     //!< fresh batches drawn (`planner_options::cap_check_batches`)
  std::size_t capped = 0;      //!< of which the budget changed the packing or an encoder split
  std::size_t infeasible = 0;  //!< of which no packing within the budget was found (`schedule_batch` throws)

  //! Estimated probability that a batch hits the cap (0 when none were drawn).
  [[nodiscard]] double capped_probability() const noexcept {
    return batches == 0 ? 0.0 : static_cast<double>(capped) / static_cast<double>(batches);
  }
  //! Estimated probability that a batch cannot be packed within the budget.
  [[nodiscard]] double infeasible_probability() const noexcept {
    return batches == 0 ? 0.0 : static_cast<double>(infeasible) / static_cast<double>(batches);
  }

  friend bool operator==(const memory_cap_estimate&, const memory_cap_estimate&) = default;
};

//! The plan for one model, cluster and workload.
struct plan {
  std::string model;                   //!< model name
  multimodal_spec model_spec;          //!< the model's shapes (per-batch scheduling prices with them)
  batch_options batch;                 //!< per-batch policies the plan was scored with
  cluster_spec cluster;                //!< where it runs
  int global_batch = 0;                //!< samples per iteration
  int batches = 0;                     //!< sampled global batches it was scored on
  std::uint64_t seed = 0;              //!< sampling seed of those batches (`planner_options::seed`)
  std::string schedule;                //!< schedule policy name
  method_result chosen;                //!< dflop's choice (method "dflop")
  //! Per stage of the chosen plan, encoder stages first, with the heaviest
  //! microbatch of the sampled batches; each within `batch.memory_budget_bytes`.
  std::vector<stage_memory> memory;
  memory_cap_estimate memory_cap;      //!< how often the memory budget acts on its batches
  double ideal_seconds = 0;            //!< training FLOPs / (GPUs x peak x best efficiency): no plan beats it
  std::vector<method_result> baselines;  //!< data_blind and dflop_reference, when computed
  search_statistics search;            //!< how the search went
  //! Ids of the workload's samples left out because no configuration holds
  //! them (only with `planner_options::exclude_unfittable`), in workload order.
  std::vector<std::string> excluded_samples;

  //! Samples per second of the chosen plan.
  [[nodiscard]] double samples_per_second() const noexcept {
    return chosen.iteration_seconds > 0 ? global_batch / chosen.iteration_seconds : 0;
  }
  //! ideal / chosen: how close to the bound the plan gets.
  [[nodiscard]] double efficiency() const noexcept {
    return chosen.iteration_seconds > 0 ? ideal_seconds / chosen.iteration_seconds : 0;
  }
  //! The baseline `which`, if computed (nullptr for `plan_method::dflop`, which is `chosen`).
  [[nodiscard]] const method_result* baseline(plan_method which) const noexcept {
    for (const auto& result : baselines)
      if (result.method == which) return &result;
    return nullptr;
  }
  //! The result of the method called `name` ("dflop", a baseline's name): for
  //! names from files and tools. Throws `input_error` naming the methods the
  //! plan has when it has none of that name.
  [[nodiscard]] const method_result& method(std::string_view name) const {
    for (const plan_method known : all_plan_methods) {
      if (name_of(known) != name) continue;
      if (known == chosen.method) return chosen;
      if (const method_result* found = baseline(known)) return *found;
    }
    std::string held(name_of(chosen.method));
    for (const auto& b : baselines) held.append(", ").append(name_of(b.method));
    throw input_error("method", 0, "the plan has no method '" + std::string(name) + "' (it has " + held + ")");
  }
  //! The result of `which`: dflop's choice or a baseline (throws as above when not computed).
  [[nodiscard]] const method_result& method(plan_method which) const { return method(name_of(which)); }
};

namespace detail {
inline std::string format_fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}
// Compact degrees for the table: "tp2 pp4 dp8", "+rc" recomputation ("+rc3": of
// each stage's first 3 layers), "+do" distributed optimizer.
inline std::string format_degrees(const module_parallelism& d) {
  std::string recompute = d.recompute ? "+rc" : "";
  if (d.recompute && d.recompute_layers > 0) recompute += std::to_string(d.recompute_layers);
  return "tp" + std::to_string(d.tp) + " pp" + std::to_string(d.pp) + " dp" + std::to_string(d.dp) + recompute +
         (d.distributed_optimizer ? "+do" : "");
}
}  // namespace detail

//! Prints the side-by-side table of the methods and the ideal bound.
inline void print_comparison(std::ostream& out, const plan& result) {
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %-21s %-21s %5s %10s %9s %8s %s\n", "method", "encoder", "llm", "m",
                "iteration", "samples/s", "vs ideal", "memory");
  out << line;
  const auto row = [&](const method_result& r) {
    std::snprintf(line, sizeof line, "%-16s %-21s %-21s %5d %9.3fs %9.1f %7.0f%% %s\n", std::string(name_of(r.method)).c_str(),
                  detail::format_degrees(r.config.encoder).c_str(), detail::format_degrees(r.config.llm).c_str(),
                  r.config.microbatches, r.iteration_seconds, result.global_batch / r.iteration_seconds,
                  100.0 * result.ideal_seconds / r.iteration_seconds,
                  r.fits_memory ? (detail::format_fixed(r.peak_memory_gib, 1) + " GiB").c_str() : "OUT OF MEMORY");
    out << line;
  };
  for (const auto& baseline : result.baselines) row(baseline);
  row(result.chosen);
  std::snprintf(line, sizeof line, "%-16s %-21s %-21s %5s %9.3fs %9.1f %7.0f%%\n", "ideal", "-", "-", "-",
                result.ideal_seconds, result.global_batch / result.ideal_seconds, 100.0);
  out << line;
  const auto saves_memory = [](const method_result& r) {
    for (const module_parallelism* d : {&r.config.encoder, &r.config.llm})
      if (d->recompute || d->distributed_optimizer) return true;
    return false;
  };
  if (saves_memory(result.chosen) || std::any_of(result.baselines.begin(), result.baselines.end(), saves_memory))
    out << "(+rc: activation recomputation, +rcN: of each stage's first N layers, +do: distributed optimizer)\n";
}

//! Prints the plan: configuration, layer splits, prediction, memory per stage and the comparison.
inline std::ostream& operator<<(std::ostream& out, const plan& result) {
  out << "model " << result.model << " on " << result.cluster.gpus << " x " << result.cluster.gpu.name << " ("
      << result.cluster.gpus_per_node << " per node), global batch " << result.global_batch << ", schedule "
      << result.schedule;
  if (!result.search.schedules.empty()) {
    out << " (searched:";
    for (const auto& trial : result.search.schedules)
      out << " " << trial.schedule << " "
          << (trial.seconds > 0 ? detail::format_fixed(trial.seconds, 3) + " s" : std::string("no plan"));
    out << ")";
  }
  out << "\n";
  out << "encoder: " << result.chosen.encoder << "\n";
  out << "llm:     " << result.chosen.llm << "\n";
  out << "microbatches per replica: " << result.chosen.config.microbatches << "\n";
  if (result.chosen.config.encoder_run_ahead > 0)
    out << "encoder run-ahead: " << result.chosen.config.encoder_run_ahead
        << " forwards beyond the schedule's warm-up on each encoder stage\n";
  if (result.batch.gradient_bucket_bytes > 0)
    out << "gradient reduction: overlapped with each stage's last backward, buckets of "
        << detail::format_fixed(result.batch.gradient_bucket_bytes / (1024.0 * 1024.0), 1) << " MiB\n";
  out << "predicted iteration: " << detail::format_fixed(result.chosen.iteration_seconds, 3) << " s ("
      << detail::format_fixed(result.samples_per_second(), 1) << " samples/s, "
      << detail::format_fixed(100 * result.efficiency(), 0) << "% of ideal), mean over " << result.batches
      << " sampled batches\n";
  if (!result.excluded_samples.empty())
    out << "excluded: " << result.excluded_samples.size()
        << " sample(s) no configuration holds in memory, first: " << result.excluded_samples.front() << "\n";
  out << "memory per GPU (heaviest microbatch seen, in-flight activations):\n";
  for (const auto& stage : result.memory)
    out << "  " << to_string(stage.module) << " stage " << stage.stage << ": "
        << detail::format_fixed(static_cast<double>(stage.bytes.total()) / (1 << 30), 1) << " GiB ("
        << stage.in_flight << " in flight)\n";
  if (result.batch.memory_budget_bytes > 0) {
    const memory_cap_estimate& cap = result.memory_cap;
    out << "memory cap: " << detail::format_fixed(static_cast<double>(result.batch.memory_budget_bytes) / (1 << 30), 1)
        << " GiB per GPU, every microbatch kept within it";
    if (cap.batches > 0) {
      out << "; it acted on " << cap.capped << " of " << cap.batches << " fresh batches ("
          << detail::format_fixed(100 * cap.capped_probability(), 1) << "%)";
      if (cap.infeasible > 0)
        out << ", and " << cap.infeasible << " could not be packed within it (schedule_batch would throw: "
            << "give the plan more memory headroom or more GPUs)";
    }
    out << "\n";
  }
  out << "search: " << result.search.candidates << " candidates, " << result.search.memory_rejected
      << " out of memory, " << result.search.bound_pruned << " pruned by bound, " << result.search.over_budget << " past the budget, " << result.search.simulated
      << " simulated (" << result.search.given_up << " given up after half the batches), " << detail::format_fixed(result.search.seconds, 2) << " s (enumeration "
      << detail::format_fixed(result.search.enumeration_seconds, 2) << " s, scoring "
      << detail::format_fixed(result.search.scoring_seconds, 2) << " s, of which finalists "
      << detail::format_fixed(result.search.finalist_seconds, 2) << " s, baselines "
      << detail::format_fixed(result.search.baseline_seconds, 2) << " s)\n\n";
  print_comparison(out, result);
  return out;
}

}  // namespace dflop
