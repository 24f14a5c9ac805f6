// SPDX-License-Identifier: Apache-2.0
// dflop-train-toy: trains the toy per-token MLP (toy_model.hpp) with dflop's
// pipeline executor. Threads by default; under `mpirun -np N` one process per
// rank over MPI; `--reference` runs the same model sequentially.
//
// With a cost model (`--op-cost-us A,B`, the emulated device time, or
// `--cost-profile FILE`, a table `--profile` wrote) every step is planned: batch
// k is drawn with seed + k and scheduled by the library's batch_scheduler for the
// toy's LLM-only layout (packed, slots ordered, simulated), on a background thread
// `--lookahead` batches ahead, and run by plan_runner (the multimodal executor, in
// the library's slot order); `--online` refines the model from every step's op
// times (toy_runtime.hpp). Without a cost model the fixed batch runs in contiguous
// microbatches on the single-module executor (any schedule, `--chunks`).
//
// With `--plan PLAN.json --emulate` it runs a saved plan instead: every rank of
// the plan over emulated devices, batches scheduled by the library
// (plan_training.hpp).
#include "emulated_device.hpp"
#include "plan_training.hpp"
#include "toy_model.hpp"
#include "toy_profile.hpp"
#include "toy_runtime.hpp"

#include <dflop/cost/profile.hpp>
#include <dflop/exec/executor.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/runtime/async_planner.hpp>
#include <dflop/runtime/drift_monitor.hpp>
#include <dflop/runtime/online_cost_model.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>

#if defined(DFLOP_TRAIN_TOY_WITH_MPI)
#include <dflop/exec/mpi_communicator.hpp>
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t toy_divisor = 256;  // LLM tokens per toy token

struct options {
  std::uint32_t stages = 4;
  std::uint32_t microbatches = 8;
  std::uint32_t replicas = 1;
  int steps = 5;
  std::size_t samples = 64;
  std::size_t hidden = 16;
  std::uint64_t seed = 1;
  std::string schedule = "1f1b";
  std::uint32_t chunks = 1;
  double learning_rate = 0.5;
  double watchdog = dflop::default_watchdog_seconds;
  bool json = false;
  bool reference = false;
  int fault_stage = -1;
  // Device-time emulation, cost model and runtime.
  dflop::toy::op_cost op_cost;
  std::string cost_profile;
  double initial_cost_scale = 1;
  bool online = false;
  double forgetting = 0.98;
  std::size_t lookahead = 1;
  std::string profile_out;
  std::vector<double> profile_sizes{8, 16, 32, 64, 128, 256};
  int profile_repeats = 5;

  // Planned steps: a cost model prices and simulates every batch.
  [[nodiscard]] bool planned() const { return op_cost.on() || !cost_profile.empty(); }
};

// The toy stage; throws in its forward at step 1 when it is the faulty stage, and
// sleeps the emulated device time after each forward and backward.
class toy_stage : public dflop::toy::mlp_stage {
public:
  toy_stage(std::uint32_t stage, const options& o, const int* step)
      : mlp_stage(stage, o.stages * o.chunks, o.hidden, toy_divisor, o.seed), stage_(stage),
        faulty_(o.fault_stage >= 0 && static_cast<std::uint32_t>(o.fault_stage) == stage), step_(step),
        cost_(o.op_cost) {}
  template <class Context>
  void forward(Context& ctx) {
    if (faulty_ && *step_ == 1) throw std::runtime_error("injected fault (--fault-stage " + std::to_string(stage_) + ")");
    mlp_stage::forward(ctx);
    dflop::toy::wait_for_device(cost_.forward_seconds(dflop::toy::tokens(ctx.samples, toy_divisor)));
  }
  template <class Context>
  void backward(Context& ctx) {
    mlp_stage::backward(ctx);
    dflop::toy::wait_for_device(cost_.backward_seconds(dflop::toy::tokens(ctx.samples, toy_divisor)));
  }

private:
  std::uint32_t stage_;
  bool faulty_;
  const int* step_;
  dflop::toy::op_cost cost_;
};

