#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The torch trainer's benchmark (docs/benchmarks.md, "A real model: libtorch stages"):
#
#   bench/torch/run.sh [BUILD_DIR] [OUT_DIR]        # env: STEPS (12), REPEATS (3), GLOBAL_BATCH (16), LOSS_STEPS (50)
#
# REPEATS jobs, each:
# 1. Profiles the model's parts with dflop::profiler (thread CPU time, caches flushed
#    before each timed run: 64 MiB written) -> OUT/torch-N.csv, the encoder's and the
#    LLM's parts in two processes at once (both cores busy with this model, as in
#    the run): 8 sizes per module over the range the plan's microbatches take
#    (encoder 64-2432 tokens, LLM 16-896), 5 passes over the whole grid one after
#    the other (3 timed runs per size and pass), each point the median over the
#    passes: the machine's speed drifts with other jobs by 10-40% within minutes,
#    and one burst of repeats per size put that drift into the curves' shape.
# 2. Under `mpirun -np 2` (encoder | LLM, one rank per process, one torch thread
#    each) runs the plan's dflop method and its data_blind baseline side by side:
#    STEPS steps, each step run by both methods in turn (own weights each; the
#    first method rotating), so the machine's load hits both alike; every op's
#    measured and predicted time in OUT/ops-N.log.
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
# The profile: the encoder's parts and the LLM's in two processes at once (both
# cores busy with this model's work, as in the 2-rank run), then one CSV.
profile() {
  local csv=$1 module pids=()
  for module in encoder llm; do
    "$trainer" --profile "$csv.$module" --profile-module "$module" --profile-clock cpu --profile-flush-mib 64 \
      --profile-encoder-tokens 64 128 256 448 704 1024 1536 2432 --profile-llm-tokens 16 48 96 160 256 384 576 896 \
      --profile-passes 5 --profile-repeats 3 --profile-warmup 1 2>"$csv.$module.log" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  { cat "$csv.encoder"; tail -n +2 "$csv.llm"; } > "$csv"
  rm -f "$csv.encoder" "$csv.llm"
}
for r in $(seq 1 "$repeats"); do
  echo "run $r/$repeats: profiling -> $out/torch-$r.csv, then dflop and data_blind, $steps steps each" >&2
  profile "$out/torch-$r.csv"
  cp "$out/torch-$r.csv" "$out/torch.csv"
  "${mpirun[@]}" "$trainer" --cost-profile "$out/torch-$r.csv" --global-batch "$batch" --steps "$steps" \
    --method dflop --method data_blind --json --op-log > "$out/compare-$r.json" 2> "$out/ops-$r.log"
done
echo "loss run: $loss_steps steps" >&2
"${mpirun[@]}" "$trainer" --cost-profile "$out/torch.csv" --global-batch "$batch" --steps "$loss_steps" --json \
  > "$out/loss.json"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt" >&2
python3 "$(dirname "$0")/summarize.py" "$out"
