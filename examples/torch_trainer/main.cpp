// SPDX-License-Identifier: Apache-2.0
// dflop-torch-trainer: a small multimodal model in libtorch (ViT + projector +
// causal LM over packed variable-length sequences) through dflop's whole path:
// profile its parts with dflop::profiler -> fit -> plan -> schedule each batch ->
// run the plan's stages with plan_runner, on threads or under mpirun one rank per
// process; --json prints each step's loss, measured and predicted seconds.
//
//   dflop-torch-trainer --profile torch.csv                       # profile the parts, write the CSV
//   dflop-torch-trainer --cost-profile torch.csv --steps 5 --check --json
//   mpirun -np 2 dflop-torch-trainer --cost-profile torch.csv --steps 20 --json [--method data_blind]
#include "model_options.hpp"
#include "torch_stage.hpp"
#include "trainer.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/cost/profile.hpp>
#include <dflop/error.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/runtime/profile_writer.hpp>

#if defined(DFLOP_TORCH_TRAINER_WITH_MPI)
#include <dflop/exec/mpi_communicator.hpp>
#include <mpi.h>
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace dflop::torch_trainer;

struct options {
  trainer_options run;
  std::string profile_out;   // --profile: write the profile here and stop
  std::string cost_profile;  // --cost-profile: the profile to fit
  std::string plan_in;       // --plan
  std::string plan_out;      // --save-plan
  std::vector<double> encoder_sizes{64, 256, 640, 1280, 2560};
  std::vector<double> llm_sizes{32, 128, 320, 640, 1280};
  int repeats = 5;
  int warmup = 2;            // --profile-warmup
  int passes = 1;            // --profile-passes
  std::string profile_module = "all";  // --profile-module
  bool cpu_clock = false;    // --profile-clock cpu
  bool recompute_memory = false;  // --recompute-memory: measure what recomputation keeps, and stop
  double flush_mib = 0;      // --profile-flush-mib
};

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

dflop::profile profile_now(const options& o, std::ostream* progress) {
  dflop::profiler_options profiling;
  profiling.warmup = o.warmup;
  profiling.repeats = o.repeats;
  profiling.progress = progress;
  profiling.source = o.profile_out.empty() ? "profile" : o.profile_out;
  const bool encoder = o.profile_module != "llm", llm = o.profile_module != "encoder";
  return profile_model(o.run.model,
                       {encoder ? o.encoder_sizes : std::vector<double>{}, llm ? o.llm_sizes : std::vector<double>{}},
                       profiling, o.cpu_clock,
                       static_cast<std::size_t>(o.flush_mib * 1048576.0), o.passes);
}

dflop::fitted_cost_model cost_model_of(const options& o, bool mpi, std::ostream* progress) {
  if (!o.cost_profile.empty()) return dflop::fitted_cost_model::from_profile(dflop::read_profile_file(o.cost_profile));
  if (mpi)
    throw dflop::input_error("--cost-profile", 0,
                             "under mpirun every rank must plan from the same costs: profile once with --profile FILE "
                             "and pass --cost-profile FILE");
  if (progress) *progress << "profiling the model's parts (pass --cost-profile to reuse a profile)\n";
  return dflop::fitted_cost_model::from_profile(profile_now(o, progress));
}