// What a planned step adds to its report.
struct step_figures {
  double predicted_seconds = 0;
  double planning_seconds = 0;
  double planning_wait_seconds = 0;
  double hop_seconds = 0;          // the model's time per cross-rank hop in the prediction
  std::optional<double> op_error;  // the online model's rolling op prediction error
  std::string drift;               // the drift monitor's advice, when it fired
};

double relative_error(double predicted, double measured) {
  return measured > 0 ? std::abs(predicted - measured) / measured : 0.0;
}

void report(const options& o, int step, double loss, double seconds, const char* mode,
            const step_figures* planned = nullptr) {
  if (o.json) {
    nlohmann::json line{{"step", step},         {"loss", loss},     {"measured_seconds", seconds},
                        {"mode", mode},         {"schedule", o.schedule}, {"stages", o.stages * o.chunks},
                        {"microbatches", o.microbatches}, {"replicas", o.replicas}};
    if (planned) {
      line["predicted_seconds"] = planned->predicted_seconds;
      line["prediction_error"] = relative_error(planned->predicted_seconds, seconds);
      line["planning_seconds"] = planned->planning_seconds;
      line["planning_wait_seconds"] = planned->planning_wait_seconds;
      line["hop_seconds"] = planned->hop_seconds;
      line["online"] = o.online;
      if (planned->op_error) line["op_prediction_error"] = *planned->op_error;
      if (!planned->drift.empty()) line["drift"] = planned->drift;
    }
    std::cout << line.dump() << std::endl;
  } else {
    std::cout << "step " << step << "  loss " << loss << "  " << seconds * 1e3 << " ms";
    if (planned)
      std::cout << " (predicted " << planned->predicted_seconds * 1e3 << " ms, error "
                << relative_error(planned->predicted_seconds, seconds) * 100 << "%; planning "
                << planned->planning_seconds * 1e3 << " ms, waited " << planned->planning_wait_seconds * 1e3 << " ms)";
    std::cout << " (" << mode << ")" << std::endl;
    if (planned && !planned->drift.empty()) std::cerr << "step " << step << ": " << planned->drift << "\n";
  }
}

// Means over the run, printed last: prediction error of the first and last
// `window` steps, planning time, and the trainer's wait for plans (over steps
// 1.., since batch 0 has no earlier step to be planned behind).
void report_summary(const options& o, const std::vector<double>& errors, const std::vector<double>& planning,
                    const std::vector<double>& waits, const std::vector<double>& measured) {
  const auto mean = [](auto first, auto last) {
    double sum = 0;
    for (auto i = first; i != last; ++i) sum += *i;
    return first == last ? 0.0 : sum / static_cast<double>(last - first);
  };
  const std::size_t n = errors.size(), window = std::min<std::size_t>(10, n);
  const double first = mean(errors.begin(), errors.begin() + static_cast<std::ptrdiff_t>(window));
  const double last = mean(errors.end() - static_cast<std::ptrdiff_t>(window), errors.end());
  const double plan = mean(planning.begin(), planning.end());
  const double wait = n > 1 ? mean(waits.begin() + 1, waits.end()) : mean(waits.begin(), waits.end());
  const double step = mean(measured.begin(), measured.end());
  if (o.json) {
    nlohmann::json line{{"summary", true},
                        {"steps", n},
                        {"window", window},
                        {"mean_prediction_error_first", first},
                        {"mean_prediction_error_last", last},
                        {"mean_planning_seconds", plan},
                        {"mean_planning_wait_seconds", wait},
                        {"mean_measured_seconds", step},
                        {"lookahead", o.lookahead},
                        {"online", o.online}};
    std::cout << line.dump() << std::endl;
  } else {
    std::cout << "prediction error: first " << window << " steps " << first * 100 << "%, last " << window
              << " steps " << last * 100 << "%; planning " << plan * 1e3 << " ms per batch, waited " << wait * 1e3
              << " ms per step (lookahead " << o.lookahead << ")" << std::endl;
  }
}

