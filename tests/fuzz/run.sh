#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every fuzz target for SECONDS each from its seed corpus (tests/fuzz/corpus/<target>),
# new inputs going to a scratch corpus beside the build. Fails on the first finding
# (libFuzzer writes the input as crash-*/timeout-*/oom-* in the build folder).
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]
set -euo pipefail
build=${1:?usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]}
seconds=${2:-30}
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$build" && pwd)
for target in trace profile_csv costs_csv model_json gpu_json plan_file; do
  scratch="$build/corpus/$target"
  mkdir -p "$scratch"
  echo "fuzz_$target: ${seconds} s"
  # -timeout: an input taking over 10 s is a hang; -rss_limit_mb: a reader must not
  # allocate gigabytes for a small file; -error_exitcode: any finding fails the run.
  log="$build/fuzz_$target.log"
  if (cd "$build" && "./fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -error_exitcode=1 "$scratch" "$here/corpus/$target" >"$log" 2>&1); then
    grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$log" || true
  else
    tail -n 60 "$log"
    echo "fuzz_$target found a failing input (written to $build as crash-*, timeout-* or oom-*)"
    exit 1
  fi
done
echo "fuzzing: every target ran ${seconds} s clean"