// One method's summary line (or text).
nlohmann::json summary_of(const options& o, const trainer_inputs& inputs, const std::string& method,
                          const run_report& r) {
  const double m = median(r.measured), p = median(r.predicted);
  std::vector<double> ratio;
  for (std::size_t k = 0; k < r.measured.size(); ++k) ratio.push_back(r.predicted[k] > 0 ? r.measured[k] / r.predicted[k] : 0);
  const char* names[] = {"encoder_forward", "encoder_backward", "llm_forward", "llm_backward"};
  auto errors_of = [&](const std::array<std::vector<double>, 4>& lists) {
    nlohmann::json out;
    std::vector<double> pooled;
    for (std::size_t i = 0; i < 4; ++i) {
      std::vector<double> absolute;
      for (double e : lists[i]) absolute.push_back(std::abs(e));
      pooled.insert(pooled.end(), absolute.begin(), absolute.end());
      out[names[i]] = {{"ops", absolute.size()}, {"median_abs_error", median(absolute)}, {"median_error", median(lists[i])}};
    }
    out["all"] = {{"ops", pooled.size()}, {"median_abs_error", median(pooled)}};
    return out;
  };
  std::ostringstream config;
  config << inputs.chosen.method(method).config;
  return {{"summary", true},
          {"method", method},
          {"config", config.str()},
          {"steps", r.measured.size()},
          {"global_batch", inputs.chosen.global_batch},
          {"median_measured_seconds", m},
          {"median_predicted_seconds", p},
          {"measured_over_predicted", p > 0 ? m / p : 0.0},
          {"median_step_ratio", median(ratio)},
          {"first_loss", r.losses.empty() ? 0.0 : r.losses.front()},
          {"last_loss", r.losses.empty() ? 0.0 : r.losses.back()},
          {"op_prediction", errors_of(r.op_errors)},
          {"op_prediction_cpu", errors_of(r.op_cpu_errors)},
          {"op_prediction_cpu_calibrated", errors_of(r.op_cpu_calibrated_errors)},
          {"float64", o.run.model.float64}};
}

// Rank 0's closing lines: with --check the single-process comparison, then a
// summary per method and, for several methods, how each compares with the first.
// Returns false when the check fails.
bool report(const options& o, const trainer_inputs& inputs, const std::vector<run_report>& reports) {
  bool passed = true;
  nlohmann::json check;
  if (o.run.check) {
    const double tolerance = o.run.tolerance > 0 ? o.run.tolerance : (o.run.model.float64 ? 1e-12 : 1e-5);
    const auto reference = reference_losses(inputs.batches, o.run.model);
    double worst = 0;
    for (std::size_t i = 0; i < reports.size(); ++i) {
      for (std::size_t k = 0; k < reference.size(); ++k) {
        const double loss = reports[i].losses[k];
        const double difference = std::abs(loss - reference[k]) / std::max(std::abs(reference[k]), 1e-300);
        worst = std::isnan(difference) ? difference : std::max(worst, difference);
        if (o.run.json)
          std::cout << nlohmann::json{{"check", true}, {"method", o.run.methods[i]}, {"step", k}, {"loss", loss},
                                      {"reference_loss", reference[k]}, {"relative_difference", difference}}
                           .dump()
                    << std::endl;
        else
          std::cout << "check " << o.run.methods[i] << " step " << k << ": pipelined " << loss << ", single-process "
                    << reference[k] << " (relative difference " << difference << ")" << std::endl;
      }
    }
    passed = worst <= tolerance;
    check = {{"max_relative_difference", worst}, {"tolerance", tolerance}, {"passed", passed}};
    if (!passed)
      std::cerr << "dflop-torch-trainer: the pipelined losses differ from the single-process run by " << worst
                << " (relative), more than " << tolerance << "\n";
  }
  std::vector<nlohmann::json> summaries;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    nlohmann::json summary = summary_of(o, inputs, o.run.methods[i], reports[i]);
    if (!check.is_null()) summary["check"] = check;
    if (o.run.json) {
      std::cout << summary.dump() << std::endl;
    } else {
      std::cout << summary["method"].get<std::string>() << " (" << summary["config"].get<std::string>()
                << "): median measured " << summary["median_measured_seconds"].get<double>() * 1e3 << " ms, predicted "
                << summary["median_predicted_seconds"].get<double>() * 1e3 << " ms (measured/predicted "
                << summary["measured_over_predicted"].get<double>() << "); loss " << summary["first_loss"] << " -> "
                << summary["last_loss"] << "; op prediction median |error| "
                << summary["op_prediction"]["all"]["median_abs_error"] << " (wall), "
                << summary["op_prediction_cpu"]["all"]["median_abs_error"] << " (CPU), "
                << summary["op_prediction_cpu_calibrated"]["all"]["median_abs_error"] << " (CPU, calibrated)"
                << std::endl;
    }
    summaries.push_back(std::move(summary));
  }
  for (std::size_t i = 1; i < reports.size(); ++i) {
    // How much longer method i's steps took than the first method's on the same batches.
    std::vector<double> per_step;
    for (std::size_t k = 0; k < reports[i].measured.size(); ++k)
      per_step.push_back(reports[i].measured[k] / reports[0].measured[k]);
    const double measured = summaries[i]["median_measured_seconds"].get<double>() /
                            summaries[0]["median_measured_seconds"].get<double>();
    const double predicted = summaries[i]["median_predicted_seconds"].get<double>() /
                             summaries[0]["median_predicted_seconds"].get<double>();
    nlohmann::json comparison{{"comparison", true},
                              {"method", o.run.methods[0]},
                              {"over", o.run.methods[i]},
                              {"speedup_measured", measured},
                              {"speedup_measured_per_step", median(per_step)},
                              {"speedup_predicted", predicted}};
    if (o.run.json) std::cout << comparison.dump() << std::endl;
    else
      std::cout << o.run.methods[0] << " over " << o.run.methods[i] << ": measured " << measured << "x (per step "
                << median(per_step) << "x), predicted " << predicted << "x" << std::endl;
  }
  return passed;
}