// Learning rate per token of the batch (every sample runs in one microbatch), so
// the step size does not grow with the batch.
double rate(const options& o, std::span<const dflop::sample> samples) {
  std::size_t tokens = 0;
  for (const auto& s : samples) tokens += dflop::toy::tokens(s, toy_divisor);
  return o.learning_rate / static_cast<double>(tokens);
}

// The cost model planning starts from: the profiled or known curve, times --initial-cost-scale.
dflop::fitted_cost_model seed_model(const options& o) {
  const auto base = o.cost_profile.empty() ? dflop::toy::known_model(o.op_cost)
                                           : dflop::toy::profiled_model(dflop::read_profile_file(o.cost_profile));
  return dflop::toy::scaled_model(base, o.initial_cost_scale);
}

// What planned runs share: the workload batches are drawn from, the seed model.
struct planning_inputs {
  std::vector<dflop::sample> pool;
  std::shared_ptr<const dflop::toy::model_snapshot> seed;

  explicit planning_inputs(const options& o)
      : pool(dflop::generate_mixture("onevision", std::max<std::size_t>(1024, 16 * o.samples), o.seed)),
        seed(std::make_shared<const dflop::toy::model_snapshot>(seed_model(o))) {}

  [[nodiscard]] dflop::toy::plan_setup setup(const options& o) const {
    return {pool, o.samples, o.seed, o.replicas, o.microbatches, o.stages, o.schedule, toy_divisor, o.hidden};
  }
  // A typical microbatch's toy tokens: conditions the online estimator.
  [[nodiscard]] double typical_microbatch_tokens(const options& o) const {
    double total = 0;
    for (const auto& s : pool) total += static_cast<double>(dflop::toy::priced_view(s, toy_divisor).llm_tokens);
    return total / static_cast<double>(pool.size()) * static_cast<double>(o.samples) /
           static_cast<double>(o.replicas * o.microbatches);
  }
};

