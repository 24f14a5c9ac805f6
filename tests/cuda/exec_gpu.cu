// SPDX-License-Identifier: Apache-2.0
// An affine CUDA stage (y = w x + b per element, loss 0.5 |y|^2 on the last stage)
// run by dflop's executor over a 1-rank NCCL communicator on one GPU.
#include "exec_gpu.hpp"

#include <dflop/cuda/error.cuh>
#include <dflop/cuda/nccl_communicator.cuh>
#include <dflop/exec/executor.hpp>
#include <dflop/schedule/by_name.hpp>

#include <cmath>
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

// A user CUDA stage: launches its kernels on ctx.resource (the compute stream).
class affine_stage {
public:
  affine_stage(std::uint32_t stage, std::uint32_t stages, double* loss)
      : stage_(stage), stages_(stages), w_(0.9 + 0.05 * stage), b_(0.01 * stage), loss_(loss) {
    DFLOP_CUDA_TRY(cudaMalloc(&gradients_, 2 * sizeof(double)));
    DFLOP_CUDA_TRY(cudaMemset(gradients_, 0, 2 * sizeof(double)));
  }
  std::size_t input_bytes(const microbatch_view& mb) const { return stage_ == 0 ? 0 : bytes(mb); }
  std::size_t output_bytes(const microbatch_view& mb) const { return stage_ + 1 == stages_ ? 0 : bytes(mb); }

  void forward(basic_stage_context<cudaStream_t>& ctx) {
    const auto n = static_cast<std::uint32_t>(bytes(ctx.samples) / sizeof(double));
    auto* y = reinterpret_cast<double*>(ctx.stash(n * sizeof(double)).data());
    const double* x = reinterpret_cast<const double*>(ctx.input.data());
    if (stage_ == 0) {
      auto* filled = reinterpret_cast<double*>(ctx.stash(n * sizeof(double)).data());
      fill_input<<<blocks(n), 256, 0, ctx.resource>>>(filled, n, ctx.samples.indices()[0]);
      x = filled;
    }
    double* out = stage_ + 1 == stages_ ? y : reinterpret_cast<double*>(ctx.output.data());
    affine<<<blocks(n), 256, 0, ctx.resource>>>(x, out, n, w_, b_);
    if (stage_ + 1 == stages_) add_loss<<<blocks(n), 256, 0, ctx.resource>>>(y, n, loss_);
    else DFLOP_CUDA_TRY(cudaMemcpyAsync(y, out, n * sizeof(double), cudaMemcpyDeviceToDevice, ctx.resource));
    DFLOP_CUDA_TRY(cudaGetLastError());
  }
  void backward(basic_stage_context<cudaStream_t>& ctx) {
    auto y = ctx.stashed(0);
    const auto n = static_cast<std::uint32_t>(y.size() / sizeof(double));
    const double* x = stage_ == 0 ? reinterpret_cast<const double*>(ctx.stashed(1).data())
                                  : reinterpret_cast<const double*>(ctx.input.data());
    const double* dy = stage_ + 1 == stages_ ? reinterpret_cast<const double*>(y.data())
                                             : reinterpret_cast<const double*>(ctx.output_grad.data());
    double* dx = stage_ == 0 ? nullptr : reinterpret_cast<double*>(ctx.input_grad.data());
    affine_backward<<<blocks(n), 256, 0, ctx.resource>>>(x, dy, dx, n, w_, gradients_);
    DFLOP_CUDA_TRY(cudaGetLastError());
  }
  std::span<double> gradients() { return {gradients_, 2}; }

private:
  static std::size_t bytes(const microbatch_view& mb) { return mb.size() * tokens_per_sample * sizeof(double); }
  std::uint32_t stage_;
  std::uint32_t stages_;
  double w_;
  double b_;
  double* loss_;
  double* gradients_ = nullptr;
};
static_assert(pipeline_stage<affine_stage, basic_stage_context<cudaStream_t>>);

}  // namespace

affine_result run_affine_on_gpu(const std::string& name, std::uint32_t chunks, std::uint32_t microbatches) {
  const auto schedule = make_schedule(name, {1, microbatches}, chunks);
  std::vector<sample> samples(2 * microbatches, sample{"s", modality::text, 0, 0, 100});
  const auto lists = contiguous_microbatches(samples.size(), microbatches);
  ncclComm_t comm = nullptr;
  int device = 0;
  DFLOP_CUDA_TRY(cudaSetDevice(device));
  DFLOP_NCCL_TRY(ncclCommInitAll(&comm, 1, &device));
  cudaStream_t stream = nullptr;
  DFLOP_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double* loss = nullptr;
  DFLOP_CUDA_TRY(cudaMalloc(&loss, sizeof(double)));
  DFLOP_CUDA_TRY(cudaMemset(loss, 0, sizeof(double)));
  affine_result result;
  {
    nccl_communicator world(comm, stream, 30);
    std::vector<affine_stage> stages;
    for (std::uint32_t c = 0; c < chunks; ++c) stages.emplace_back(c, chunks, loss);
    executor<nccl_communicator, affine_stage> run(world, 1, std::move(stages));
    (void)run.step(schedule, {samples, lists});
    DFLOP_CUDA_TRY(cudaStreamSynchronize(stream));
    DFLOP_CUDA_TRY(cudaMemcpy(&result.loss, loss, sizeof(double), cudaMemcpyDeviceToHost));
    for (auto& stage : run.stages()) {
      double g[2];
      DFLOP_CUDA_TRY(cudaMemcpy(g, stage.gradients().data(), sizeof(g), cudaMemcpyDeviceToHost));
      result.gradients.push_back(g[0]);
      result.gradients.push_back(g[1]);
    }
  }
  (void)cudaFree(loss);
  (void)cudaStreamDestroy(stream);
  return result;
}

}  // namespace dflop::test
