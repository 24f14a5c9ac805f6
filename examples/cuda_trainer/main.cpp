// SPDX-License-Identifier: Apache-2.0
// dflop-cuda-trainer: runs a dflop plan on CUDA stages. The plan is read from
// `--plan PLAN.json` (`dflop plan --save`) or, without it, planned here for
// siglip-400m+qwen2.5-7b on `--gpus` H100s (4 by default). Each step's global
// batch is scheduled by the library for `--method` (dflop, data_blind or
// dflop_reference), then every rank runs it through plan_runner with the
// multimodal executor: encoder -> LLM hand-off, TP groups, data-parallel
// gradient sums, the plan's schedule and slot order.
//
// - Under mpirun (built with MPI): one process per GPU of the plan, NCCL
//   bootstrapped from MPI; the world size must be the plan's GPU count.
// - Otherwise: every rank of the plan is a thread on one GPU (`--device`), each
//   with its own stream (stream_communicator).
//
// The stages (model_stage.hpp, model.hpp) launch real kernels on the rank's
// stream over activations of per-sample rows; the loss is computed and kept on
// the device and read once per step. `--check` compares step 0's loss and
// gradient norm with the same model computed on the host (reference.hpp). Bad input (plan file,
// method, world size, a plan that does not fit) exits 2; a failure at run time 1.
#include "device_runs.hpp"
#include "reference.hpp"
#include "trainer_inputs.hpp"

#include <dflop/error.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
#include <mpi.h>
#endif

#include <cmath>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

namespace {

namespace trainer = dflop::cuda_trainer;

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

struct cli_options {
  trainer::input_options inputs;
  trainer::run_options run;
  int device = 0;
  bool json = false;
  bool check = false;
};

void print_steps(const cli_options& o, const trainer::trainer_inputs& inputs, const std::vector<trainer::step_report>& steps,
                 const char* mode) {
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const auto& s = steps[k];
    if (o.json)
      std::cout << nlohmann::json{{"step", k},
                                  {"method", o.run.method},
                                  {"mode", mode},
                                  {"ranks", inputs.chosen.cluster.gpus},
                                  {"samples", inputs.batches[k].size()},
                                  {"loss", s.loss},
                                  {"gradient_norm", s.gradient_norm},
                                  {"seconds", s.seconds},
                                  {"messages", s.messages},
                                  {"optimizer_members", s.optimizer_members}}
                       .dump()
                << "\n";
    else
      std::cout << "step " << k << "  loss " << s.loss << "  |g| " << s.gradient_norm << "  " << s.seconds * 1e3
                << " ms\n";
  }
}

// Step 0's loss and gradient norm against the host computation; every rank's losses must agree.
bool check_losses(const cli_options& o, const trainer::trainer_inputs& inputs,
                  const std::vector<std::vector<trainer::step_report>>& ranks) {
  bool agree = true;
  for (const auto& rank : ranks)
    for (std::size_t k = 0; k < rank.size(); ++k) agree = agree && rank[k].loss == ranks.front()[k].loss;
  if (ranks.front().empty()) return agree;
  const auto host = trainer::reference_step(inputs.batches.front(), inputs.chosen.model_spec, o.run.model);
  const auto& device = ranks.front().front();
  const auto near = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::abs(b); };
  const bool close = near(device.loss, host.loss) && near(device.gradient_norm, host.gradient_norm);
  if (o.json)
    std::cout << nlohmann::json{{"check", close && agree},     {"loss", device.loss},
                                {"host_loss", host.loss},      {"gradient_norm", device.gradient_norm},
                                {"host_gradient_norm", host.gradient_norm}, {"ranks_agree", agree}}
                     .dump()
              << "\n";
  else
    std::cout << "check: step 0 loss " << device.loss << " (host " << host.loss << "), |g| " << device.gradient_norm
              << " (host " << host.gradient_norm << ")" << (close ? ": equal" : ": DIFFERENT")
              << (agree ? "; every rank agrees" : "; ranks DISAGREE") << "\n";
  return close && agree;
}

