// SPDX-License-Identifier: Apache-2.0
// An affine CUDA stage (y = w x + b per element, loss 0.5 |y|^2 on the last stage)
// run by dflop's executor on one GPU: over a 1-rank NCCL communicator (a rank's
// chunks hand activations over locally) and over the stream communicator (one
// thread and stream per rank, device-to-device copies, data-parallel sums).
#include "exec_gpu.hpp"

#include <dflop/cuda/error.cuh>
#include <dflop/cuda/nccl_communicator.cuh>
#include <dflop/cuda/stream_communicator.cuh>
#include <dflop/exec/executor.hpp>
#include <dflop/schedule/by_name.hpp>

#include <cmath>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <span>
#include <vector>

namespace dflop::test {
namespace {

constexpr std::uint32_t tokens_per_sample = 64;

__global__ void fill_input(double* x, std::uint32_t n, std::uint32_t first) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = sin(0.01 * static_cast<double>(first * tokens_per_sample + i));
}
__global__ void affine(const double* x, double* y, std::uint32_t n, double w, double b) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = w * x[i] + b;
}
__global__ void add_loss(const double* y, std::uint32_t n, double* loss) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(loss, 0.5 * y[i] * y[i]);
}
__global__ void affine_backward(const double* x, const double* dy, double* dx, std::uint32_t n, double w,
                                double* gradients) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (dx != nullptr) dx[i] = w * dy[i];
  atomicAdd(&gradients[0], dy[i] * x[i]);
  atomicAdd(&gradients[1], dy[i]);
}

unsigned blocks(std::uint32_t n) { return (n + 255) / 256; }

// Device memory freed with cudaFree.
struct cuda_free {
  void operator()(double* pointer) const noexcept { (void)cudaFree(pointer); }
};

// A user CUDA stage: launches its kernels on ctx.resource (the compute stream) and
// touches the executor's buffers only there. The last stage reports each
// microbatch's loss through ctx.loss (one stream synchronization per microbatch:
// a test; a trainer would keep the loss on the device).
class affine_stage {
public:
  affine_stage(std::uint32_t stage, std::uint32_t stages, bool fails = false)
      : stage_(stage), stages_(stages), w_(0.9 + 0.05 * stage), b_(0.01 * stage), fails_(fails) {
    double* gradients = nullptr;
    DFLOP_CUDA_TRY(cudaMalloc(&gradients, 2 * sizeof(double)));
    gradients_.reset(gradients);
    // cudaMemset runs on the legacy stream, which the executor's non-blocking streams do not wait for.
    DFLOP_CUDA_TRY(cudaMemset(gradients, 0, 2 * sizeof(double)));
    DFLOP_CUDA_TRY(cudaStreamSynchronize(nullptr));
  }
  std::size_t input_bytes(const microbatch_view& mb) const { return stage_ == 0 ? 0 : bytes(mb); }
  std::size_t output_bytes(const microbatch_view& mb) const { return stage_ + 1 == stages_ ? 0 : bytes(mb); }

  void forward(basic_stage_context<cudaStream_t>& ctx) {
    if (fails_ && ctx.microbatch == 1) throw std::runtime_error("injected fault");
    const auto n = static_cast<std::uint32_t>(bytes(ctx.samples) / sizeof(double));
    auto* y = reinterpret_cast<double*>(ctx.stash(n * sizeof(double)).data());
    const double* x = reinterpret_cast<const double*>(ctx.input.data());
    if (stage_ == 0) {
      auto* filled = reinterpret_cast<double*>(ctx.stash(n * sizeof(double)).data());
      fill_input<<<blocks(n), 256, 0, ctx.resource>>>(filled, n, ctx.samples.indices()[0]);
      x = filled;
    }
    const bool last = stage_ + 1 == stages_;
    double* out = last ? y : reinterpret_cast<double*>(ctx.output.data());
    affine<<<blocks(n), 256, 0, ctx.resource>>>(x, out, n, w_, b_);
    if (last) {
      auto* loss = reinterpret_cast<double*>(ctx.scratch(sizeof(double)).data());
      DFLOP_CUDA_TRY(cudaMemsetAsync(loss, 0, sizeof(double), ctx.resource));
      add_loss<<<blocks(n), 256, 0, ctx.resource>>>(y, n, loss);
      DFLOP_CUDA_TRY(cudaMemcpyAsync(&ctx.loss, loss, sizeof(double), cudaMemcpyDeviceToHost, ctx.resource));
      DFLOP_CUDA_TRY(cudaStreamSynchronize(ctx.resource));
    } else {
      DFLOP_CUDA_TRY(cudaMemcpyAsync(y, out, n * sizeof(double), cudaMemcpyDeviceToDevice, ctx.resource));
    }
    DFLOP_CUDA_TRY(cudaPeekAtLastError());
  }
  void backward(basic_stage_context<cudaStream_t>& ctx) {
    auto y = ctx.stashed(0);
    const auto n = static_cast<std::uint32_t>(y.size() / sizeof(double));
    const double* x = stage_ == 0 ? reinterpret_cast<const double*>(ctx.stashed(1).data())
                                  : reinterpret_cast<const double*>(ctx.input.data());
    const double* dy = stage_ + 1 == stages_ ? reinterpret_cast<const double*>(y.data())
                                             : reinterpret_cast<const double*>(ctx.output_grad.data());
    double* dx = stage_ == 0 ? nullptr : reinterpret_cast<double*>(ctx.input_grad.data());
    affine_backward<<<blocks(n), 256, 0, ctx.resource>>>(x, dy, dx, n, w_, gradients_.get());
    DFLOP_CUDA_TRY(cudaPeekAtLastError());
  }
  std::span<double> gradients() { return {gradients_.get(), 2}; }

private:
  static std::size_t bytes(const microbatch_view& mb) { return mb.size() * tokens_per_sample * sizeof(double); }
  std::uint32_t stage_;
  std::uint32_t stages_;
  double w_;
  double b_;
  bool fails_;
  std::unique_ptr<double, cuda_free> gradients_;
};
static_assert(pipeline_stage<affine_stage, basic_stage_context<cudaStream_t>>);

