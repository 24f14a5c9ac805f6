// SPDX-License-Identifier: Apache-2.0
// dflop-cuda-trainer: the skeleton of a CUDA + NCCL trainer over user CUDA stage
// functors. Under `mpirun -np N` (built with MPI) each process drives one GPU and
// one pipeline stage, NCCL bootstrapped from MPI; without MPI it runs all stages
// as chunks of one rank on GPU 0. Replace `scale_stage` with real model stages.
#include <dflop/cuda/error.cuh>
#include <dflop/cuda/nccl_communicator.cuh>
#include <dflop/exec/executor.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>

#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
#include <dflop/cuda/mpi_bootstrap.cuh>
#endif

#include <cstdio>
#include <exception>
#include <span>
#include <vector>

namespace {

constexpr int hidden = 64;

__global__ void scale(const float* x, float* y, std::size_t n, float w) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x != nullptr ? w * x[i] : w;
}
__global__ void scale_backward(const float* x, const float* dy, float* dx, std::size_t n, float w, float* dw) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = dy != nullptr ? dy[i] : 1.0f;
  if (dx != nullptr) dx[i] = w * g;
  atomicAdd(dw, g * (x != nullptr ? x[i] : 1.0f));
}

// A user stage: y = w x over [tokens x hidden] floats; launches on ctx.resource.
class scale_stage {
public:
  scale_stage(std::uint32_t stage, std::uint32_t stages) : stage_(stage), stages_(stages) {
    DFLOP_CUDA_TRY(cudaMalloc(&gradient_, sizeof(float)));
    DFLOP_CUDA_TRY(cudaMemset(gradient_, 0, sizeof(float)));
  }
  std::size_t input_bytes(const dflop::microbatch_view& mb) const { return stage_ == 0 ? 0 : bytes(mb); }
  std::size_t output_bytes(const dflop::microbatch_view& mb) const { return stage_ + 1 == stages_ ? 0 : bytes(mb); }
  void forward(dflop::basic_stage_context<cudaStream_t>& ctx) {
    const std::size_t n = bytes(ctx.samples) / sizeof(float);
    if (ctx.last_stage()) return;  // a real model computes its loss here (kept on the device)
    scale<<<(n + 255) / 256, 256, 0, ctx.resource>>>(input(ctx), reinterpret_cast<float*>(ctx.output.data()), n, w_);
    DFLOP_CUDA_TRY(cudaGetLastError());
  }
  void backward(dflop::basic_stage_context<cudaStream_t>& ctx) {
    const std::size_t n = bytes(ctx.samples) / sizeof(float);
    const auto* dy = ctx.output_grad.empty() ? nullptr : reinterpret_cast<const float*>(ctx.output_grad.data());
    auto* dx = ctx.input_grad.empty() ? nullptr : reinterpret_cast<float*>(ctx.input_grad.data());
    scale_backward<<<(n + 255) / 256, 256, 0, ctx.resource>>>(input(ctx), dy, dx, n, w_, gradient_);
    DFLOP_CUDA_TRY(cudaGetLastError());
  }
  std::span<float> gradients() { return {gradient_, 1}; }

private:
  static const float* input(const dflop::basic_stage_context<cudaStream_t>& ctx) {
    return ctx.input.empty() ? nullptr : reinterpret_cast<const float*>(ctx.input.data());
  }
  static std::size_t bytes(const dflop::microbatch_view& mb) {
    return static_cast<std::size_t>(mb.llm_tokens()) * hidden * sizeof(float);
  }
  std::uint32_t stage_;
  std::uint32_t stages_;
  float w_ = 0.99f;
  float* gradient_ = nullptr;
};

template <class Communicator>
void train(Communicator& comm, std::uint32_t ranks, std::uint32_t chunks, int steps) {
  const std::uint32_t m = 2 * ranks;
  const auto schedule = dflop::make_schedule(chunks > 1 ? "interleaved" : "1f1b", {ranks, m}, chunks);
  const auto samples = dflop::generate_mixture("onevision", 4 * m, 1);
  const auto lists = dflop::contiguous_microbatches(samples.size(), m);
  std::vector<scale_stage> stages;
  const auto rank = static_cast<std::uint32_t>(comm.rank()) % ranks;
  for (std::uint32_t c = 0; c < chunks; ++c) stages.emplace_back(c * ranks + rank, ranks * chunks);
  dflop::executor<Communicator, scale_stage> run(comm, ranks, std::move(stages));
  for (int step = 0; step < steps; ++step) {
    const auto result = run.step(schedule, {samples, lists});
    if (comm.rank() == 0) std::printf("step %d: %.3f ms\n", step, result.seconds * 1e3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
    MPI_Init(&argc, &argv);
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    {
      auto comm = dflop::nccl_from_mpi(MPI_COMM_WORLD);
      train(comm, static_cast<std::uint32_t>(size), 1, 5);
    }
    MPI_Finalize();
#else
    (void)argc;
    (void)argv;
    int device = 0;
    ncclComm_t nccl = nullptr;
    DFLOP_NCCL_TRY(ncclCommInitAll(&nccl, 1, &device));
    cudaStream_t stream = nullptr;
    DFLOP_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    dflop::nccl_communicator comm(nccl, stream);
    train(comm, 1, 4, 5);
#endif
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflop-cuda-trainer: %s\n", e.what());
    return 1;
  }
}