// One rank's planned training: plans ahead on a background thread (the library's
// batch_scheduler), runs each step with plan_runner, shares the op times, refines
// the model (--online), reports on rank 0.
template <class Communicator>
void train_planned(Communicator& comm, const options& o, const char* mode) {
  const planning_inputs inputs(o);
  const std::uint32_t model_stages = o.stages;
  dflop::toy::batch_planner fitter(inputs.setup(o));  // the trainer thread's, for fitting hop times
  int step = 0;
  // The rank's stage: the LLM stage its role names (world rank = replica x stages + stage, as before).
  dflop::plan_runner<dflop::named_schedule, Communicator, toy_stage> run(
      fitter.layout(), comm, [&](const dflop::stage_assignment& a) { return toy_stage(a.role.stage, o, &step); },
      {.watchdog_seconds = o.watchdog, .record_op_times = true});
  const bool replica_zero = run.assignment().role.replica == 0;

  dflop::online_cost_model online(inputs.seed->ops, {.forgetting = o.forgetting,
                                                 .reference_tokens = inputs.typical_microbatch_tokens(o)});
  // Batch k is planned with the snapshot published after batch k - lookahead - 1
  // (the seed before that): published before the trainer takes batch k - lookahead,
  // which is when the planning thread may start batch k, so it never waits for it
  // and the plan does not depend on timing. Declared before the planner: outlives its thread.
  dflop::toy::snapshot_board board;
  const std::uint64_t delay = o.lookahead + 1;
  auto plan = [&, planner = dflop::toy::batch_planner(inputs.setup(o))](std::uint64_t k, std::stop_token stop) {
    std::shared_ptr<const dflop::toy::model_snapshot> model = inputs.seed;
    if (o.online && k >= delay) model = board.wait_for(k - delay, stop);
    if (!model) throw dflop::error("planning stopped");  // the planner is shutting down
    return planner.plan(k, *model);
  };
  std::optional<dflop::async_planner<decltype(plan)>> ahead;
  if (o.lookahead > 0) ahead.emplace(plan, dflop::async_planner_options{.lookahead = o.lookahead});

  // Measured vs predicted step time, as a ratio: each batch has its own prediction.
  dflop::drift_monitor drift(1.0, {.threshold = 0.10, .window = 5, .min_samples = 3});
  std::vector<double> errors, planning, waits, measured;
  std::deque<double> hops;
  for (; step < o.steps; ++step) {
    const auto asked = std::chrono::steady_clock::now();
    const auto batch = ahead ? ahead->next() : plan(static_cast<std::uint64_t>(step), std::stop_token{});
    step_figures figures{batch.predicted_seconds(), batch.planning_seconds,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count(),
                         batch.hop_seconds, {}, {}};
    const auto result = run.step(batch.schedule, batch.samples);
    run.stage().apply(rate(o, batch.samples));

    const auto shared = dflop::toy::share_step(comm, result, batch, replica_zero, o.microbatches, model_stages);
    const double seconds = shared.seconds;
    if (o.online) {
      // Same observations in the same order on every rank: identical models everywhere.
      for (std::uint32_t j = 0; j < o.microbatches; ++j) {
        const auto members = batch.priced_members(0, j);  // replica 0's microbatch j, in the model's view
        for (std::uint32_t s = 0; s < model_stages; ++s)
          for (bool backward : {false, true}) {
            const double op_seconds = shared.op_seconds[dflop::toy::op_slot(j, s, model_stages, backward)];
            online.update(dflop::toy::stage_piece, 1, members,
                          backward ? dflop::cost_pass::backward : dflop::cost_pass::forward, op_seconds);
          }
      }
      // The hop time: what the refined ops do not explain of this step; the median
      // of the last 5 steps' goes with the snapshot.
      auto ops = online.snapshot();
      hops.push_back(fitter.fit_hop_seconds(batch, ops, seconds));
      if (hops.size() > 5) hops.pop_front();
      std::vector<double> sorted(hops.begin(), hops.end());
      std::sort(sorted.begin(), sorted.end());
      board.publish(dflop::toy::model_snapshot(std::move(ops), sorted[sorted.size() / 2]));
      figures.op_error = online.prediction_errors().rolling_mean;
    }
    if (comm.rank() != 0) continue;
    if (figures.predicted_seconds > 0 && drift.observe(seconds / figures.predicted_seconds)) {
      const auto status = drift.status();
      char text[200];
      std::snprintf(text, sizeof text,
                    "re-plan: the last %zu steps ran a median %+.1f%% off their predicted times", status.samples,
                    status.relative_drift * 100);
      figures.drift = text;
      drift.reset(1.0);
    }
    errors.push_back(relative_error(figures.predicted_seconds, seconds));
    planning.push_back(figures.planning_seconds);
    waits.push_back(figures.planning_wait_seconds);
    measured.push_back(seconds);
    report(o, step, result.loss, seconds, mode, &figures);
  }
  if (comm.rank() == 0 && !errors.empty()) report_summary(o, errors, planning, waits, measured);
}

template <class Communicator>
void train(Communicator& comm, const options& o, const dflop::step_batch& batch, const char* mode) {
  if (o.planned()) return train_planned(comm, o, mode);
  const auto schedule = dflop::make_schedule(o.schedule, {o.stages, o.microbatches}, o.chunks);
  const auto pipeline_rank = static_cast<std::uint32_t>(comm.rank()) % o.stages;
  int step = 0;
  std::vector<toy_stage> stages;
  for (std::uint32_t c = 0; c < o.chunks; ++c) stages.emplace_back(c * o.stages + pipeline_rank, o, &step);
  dflop::executor<Communicator, toy_stage> run(comm, o.stages, std::move(stages), {.watchdog_seconds = o.watchdog});
  const double lr = rate(o, batch.samples);
  for (; step < o.steps; ++step) {
    const auto result = run.step(schedule, batch);
    for (auto& stage : run.stages()) stage.apply(lr);
    if (comm.rank() == 0) report(o, step, result.loss, result.seconds, mode);
  }
}