// --recompute-memory: the first --global-batch samples of the pool in 4
// microbatches through each whole module, F of all four with the first k layers
// recomputed (k = 0 .. layers), one JSON line per (module, k): the heap bytes
// held after the four forwards, against the analytic memory model's kept bytes
// (what batch_recompute counts: in_flight x kept + working, kept read off 1 and
// 2 in flight) for the same microbatches.
void measure_recompute_memory(const options& o) {
  set_torch_threads(1);
  const model_options& m = o.run.model;
  const auto pool = scaled_mixture(o.run.mixture, static_cast<std::size_t>(o.run.pool_samples), o.run.seed, m);
  const std::size_t n = std::min(pool.size(), static_cast<std::size_t>(o.run.global_batch));
  constexpr std::size_t parts = 4;
  if (n < parts) throw dflop::input_error("--global-batch", 0, "--recompute-memory needs at least 4 samples");
  std::vector<std::vector<dflop::sample>> microbatches(parts);
  for (std::size_t i = 0; i < n; ++i) microbatches[i * parts / n].push_back(pool[i]);
  const dflop::analytic_memory_model memory(spec_of(m));
  for (dflop::module_kind kind : {dflop::module_kind::encoder, dflop::module_kind::llm}) {
    const std::int64_t layers = kind == dflop::module_kind::encoder ? m.encoder_layers : m.llm_layers;
    const dflop::stage_slice slice = dflop::layer_range(0, layers, layers);
    for (std::int64_t k = 0; k <= layers; ++k) {
      const auto held = held_bytes(m, kind, microbatches, static_cast<std::uint32_t>(k));
      std::int64_t kept = 0;
      for (const auto& mb : microbatches) {
        const auto shape = dflop::shape_of(kind, mb);
        kept += memory.activation_bytes_recomputing(kind, 1, slice, 2, shape, k) -
                memory.activation_bytes_recomputing(kind, 1, slice, 1, shape, k);
      }
      std::cout << nlohmann::json{{"recompute_memory", true},
                                  {"module", kind == dflop::module_kind::encoder ? "encoder" : "llm"},
                                  {"recomputed", k},
                                  {"layers", layers},
                                  {"held_bytes", held},
                                  {"model_kept_bytes", kept}}
                       .dump()
                << std::endl;
    }
  }
}

