// SPDX-License-Identifier: Apache-2.0
//! `dflop plan` and `dflop demo`: the data-aware 3D parallelism search for a
//! workload, model and cluster, side by side with the data-blind way and the
//! reference system's method. `demo` is `plan` on the built-in default with a
//! text timeline of one simulated iteration: the tool's main job.
#include "command.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/error.hpp>
#include <dflop/model/gpu_json.hpp>
#include <dflop/model/model_json.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/sim/chrome_trace.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/sim/svg_timeline.hpp>
#include <dflop/sim/text_timeline.hpp>
#include <dflop/sim/time_breakdown.hpp>
#include <dflop/sim/timeline.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/trace.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>

namespace {

//! What the user asked `plan` (or `demo`) for; defaults are the built-in demo.
struct plan_command_options {
  std::string workload;  // empty: the built-in default mixture
  std::string model = "siglip-400m+qwen2.5-7b";
  int gpus = 64;
  int gpus_per_node = 8;
  std::string gpu = "h100-80gb";
  int global_batch = 512;
  std::string schedule = "auto";
  double gradient_bucket_mib = dflop::batch_options{}.gradient_bucket_bytes / (1024.0 * 1024.0);  // 0: one reduction per stage after its last op
  bool whole_stage_recompute = false;  // recompute all of a stage's layers or none
  bool planned_recompute = false;      // every batch recomputes the plan's count (no per-batch counts)
  bool no_encoder_run_ahead = false;   // the encoder keeps the schedule's own warm-up
  int batches = 4;
  std::uint64_t seed = 0;
  bool json = false;
  std::string save;  // write the plan file here
  std::string exclude_unfittable;  // plan without unfittable samples, their ids written here
  std::string trace;
  std::string svg;
  bool timeline = false;  // demo: print one iteration as a text timeline
};

void run_plan(const plan_command_options& options) {
  const auto workload = options.workload.empty() ? dflop::default_workload() : dflop::read_trace_file(options.workload);
  const dflop::multimodal_spec model = dflop::load_model(options.model, "--model");
  const dflop::cluster_spec cluster{options.gpus, options.gpus_per_node, dflop::load_gpu(options.gpu, "--gpu")};
  const dflop::named_schedule schedule = dflop::plannable_schedule(options.schedule, "--schedule");

  dflop::planner_options settings;
  settings.global_batch = options.global_batch;
  settings.batches = options.batches;
  settings.seed = options.seed;
  settings.exclude_unfittable = !options.exclude_unfittable.empty();
  settings.batch.gradient_bucket_bytes = options.gradient_bucket_mib * 1024.0 * 1024.0;
  settings.partial_recompute = !options.whole_stage_recompute;
  settings.batch.recompute_per_batch = !options.planned_recompute;
  settings.encoder_run_ahead = !options.no_encoder_run_ahead;
  if (!options.json) {
    settings.progress = &std::cerr;
    settings.progress_interactive = dflop::stderr_is_terminal();
  }
  dflop::planner<dflop::flops_cost_model, dflop::analytic_memory_model> planner(
      model, cluster, dflop::flops_cost_model(model, cluster.gpu), dflop::analytic_memory_model(model), settings, {},
      {}, schedule);
  if (!options.json)
    std::cout << "workload: "
              << (options.workload.empty()
                      ? "built-in mixture '" + std::string(dflop::default_mixture_name) + "' (" +
                            std::to_string(dflop::default_workload_samples) + " samples)"
                      : options.workload)
              << "\n";
  const dflop::plan result = [&] {
    try {
      return planner.make_plan(workload);
    } catch (const dflop::unfittable_samples_error& e) {
      // The library names its option; the user's way out is this command's flag.
      throw dflop::input_error(options.workload.empty() ? "--workload" : options.workload, 0,
                               e.finding() + ". Remove them, or plan without them: --exclude-unfittable FILE "
                                             "writes their ids to FILE");
    }
  }();
  if (!options.exclude_unfittable.empty()) {
    std::ofstream ids(options.exclude_unfittable);
    for (const auto& id : result.excluded_samples) ids << id << "\n";
    if (!ids.flush())
      throw dflop::input_error("--exclude-unfittable", 0, "cannot write '" + options.exclude_unfittable + "'");
    if (!options.json)
      std::cout << result.excluded_samples.size() << " unfittable sample(s) excluded; ids written to "
                << options.exclude_unfittable << "\n";
  }

  // One sampled batch scheduled and simulated: where its GPU time goes, and the timeline.
  const auto& batch = planner.sampled_batches().front();
  const auto scheduled = planner.schedule_batch(result.chosen, batch, options.seed);
  const auto layout = planner.layout_of(result.chosen);
  const auto simulated = dflop::multimodal_simulator{}.simulate(layout.schedule, scheduled.costs, scheduled.slot_order);
  const auto line = dflop::make_timeline(layout.schedule, scheduled.costs, simulated, scheduled.slot_order);
  const auto gpus_of_rank =
      dflop::gpus_per_rank(scheduled.costs, result.chosen.config.encoder.tp, result.chosen.config.llm.tp);
  const auto shares = dflop::breakdown_of(line, gpus_of_rank, static_cast<double>(cluster.gpus));
  const auto modules = dflop::breakdown_by_module(line, gpus_of_rank, scheduled.costs);
  if (options.json) {
    nlohmann::json out = dflop::to_json(result);
    const auto breakdown_json = [](const dflop::time_breakdown& b) {
      return nlohmann::json{{"ops", b.ops},
                            {"gradient_sync", b.gradient_sync},
                            {"idle", b.idle},
                            {"idle_before_first_op", b.idle_before_first_op},
                            {"idle_between_ops", b.idle_between_ops},
                            {"idle_after_last_op", b.idle_after_last_op}};
    };
    out["time_breakdown"] = breakdown_json(shares);
    out["time_breakdown"]["iteration_seconds"] = simulated.makespan;
    out["time_breakdown"]["unused_gpus"] = shares.unused_gpus;
    if (modules.encoder) out["time_breakdown"]["encoder_ranks"] = breakdown_json(*modules.encoder);
    out["time_breakdown"]["llm_ranks"] = breakdown_json(modules.llm);
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << result;
    const auto percent = [](double share) { return dflop::detail::format_fixed(100 * share, 1) + "%"; };
    std::cout << "\nwhere the GPU time goes (first sampled batch, " << dflop::detail::format_fixed(simulated.makespan, 3)
              << " s): ops " << percent(shares.ops) << " (the ideal's work about "
              << percent(result.ideal_seconds / simulated.makespan)
              << "; the rest TP communication, recomputation, work below the best efficiency), gradient sync "
                 "outside ops "
              << percent(shares.gradient_sync) << ", idle " << percent(shares.idle) << ": before a rank's first op "
              << percent(shares.idle_before_first_op) << " (pipeline fill, waits for the encoder), between its ops "
              << percent(shares.idle_between_ops) << " (bubbles, waits between the modules), after its last op "
              << percent(shares.idle_after_last_op) << " (drain, replicas done early), unused GPUs "
              << percent(shares.unused_gpus) << "\n";
    const auto module_line = [&](const char* name, const dflop::time_breakdown& b) {
      std::cout << "  " << name << " ranks, of their own GPU time: ops " << percent(b.ops) << ", gradient sync "
                << percent(b.gradient_sync) << ", idle " << percent(b.idle) << " (before the first op "
                << percent(b.idle_before_first_op) << ", between ops " << percent(b.idle_between_ops)
                << ", after the last " << percent(b.idle_after_last_op) << ")\n";
    };
    if (modules.encoder) module_line("encoder", *modules.encoder);
    module_line("LLM", modules.llm);
  }
  if (!options.save.empty()) {
    dflop::write_plan(options.save, result);
    if (!options.json)
      std::cout << "\nplan saved to " << options.save << " (schedule batches for it: dflop schedule --plan "
                << options.save << ")\n";
  }

  if (options.timeline || !options.trace.empty() || !options.svg.empty()) {
    if (!options.trace.empty()) {
      dflop::write_chrome_trace(line, options.trace);
      if (!options.json) std::cout << "\ntrace of one iteration written to " << options.trace << "\n";
    }
    if (!options.svg.empty()) {
      dflop::svg_options picture;
      picture.title = "dflop plan for " + result.model + " on " + std::to_string(cluster.gpus) + " x " +
                      cluster.gpu.name + ", one iteration";
      dflop::write_svg_timeline(line, options.svg, picture);
      if (!options.json) std::cout << "timeline picture written to " << options.svg << "\n";
    }
    if (options.timeline && !options.json) {
      std::cout << "\none simulated iteration of the dflop plan (F forward, B backward, # gradient sync, . idle):\n"
                << dflop::render_text_timeline(line, 100);
    }
  }
}

void add_plan_flags(CLI::App& command, plan_command_options& options) {
  command.add_option("--workload", options.workload, "JSONL trace (default: the built-in onevision mixture)");
  command.add_option("--model", options.model, "ENCODER+LLM preset or a model JSON file")->capture_default_str();
  command.add_option("--gpus", options.gpus, "GPUs in all")->capture_default_str();
  command.add_option("--gpus-per-node", options.gpus_per_node, "GPUs per node")->capture_default_str();
  command.add_option("--gpu", options.gpu, "GPU preset or a GPU JSON file")->capture_default_str();
  command.add_option("--global-batch", options.global_batch, "samples per iteration")->capture_default_str();
  command.add_option("--schedule", options.schedule,
                     "auto (the planner chooses among 1f1b and zb-h1), gpipe, 1f1b or zb-h1")->capture_default_str();
  command.add_option("--gradient-bucket-mb", options.gradient_bucket_mib,
                     "predict the gradient reduction overlapped with each stage's last backward, in buckets of this "
                     "many MiB, as the executors run it for stages that call gradients_ready (0: one reduction after "
                     "the last op)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command.add_flag("--whole-stage-recompute", options.whole_stage_recompute,
                   "where activations must be recomputed, recompute all of a stage's layers (default: only the "
                   "fewest with which the plan fits, each stage's first ones)");
  command.add_flag("--planned-recompute", options.planned_recompute,
                   "every batch recomputes the plan's count of layers (default: each batch only as many as its "
                   "real in-flight microbatches need, at most the plan's count)");
  command.add_flag("--no-encoder-run-ahead", options.no_encoder_run_ahead,
                   "keep the schedule's own warm-up on the encoder's stages (default: the chosen plan's encoder runs "
                   "2, 8, 32, ... forwards further ahead where that is faster and fits in memory)");
  command.add_option("--batches", options.batches, "sampled global batches each candidate is scored on")
      ->capture_default_str();
  command.add_option("--seed", options.seed, "sampling and packing seed")->capture_default_str();
  command.add_flag("--json", options.json, "print one JSON object");
  command.add_option("--save", options.save,
                     "write the plan to this JSON file (self-contained; read by `dflop schedule`)");
  command.add_option("--exclude-unfittable", options.exclude_unfittable,
                     "plan without the samples no configuration holds in memory, writing their ids (one per line) "
                     "to this file (without it such samples stop the plan)");
  command.add_option("--trace", options.trace, "write a Chrome trace (Perfetto) of one iteration to this file");
  command.add_option("--svg", options.svg, "write an SVG picture of one iteration's timeline to this file");
}

void install_plan_command(CLI::App& app) {
  auto options = std::make_shared<plan_command_options>();
  auto* command = app.add_subcommand("plan", "choose the 3D parallel configuration for a workload, model and cluster");
  add_plan_flags(*command, *options);
  command->callback([options] { run_plan(*options); });
}

void install_demo_command(CLI::App& app) {
  auto options = std::make_shared<plan_command_options>();
  options->timeline = true;
  auto* command = app.add_subcommand(
      "demo", "the planner on the built-in default (onevision mixture, siglip-400m+qwen2.5-7b, 64 x h100-80gb)");
  add_plan_flags(*command, *options);
  command->callback([options] { run_plan(*options); });
}

}  // namespace

DFLOP_REGISTER_COMMAND("plan", install_plan_command);
DFLOP_REGISTER_COMMAND("demo", install_demo_command);