// What the ranks of one run report, gathered under a lock.
struct gathered {
  explicit gathered(std::uint32_t replicas, std::uint32_t stages)
      : gradients(replicas, std::vector<double>(2 * stages)) {}
  std::mutex lock;
  std::vector<double> losses;                   // step_result.loss of each rank
  std::vector<std::vector<double>> gradients;  // [replica][2 * model stage + {0: dw, 1: db}]

  [[nodiscard]] affine_result result() const {
    affine_result out;
    out.rank_losses = losses;
    out.loss = losses.empty() ? 0.0 : losses.front();
    out.gradients = gradients.front();
    out.replica_gradients = gradients;
    return out;
  }
};

// Runs one step on `world`'s rank, holding chunks c of model stages c * ranks +
// pipeline rank, and records its loss and gradients in `out`. Model stage
// `failing` (if any) throws in its forward of microbatch 1.
template <class Communicator>
void run_rank(Communicator& world, std::uint32_t ranks, const pipeline_schedule& schedule, const step_batch& batch,
              gathered& out, std::uint32_t failing = ~0U) {
  const std::uint32_t stages = ranks * schedule.chunks;
  const auto rank = static_cast<std::uint32_t>(world.rank()) % ranks;
  std::vector<affine_stage> mine;
  for (std::uint32_t c = 0; c < schedule.chunks; ++c) mine.emplace_back(c * ranks + rank, stages, c * ranks + rank == failing);
  executor<Communicator, affine_stage> run(world, ranks, std::move(mine));
  const double loss = run.step(schedule, batch).loss;
  DFLOP_CUDA_TRY(cudaStreamSynchronize(world.resource()));
  std::lock_guard guard(out.lock);
  out.losses.push_back(loss);
  auto& replica = out.gradients[run.replica()];
  for (std::uint32_t c = 0; c < schedule.chunks; ++c)
    DFLOP_CUDA_TRY(cudaMemcpy(&replica[2 * (c * ranks + rank)], run.stages()[c].gradients().data(), 2 * sizeof(double),
                              cudaMemcpyDeviceToHost));
}

// Two 64-token samples per microbatch, microbatches in replica-major order.
struct affine_batch {
  explicit affine_batch(std::uint32_t lists)
      : samples(2 * lists, sample{"s", modality::text, 0, 0, 100}), microbatches(contiguous_microbatches(samples.size(), lists)) {}
  std::vector<sample> samples;
  std::vector<std::vector<std::uint32_t>> microbatches;
  [[nodiscard]] step_batch view() const { return {samples, microbatches}; }
};

}  // namespace

affine_result run_affine_on_gpu(const std::string& name, std::uint32_t chunks, std::uint32_t microbatches) {
  const auto schedule = make_schedule(name, {1, microbatches}, chunks);
  const affine_batch batch(microbatches);
  int device = 0;
  DFLOP_CUDA_TRY(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  DFLOP_NCCL_TRY(ncclCommInitAll(&comm, 1, &device));
  cudaStream_t stream = nullptr;
  DFLOP_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  gathered out(1, chunks);
  {
    nccl_communicator world(comm, stream, 30);
    run_rank(world, 1, schedule, batch.view(), out);
  }
  (void)cudaStreamDestroy(stream);
  return out.result();
}

affine_result run_affine_on_streams(const std::string& name, std::uint32_t ranks, std::uint32_t chunks,
                                    std::uint32_t microbatches, std::uint32_t replicas) {
  const auto schedule = make_schedule(name, {ranks, microbatches}, chunks);
  const affine_batch batch(replicas * microbatches);
  gathered out(replicas, ranks * chunks);
  run_on_streams(
      static_cast<int>(ranks * replicas), [&](stream_communicator& world) { run_rank(world, ranks, schedule, batch.view(), out); },
      0, 30);
  return out.result();
}

void run_failing_stage_on_streams(std::uint32_t ranks, std::uint32_t failing) {
  const auto schedule = make_schedule("1f1b", {ranks, 4}, 1);
  const affine_batch batch(4);
  gathered out(1, ranks);
  run_on_streams(
      static_cast<int>(ranks),
      [&](stream_communicator& world) { run_rank(world, ranks, schedule, batch.view(), out, failing); }, 0, 10);
}

}  // namespace dflop::test