int run(int argc, char** argv, const options& o) {
  bool mpi = false;
  // Says why on every rank and, under MPI, stops the others too (exit 2: bad input, 1: a failure).
  const auto stop = [&mpi](const std::exception& e, int status) {
    std::cerr << "dflop-torch-trainer: " << e.what() << "\n";
#if defined(DFLOP_TORCH_TRAINER_WITH_MPI)
    if (mpi) MPI_Abort(MPI_COMM_WORLD, status);
#else
    (void)mpi;
#endif
    return status;
  };
  try {
    validate(o.run.model);
    if (o.profile_module != "all" && o.profile_out.empty())
      throw dflop::input_error("--profile-module", 0, "profiles one module's parts for --profile FILE; a run needs both");
    if (o.recompute_memory) {
      if (launched_by_mpirun())
        throw dflop::input_error("--recompute-memory", 0, "measure in one process (not under mpirun)");
      measure_recompute_memory(o);
      return 0;
    }
    if (!o.profile_out.empty()) {
      if (launched_by_mpirun())
        throw dflop::input_error("--profile", 0, "profile in one process (not under mpirun): every rank would write the file");
      set_torch_threads(1);
      dflop::write_profile_file(o.profile_out, profile_now(o, &std::cerr));
      const auto fitted = dflop::fitted_cost_model::from_profile(dflop::read_profile_file(o.profile_out));
      for (const auto& curve : fitted.curves()) std::cerr << curve << "\n";
      std::cerr << "wrote " << o.profile_out << "\n";
      return 0;
    }
#if defined(DFLOP_TORCH_TRAINER_WITH_MPI)
    if (launched_by_mpirun()) {
      int provided = 0;
      MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
      mpi = true;
      set_torch_threads(1);
      std::optional<dflop::plan> saved;
      if (!o.plan_in.empty()) saved = dflop::read_plan(o.plan_in);
      const trainer_inputs inputs = make_inputs(o.run, cost_model_of(o, true, nullptr), std::move(saved), nullptr);
      dflop::mpi_communicator comm(MPI_COMM_WORLD, o.run.watchdog);
      if (comm.rank() == 0 && !o.plan_out.empty()) dflop::write_plan(o.plan_out, inputs.chosen);
      const auto reports = train_rank(comm, inputs, o.run);
      const bool passed = comm.rank() != 0 || report(o, inputs, reports);
      MPI_Finalize();
      return passed ? 0 : 1;
    }
#else
    (void)argc;
    (void)argv;
    if (launched_by_mpirun()) std::cerr << "dflop-torch-trainer: built without MPI; running threads in every process\n";
#endif
    set_torch_threads(1);  // one intra-op thread: the ranks (threads here) are the parallelism
    std::ostream* progress = o.run.json ? nullptr : &std::cerr;
    std::optional<dflop::plan> saved;
    if (!o.plan_in.empty()) saved = dflop::read_plan(o.plan_in);
    const trainer_inputs inputs = make_inputs(o.run, cost_model_of(o, false, progress), std::move(saved), progress);
    if (!o.plan_out.empty()) dflop::write_plan(o.plan_out, inputs.chosen);
    std::vector<run_report> rank0;
    std::mutex guard;
    dflop::run_inproc(
        inputs.chosen.cluster.gpus,
        [&](dflop::inproc_communicator& comm) {
          set_torch_threads(1);  // per thread: OpenMP's thread count is a per-thread setting
          auto r = train_rank(comm, inputs, o.run);
          if (comm.rank() == 0) {
            std::lock_guard lock(guard);
            rank0 = std::move(r);
          }
        },
        o.run.watchdog);
    return report(o, inputs, rank0) ? 0 : 1;
  } catch (const dflop::input_error& e) {
    return stop(e, 2);
  } catch (const std::exception& e) {
    return stop(e, 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  auto& m = o.run.model;
  CLI::App app{"Trains a small libtorch multimodal model through dflop: profile -> fit -> plan -> run "
               "(threads, or one rank per process under mpirun)"};
  app.add_option("--profile", o.profile_out, "profile the model's parts with dflop::profiler, write the CSV and stop");
  app.add_option("--profile-repeats", o.repeats, "timed runs per profiled size (per pass)")->check(CLI::PositiveNumber);
  app.add_option("--profile-warmup", o.warmup, "untimed runs per profiled size before the timed ones (per pass)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--profile-passes", o.passes,
                 "passes over the whole grid, one after the other; each point is the median over the passes")
      ->check(CLI::Range(1, 1000));
  app.add_option_function<std::string>(
         "--profile-clock",
         [&](const std::string& clock) {
           if (clock != "wall" && clock != "cpu")
             throw CLI::ValidationError("--profile-clock", "wall or cpu, not '" + clock + "'");
           o.cpu_clock = clock == "cpu";
         },
         "what the profile times: wall (default) or cpu (the thread's CPU time; steadier on a shared machine)");
  app.add_option("--profile-flush-mib", o.flush_mib,
                 "with --profile-clock cpu: MiB of other memory written before each timed run (cold caches)")
      ->check(CLI::Range(0.0, 4096.0));
  app.add_option("--profile-module", o.profile_module,
                 "with --profile: the parts of one module only (encoder or llm; two such profiles run at once "
                 "load both cores as a 2-rank run does, and their CSVs concatenate into one profile), or all")
      ->check(CLI::IsMember({"all", "encoder", "llm"}));
  app.add_option("--profile-encoder-tokens", o.encoder_sizes, "encoder sizes profiled (tokens, whole items)");
  app.add_option("--profile-llm-tokens", o.llm_sizes, "LLM sizes profiled (tokens of one sequence)");
  app.add_option("--cost-profile", o.cost_profile, "profile CSV to fit the cost model from (threads: default profiles now)");
  app.add_option("--plan", o.plan_in, "run this saved plan (made for the same model flags) instead of planning");
  app.add_option("--save-plan", o.plan_out, "write the plan made (or read) to this file");
  app.add_option("--gpus", o.run.gpus, "ranks the plan runs on (one CPU core each)")->check(CLI::Range(2, 64));
  app.add_option("--global-batch", o.run.global_batch, "samples per step")->check(CLI::Range(1, 4096));
  app.add_option("--schedule", o.run.schedule, "pipeline schedule of the plan");
  app.add_option("--method", o.run.methods,
                 "dflop, data_blind or dflop_reference; repeat it to run several with their steps interleaved")
      ->capture_default_str();
  app.add_option("--mixture", o.run.mixture, "dflop mixture samples are drawn from (scaled down)");
  app.add_option("--pool-samples", o.run.pool_samples, "samples in the pool batches are drawn from")->check(CLI::Range(1, 1000000));
  app.add_option("--steps", o.run.steps, "steps to run")->check(CLI::Range(0, 100000));
  app.add_option("--seed", o.run.seed, "pool, planning and batch seed (batch k packed with seed + k)");
  app.add_option("--watchdog", o.run.watchdog, "seconds without progress before every rank stops")->check(CLI::PositiveNumber);
  app.add_flag("--json", o.run.json, "one JSON object per step, then a summary");
  app.add_flag("--check", o.run.check, "compare every step's loss with the single-process run of the same batches (exit 1 if off)");
  app.add_option("--calibration-weight", o.run.calibration_weight,
                 "how fast the calibrated op prices follow the machine's speed: weight of the last step's "
                 "median measured / fitted ratio, in (0, 1]")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double weight = 0;
            try {
              weight = std::stod(text);
            } catch (const std::exception&) {
              return "not a number: " + text;
            }
            return weight > 0 && weight <= 1 ? "" : "must be in (0, 1], got " + text;
          },
          "in (0, 1]"));
  app.add_flag("--op-log", o.run.op_log, "print every op's measured and predicted time (stderr)");
  app.add_flag("--recompute-memory", o.recompute_memory,
               "measure the heap bytes each module keeps for 4 microbatches of the first batch with its first "
               "k layers recomputed, k = 0 .. layers, against the memory model (JSON lines), and stop");
  app.add_option("--memory-mib", o.run.memory_mib,
                 "memory of each rank in MiB as the planner sees it (default 8 GiB); less makes the plan and each "
                 "batch recompute layers, which the stages then do");
  app.add_option("--gradient-bucket-mib", o.run.gradient_bucket_mib,
                 "plan with gradient buckets of this many MiB: each stage says each bucket final in its last "
                 "backward, so its data-parallel sum overlaps the rest, as predicted (default 0: one sum after "
                 "the last op)");
  app.add_option("--tolerance", o.run.tolerance, "relative tolerance of --check (default 1e-5; 1e-12 with --float64)");
  app.add_flag("--float64", m.float64, "double precision");
  app.add_option("--model-seed", m.seed, "initial weights and sample contents");
  app.add_option("--learning-rate", m.learning_rate, "Adam step size");
  app.add_option("--encoder-hidden", m.encoder_hidden, "encoder width");
  app.add_option("--encoder-layers", m.encoder_layers, "encoder blocks");
  app.add_option("--encoder-heads", m.encoder_heads, "encoder attention heads");
  app.add_option("--encoder-ffn", m.encoder_ffn, "encoder MLP width");
  app.add_option("--llm-hidden", m.llm_hidden, "LM width");
  app.add_option("--llm-layers", m.llm_layers, "LM blocks");
  app.add_option("--llm-heads", m.llm_heads, "LM attention heads");
  app.add_option("--llm-ffn", m.llm_ffn, "LM MLP width");
  app.add_option("--vocab", m.vocab, "LM vocabulary");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);
    return status == 0 ? 0 : 2;
  }
  return run(argc, argv, o);
}