int run(const cli_options& o, bool mpi) {
  int rank = 0;
#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
  int size = 1;
  if (mpi) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
#endif
  const auto inputs = trainer::make_inputs(o.inputs, rank == 0 && !o.json ? &std::cerr : nullptr);
  const auto& chosen = inputs.chosen;
  const auto& config = chosen.method(o.run.method).config;
  const char* mode = mpi ? "nccl" : "streams";
#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
  if (mpi && size != chosen.cluster.gpus)
    throw dflop::input_error("world", 0,
                             "the plan runs on " + std::to_string(chosen.cluster.gpus) +
                                 " GPUs (one process each), mpirun started " + std::to_string(size) + ": use mpirun -np " +
                                 std::to_string(chosen.cluster.gpus));
#endif
  if (rank == 0 && !o.json)
    std::cerr << o.run.method << ": " << config << ", schedule " << chosen.schedule << "; " << chosen.cluster.gpus
              << (mpi ? " processes over NCCL" : " ranks on the streams of GPU " + std::to_string(o.device)) << "; "
              << chosen.model_spec.encoder.layers << " + " << chosen.model_spec.llm.layers << " layers of "
              << o.run.model.hidden << "-wide rows, " << o.run.model.tokens_per_row << " tokens per row\n";
  std::vector<std::vector<trainer::step_report>> ranks;
  if (mpi) ranks.push_back(trainer::run_on_nccl(inputs, o.run));  // losses are world sums: rank 0's stand for all
  else ranks = trainer::run_on_one_gpu(inputs, o.run, o.device);
  if (rank != 0) return 0;
  print_steps(o, inputs, ranks.front(), mode);
  return !o.check || check_losses(o, inputs, ranks) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs a dflop plan on CUDA stages: every rank of it on one GPU's streams, or one process per GPU "
               "over NCCL under mpirun"};
  cli_options o;
  app.add_option("--plan", o.inputs.plan_path, "the plan to run (dflop plan --save); default: plan the built-in model")
      ->check(CLI::ExistingFile);
  app.add_option("--method", o.inputs.method, "dflop, data_blind or dflop_reference");
  app.add_option("--steps", o.inputs.steps, "global batches to train")->check(CLI::NonNegativeNumber);
  auto* seed = app.add_option("--seed", "sampling seed; batch k is packed with seed + k (default: the plan's)");
  auto* gpus = app.add_option("--gpus", o.inputs.gpus, "without --plan: GPUs to plan for (default 4; under mpirun the world size)")
                   ->check(CLI::PositiveNumber);
  app.add_option("--global-batch", o.inputs.global_batch, "without --plan: samples per global batch")
      ->check(CLI::PositiveNumber);
  app.add_option("--schedule", o.inputs.schedule, "without --plan: the schedule to plan for (gpipe, 1f1b, zb-h1)");
  app.add_option("--workload", o.inputs.workload, "JSONL trace the batches are drawn from (default: built-in mixture)")
      ->check(CLI::ExistingFile);
  app.add_option("--hidden", o.run.model.hidden, "values per activation row")->check(CLI::PositiveNumber);
  app.add_option("--tokens-per-row", o.run.model.tokens_per_row, "tokens one activation row stands for")
      ->check(CLI::PositiveNumber);
  app.add_option("--learning-rate", o.run.learning_rate, "length of each step in parameter space (w -= rate x g / |g|)");
  app.add_option("--watchdog", o.run.watchdog, "seconds a rank waits without progress before stopping all");
  app.add_option("--device", o.device, "without mpirun: the GPU every rank runs on");
  app.add_flag("--json", o.json, "one JSON object per step");
  app.add_flag("--check", o.check, "compare step 0's loss with the host computation (exit 1 if it differs)");
  CLI11_PARSE(app, argc, argv);
  if (seed->count() > 0) o.inputs.seed = seed->as<std::uint64_t>();
  o.run.method = o.inputs.method;

  bool mpi = false;
  int rank = 0;
#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
  if (launched_by_mpirun()) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (gpus->count() == 0) o.inputs.gpus = size;
  }
#else
  (void)gpus;
  if (launched_by_mpirun()) std::cerr << "dflop-cuda-trainer: built without MPI; every process runs the whole plan\n";
#endif
  int status = 0;
  try {
    status = run(o, mpi);
  } catch (const dflop::input_error& e) {
    if (rank == 0) std::cerr << "dflop-cuda-trainer: " << e.what() << "\n";
    status = 2;
  } catch (const dflop::infeasible_error& e) {
    if (rank == 0) std::cerr << "dflop-cuda-trainer: " << e.what() << "\n";
    status = 2;
  } catch (const std::exception& e) {
    std::cerr << "dflop-cuda-trainer: " << e.what() << "\n";
#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
    if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    return 1;
  }
#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
  if (mpi) MPI_Finalize();
#endif
  return status;
}
