#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# On a machine with a GPU: configure, build, run the gpu-labelled tests and the
# executor benchmark in one go. Usage: bench/gpu/run.sh [build-dir]  (default build-gpu)
# Results: build-dir/gpu-tests.log and build-dir/exec_bench.json; paste into docs/benchmarks/executor.md.
# DFLOP_GPU_PREBUILT=1 skips configure and build: the build dir was made on another
# machine with the same targets (a GPU machine without network or Debian's packages).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build-gpu}"
export PATH="/usr/local/cuda/bin:$PATH"
jobs="$(nproc 2>/dev/null || echo 4)"

nvidia-smi -L || { echo "run.sh: no GPU visible (nvidia-smi failed)" >&2; exit 2; }
if [ "${DFLOP_GPU_PREBUILT:-0}" != 1 ]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DDFLOP_ENABLE_CUDA=ON \
    -DDFLOP_WARNINGS_AS_ERRORS=OFF
  cmake --build "$build" -j "$jobs" --target exec_gpu_test cuda_toolchain_test runtime_event_timer_test exec_bench \
    dflop_cuda_trainer cuda_trainer_test
fi

status=0
(cd "$build" && ctest -L gpu --output-on-failure --timeout 120 2>&1 | tee gpu-tests.log) || status=1
"$build/bench/exec_bench" --benchmark_out="$build/exec_bench.json" --benchmark_out_format=json || status=1
# The built-in plan on this GPU's streams, each method, checked against the host computation.
for method in dflop data_blind dflop_reference; do
  "$build/bin/dflop-cuda-trainer" --method "$method" --steps 3 --check || status=1
done
echo "run.sh: gpu tests log in $build/gpu-tests.log, benchmark in $build/exec_bench.json (status $status)"
exit "$status"
