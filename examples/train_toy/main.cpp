// SPDX-License-Identifier: Apache-2.0
// dflop-train-toy: trains the toy per-token MLP (toy_model.hpp) with dflop's
// pipeline executor. Threads by default; under `mpirun -np N` one process per
// rank over MPI; `--reference` runs the same model sequentially.
#include "toy_model.hpp"

#include <dflop/exec/executor.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>

#if defined(DFLOP_TRAIN_TOY_WITH_MPI)
#include <dflop/exec/mpi_communicator.hpp>
#endif

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

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
};

// The toy stage; throws in its forward at step 1 when it is the faulty stage.
class toy_stage : public dflop::toy::mlp_stage {
public:
  toy_stage(std::uint32_t stage, const options& o, const int* step)
      : mlp_stage(stage, o.stages * o.chunks, o.hidden, 256, o.seed), stage_(stage),
        faulty_(o.fault_stage >= 0 && static_cast<std::uint32_t>(o.fault_stage) == stage), step_(step) {}
  template <class Context>
  void forward(Context& ctx) {
    if (faulty_ && *step_ == 1) throw std::runtime_error("injected fault (--fault-stage " + std::to_string(stage_) + ")");
    mlp_stage::forward(ctx);
  }

private:
  std::uint32_t stage_;
  bool faulty_;
  const int* step_;
};

void report(const options& o, int step, double loss, double seconds, const char* mode) {
  if (o.json) {
    nlohmann::json line{{"step", step},         {"loss", loss},     {"measured_seconds", seconds},
                        {"mode", mode},         {"schedule", o.schedule}, {"stages", o.stages * o.chunks},
                        {"microbatches", o.microbatches}, {"replicas", o.replicas}};
    std::cout << line.dump() << std::endl;
  } else {
    std::cout << "step " << step << "  loss " << loss << "  " << seconds * 1e3 << " ms (" << mode << ")" << std::endl;
  }
}

// Learning rate per token, so the step size does not grow with the batch.
double rate(const options& o, const dflop::step_batch& batch) {
  std::size_t tokens = 0;
  for (std::uint32_t r = 0; r < o.replicas; ++r)
    for (std::uint32_t j = 0; j < o.microbatches; ++j) tokens += dflop::toy::tokens(batch.view(r, j, o.microbatches), 256);
  return o.learning_rate / static_cast<double>(tokens);
}

template <class Communicator>
void train(Communicator& comm, const options& o, const dflop::step_batch& batch, const char* mode) {
  const auto schedule = dflop::make_schedule(o.schedule, {o.stages, o.microbatches}, o.chunks);
  const auto pipeline_rank = static_cast<std::uint32_t>(comm.rank()) % o.stages;
  int step = 0;
  std::vector<toy_stage> stages;
  for (std::uint32_t c = 0; c < o.chunks; ++c) stages.emplace_back(c * o.stages + pipeline_rank, o, &step);
  dflop::executor<Communicator, toy_stage> run(comm, o.stages, std::move(stages), {.watchdog_seconds = o.watchdog});
  const double lr = rate(o, batch);
  for (; step < o.steps; ++step) {
    const auto result = run.step(schedule, batch);
    for (auto& stage : run.stages()) stage.apply(lr);
    if (comm.rank() == 0) report(o, step, result.loss, result.seconds, mode);
  }
}

int run_reference(const options& o, const dflop::step_batch& batch) {
  int step = 0;
  std::vector<toy_stage> stages;
  for (std::uint32_t s = 0; s < o.stages * o.chunks; ++s) stages.emplace_back(s, o, &step);
  const double lr = rate(o, batch);
  for (; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const double loss = dflop::run_sequential(stages, batch, o.microbatches, o.replicas);
    for (auto& stage : stages) stage.apply(lr);
    report(o, step, loss, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), "reference");
  }
  return 0;
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains a toy per-token MLP with dflop's pipeline executor (threads, or MPI under mpirun)"};
  options o;
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
  auto* stages_option = app.get_option("--stages");
  CLI11_PARSE(app, argc, argv);

  try {
    const auto samples = dflop::generate_mixture("onevision", o.samples, o.seed);
#if defined(DFLOP_TRAIN_TOY_WITH_MPI)
    if (launched_by_mpirun() && !o.reference) {
      MPI_Init(&argc, &argv);
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
