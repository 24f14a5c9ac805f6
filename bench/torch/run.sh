#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The torch trainer's benchmark (docs/benchmarks.md, "A real model: libtorch stages"):
#
#   bench/torch/run.sh [BUILD_DIR] [OUT_DIR]        # env: STEPS (12), REPEATS (3), GLOBAL_BATCH (16), LOSS_STEPS (50)
#
# 1. Profiles the model's parts with dflop::profiler (thread CPU time, caches flushed
#    before each timed run: 64 MiB written) -> OUT/torch.csv.
# 2. Under `mpirun -np 2` (encoder | LLM, one rank per process, one torch thread
#    each) runs the plan's dflop method and its data_blind baseline side by side:
#    REPEATS jobs of STEPS steps, each step run by both methods in turn (own
#    weights each; the first method rotating), so the machine's load hits both alike.
# 3. One LOSS_STEPS-step dflop run: the loss falls.
# Each run's JSON lines go to OUT/*.json; summarize.py prints the table (and JSON).
set -euo pipefail
build=${1:-build}
out=${2:-torch-bench}
steps=${STEPS:-12}
repeats=${REPEATS:-3}
batch=${GLOBAL_BATCH:-16}
loss_steps=${LOSS_STEPS:-50}
trainer="$build/bin/dflop-torch-trainer"
[ -x "$trainer" ] || { echo "run.sh: $trainer not found (cmake --build $build --target dflop_torch_trainer)" >&2; exit 2; }
mpirun=(mpirun -np 2 --oversubscribe)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
mkdir -p "$out"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/load.txt" >&2
echo "profiling -> $out/torch.csv" >&2
"$trainer" --profile "$out/torch.csv" --profile-clock cpu --profile-flush-mib 64 --profile-repeats 7 2>"$out/profile.log"
for r in $(seq 1 "$repeats"); do
  echo "run $r/$repeats: dflop and data_blind, $steps steps each" >&2
  "${mpirun[@]}" "$trainer" --cost-profile "$out/torch.csv" --global-batch "$batch" --steps "$steps" \
    --method dflop --method data_blind --json > "$out/compare-$r.json"
done
echo "loss run: $loss_steps steps" >&2
"${mpirun[@]}" "$trainer" --cost-profile "$out/torch.csv" --global-batch "$batch" --steps "$loss_steps" --json \
  > "$out/loss.json"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt" >&2
python3 "$(dirname "$0")/summarize.py" "$out"