// The same model in one thread; planned runs replay the same plans (from the seed
// model) with the multimodal reference, in the library's slot order.
int run_reference(const options& o, const dflop::step_batch& fixed) {
  int step = 0;
  std::vector<toy_stage> stages, no_encoder;
  for (std::uint32_t s = 0; s < o.stages * o.chunks; ++s) stages.emplace_back(s, o, &step);
  std::optional<planning_inputs> inputs;
  std::optional<dflop::toy::batch_planner> planner;
  if (o.planned()) {
    inputs.emplace(o);
    planner.emplace(inputs->setup(o));
  }
  for (; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    double loss = 0;
    if (planner) {
      const auto planned = planner->plan(static_cast<std::uint64_t>(step), *inputs->seed);
      loss = dflop::run_sequential(no_encoder, stages, planned.view(), o.microbatches);
      for (auto& stage : stages) stage.apply(rate(o, planned.samples));
    } else {
      loss = dflop::run_sequential(stages, fixed, o.microbatches, o.replicas);
      for (auto& stage : stages) stage.apply(rate(o, fixed.samples));
    }
    report(o, step, loss, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), "reference");
  }
  return 0;
}

// --profile: one toy stage (a middle one: it receives and sends) over the grid.
int run_profile(const options& o) {
  options one = o;
  one.stages = 3;
  one.chunks = 1;
  one.fault_stage = -1;
  int step = 0;
  std::ostream& out = o.json ? std::cerr : std::cout;
  if (!o.op_cost.on()) out << "profiling the toy's CPU time (no --op-cost-us: no device time is emulated)\n";
  const auto fitted = dflop::toy::profile_stage(toy_stage(1, one, &step), o.hidden, toy_divisor, o.profile_sizes,
                                                o.profile_repeats, o.profile_out, out);
  if (o.json) {
    nlohmann::json line{{"profile", o.profile_out}, {"sizes", o.profile_sizes}};
    for (const auto& curve : fitted.curves())
      line["fit"] = {{"forward", {curve.forward.a, curve.forward.b, curve.forward.c}},
                     {"backward", {curve.backward.a, curve.backward.b, curve.backward.c}}};
    std::cout << line.dump() << std::endl;
  }
  return 0;
}

void check(const options& o) {
  if (!o.planned() && (o.online || o.initial_cost_scale != 1))
    throw dflop::input_error("--online", 0, "--online and --initial-cost-scale need a cost model: --op-cost-us or --cost-profile");
  if (!(o.initial_cost_scale > 0) || !std::isfinite(o.initial_cost_scale))
    throw dflop::input_error("--initial-cost-scale", 0, "must be finite and > 0");
  if (o.reference && o.online)
    throw dflop::input_error("--reference", 0, "cannot replay --online plans (they depend on measured op times)");
  if (o.planned() && o.chunks != 1)
    throw dflop::input_error("--chunks", 0,
                             "planned steps (--op-cost-us, --cost-profile) run one-chunk schedules: the library's "
                             "batch scheduler and the multimodal executor take one chunk per rank");
  if (!o.profile_out.empty() && o.profile_sizes.size() < 3)
    throw dflop::input_error("--profile-sizes", 0, "needs at least 3 sizes for the fit");
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

// --plan: every rank of the plan, on threads or (under mpirun) one per process.
// Bad input (file, method, world size) exits 2, as the `dflop` tool does.
int run_plan_mode(int argc, char** argv, const options& o, dflop::toy::plan_run_options run) {
  run.steps = o.steps;
  run.json = o.json;
  run.watchdog = o.watchdog;
  bool mpi = false;
  try {
#if defined(DFLOP_TRAIN_TOY_WITH_MPI)
    if (launched_by_mpirun()) {
      int provided = 0;
      MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
      mpi = true;
      const dflop::toy::plan_run_inputs inputs(run);
      dflop::mpi_communicator comm(MPI_COMM_WORLD, o.watchdog);
      dflop::toy::train_plan(comm, inputs, run);
      MPI_Finalize();
      return 0;
    }
#else
    (void)argc;
    (void)argv;
    (void)mpi;
#endif
    const dflop::toy::plan_run_inputs inputs(run, run.json ? nullptr : &std::cerr);
    dflop::run_inproc(
        inputs.chosen.cluster.gpus, [&](dflop::inproc_communicator& comm) { dflop::toy::train_plan(comm, inputs, run); },
        o.watchdog);
    return 0;
  } catch (const dflop::input_error& e) {
    // Every failing rank says why before aborting: the first abort kills the others.
    std::cerr << "dflop-train-toy: " << e.what() << "\n";
#if defined(DFLOP_TRAIN_TOY_WITH_MPI)
    // Some ranks may not have failed (a file unreadable on one node): finalizing
    // would wait for them, aborting ends the job with status 2 everywhere.
    if (mpi) MPI_Abort(MPI_COMM_WORLD, 2);
#endif
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dflop-train-toy: " << e.what() << "\n";
#if defined(DFLOP_TRAIN_TOY_WITH_MPI)
    if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains a toy per-token MLP with dflop's pipeline executor (threads, or MPI under mpirun)"};
  options o;
  std::string op_cost_text;
  app.add_option("--stages", o.stages, "pipeline ranks (under mpirun: default world size / replicas)");
  app.add_option("--microbatches", o.microbatches, "microbatches per replica and step")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "training steps")->check(CLI::NonNegativeNumber);
  app.add_option("--replicas", o.replicas, "data-parallel replicas")->check(CLI::PositiveNumber);
  app.add_option("--samples", o.samples, "samples in the global batch (onevision mixture)")->check(CLI::PositiveNumber);
  app.add_option("--hidden", o.hidden, "width of every layer")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "seed of the samples and the weights");
  app.add_option("--schedule", o.schedule, "gpipe, 1f1b, interleaved or zb-h1");
  app.add_option("--chunks", o.chunks, "model chunks per rank (interleaved only)")->check(CLI::PositiveNumber);
  app.add_option("--learning-rate", o.learning_rate, "SGD step per token");
  app.add_option("--watchdog", o.watchdog, "seconds a rank waits without progress before stopping all");
  app.add_flag("--json", o.json, "one JSON object per step");
  app.add_flag("--reference", o.reference, "run the same model sequentially in one thread");
  app.add_option("--fault-stage", o.fault_stage, "throw inside this stage's forward at step 1");
  app.add_option("--op-cost-us", op_cost_text,
                 "A,B: emulate device time (an emulation, not compute): each stage's forward also sleeps "
                 "A + B x (toy tokens of the microbatch) microseconds, its backward twice that. Also the "
                 "known cost curve planning starts from (without --cost-profile)");
  app.add_option("--cost-profile", o.cost_profile, "start planning from this profile CSV's fitted 'llm' curve (--profile writes one)");
  app.add_option("--initial-cost-scale", o.initial_cost_scale, "start from the cost model times X (X times off)");
  app.add_flag("--online", o.online, "refine the cost model from every step's op times (shared by all ranks)");
  app.add_option("--forgetting", o.forgetting, "online model: weight kept per update, in (0, 1]")
      ->check(CLI::Range(1e-6, 1.0));
  app.add_option("--lookahead", o.lookahead, "batches planned ahead on a background thread (0: plan in the step loop)");
  app.add_option("--profile", o.profile_out, "profile one toy stage's forward and backward, write the CSV here, fit, exit");
  app.add_option("--profile-sizes", o.profile_sizes, "toy-token counts to profile at")->delimiter(',');
  app.add_option("--profile-repeats", o.profile_repeats, "timed runs per size")->check(CLI::PositiveNumber);
  auto* stages_option = app.get_option("--stages");
  dflop::toy::plan_run_options plan_run;
  app.add_option("--plan", plan_run.plan_path, "run this saved plan (dflop plan --save) on every rank of it");
  app.add_option("--method", plan_run.method, "with --plan: dflop, data_blind or dflop_reference");
  app.add_flag("--emulate", plan_run.emulate, "with --plan: emulated devices sleep the cost model's op times");
  app.add_option("--time-scale", plan_run.emulation.time_scale, "with --plan: op sleep = cost-model seconds x this")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--byte-scale", plan_run.emulation.byte_scale,
                 "with --plan: activation bytes moved, as a fraction of the model's")
      ->check(CLI::Range(1e-9, 1.0));
  app.add_option("--workload", plan_run.workload, "with --plan: JSONL trace batches are drawn from (default: built-in)");
  CLI11_PARSE(app, argc, argv);

  if (!plan_run.plan_path.empty()) {
    if (app.get_option("--seed")->count() > 0) plan_run.seed = o.seed;
    // The plan fixes the ranks, schedule and batches: the toy model's own flags do not apply.
    for (const char* flag : {"--stages", "--microbatches", "--replicas", "--samples", "--hidden", "--schedule", "--chunks",
                             "--learning-rate", "--reference", "--fault-stage", "--op-cost-us", "--cost-profile",
                             "--initial-cost-scale", "--online", "--forgetting", "--lookahead", "--profile"})
      if (app.get_option(flag)->count() > 0) {
        std::cerr << "dflop-train-toy: " << flag << ": does not apply with --plan (the plan fixes ranks, schedule and batches)\n";
        return 2;
      }
    return run_plan_mode(argc, argv, o, plan_run);
  }
  try {
    if (!op_cost_text.empty()) o.op_cost = dflop::toy::parse_op_cost(op_cost_text);
    check(o);
    if (!o.profile_out.empty()) return run_profile(o);
    const auto samples = dflop::generate_mixture("onevision", o.samples, o.seed);
#if defined(DFLOP_TRAIN_TOY_WITH_MPI)
    if (launched_by_mpirun() && !o.reference) {
      int provided = 0;  // planning threads never call MPI: funneled is enough
      MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
      int world = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &world);
      if (stages_option->count() == 0) o.stages = static_cast<std::uint32_t>(world) / o.replicas;
      if (o.stages * o.replicas != static_cast<std::uint32_t>(world))
        throw dflop::input_error("--stages", 0, "stages x replicas must equal the MPI world size " + std::to_string(world));
      const auto lists = dflop::contiguous_microbatches(samples.size(), o.replicas * o.microbatches);
      dflop::mpi_communicator comm(MPI_COMM_WORLD, o.watchdog);
      train(comm, o, {samples, lists}, "mpi");
      MPI_Finalize();
      return 0;
    }
#else
    (void)stages_option;
    if (launched_by_mpirun() && !o.reference)
      std::cerr << "dflop-train-toy: built without MPI; running threads in every process\n";
#endif
    const auto lists = dflop::contiguous_microbatches(samples.size(), o.replicas * o.microbatches);
    const dflop::step_batch batch{samples, lists};
    if (o.reference) return run_reference(o, batch);
    dflop::run_inproc(
        static_cast<int>(o.stages * o.replicas), [&](dflop::inproc_communicator& comm) { train(comm, o, batch, "threads"); },
        o.watchdog);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "dflop-train-toy: " << e.what() << "\n";
    return 1;
  }
}
