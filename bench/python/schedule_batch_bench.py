# SPDX-License-Identifier: Apache-2.0
"""Plan.schedule_batch from Python vs the same C++ call, for one 512-sample global batch.

Prints one JSON object. Both sides run the call `dflop schedule` makes
(pipeline<...>::schedule_batch with the plan's schedule and per-batch
options) in the same process, alternating call by call so load changes (shared
machines) hit both alike:
  cpp:    dflop._dflop._time_schedule_batch, a loop in C++ timing each call with
          std::chrono::steady_clock (no Python inside the loop);
  python: plan.schedule_batch(batch, seed) timed with time.perf_counter, the
          batch a dflop.Samples (passed by reference), the result a
          BatchSchedule (moved, lists built only when read).
Also reported, not compared: the same call with the batch as a list of dicts
(converted every call) and reading llm_microbatches (building the lists).

Usage: PYTHONPATH=<build>/python python3 bench/python/schedule_batch_bench.py [--rounds 15] [--calls 20]
"""

import argparse
import json
import statistics
import time

import dflop
from dflop import _dflop


def timed(function, calls):
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - start)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--calls", type=int, default=20, help="calls per side per round (default 20)")
    parser.add_argument("--seed", type=int, default=3, help="packing seed")
    arguments = parser.parse_args()

    workload = dflop.generate_mixture("onevision", 10000, 0)
    plan = dflop.plan(workload, "siglip-400m+qwen2.5-7b", dflop.Cluster(64, 8, "h100-80gb"), global_batch=512)
    batch = workload.take(range(0, 10000, 10000 // 512)[:512])
    records = batch.to_records()
    seed = arguments.seed

    cpp, python, from_records, reading = [], [], [], []
    for _ in range(arguments.rounds):
        for _ in range(arguments.calls):  # one C++ call, then one Python call: a pair sees the same load
            cpp += _dflop._time_schedule_batch(plan, batch, seed, 1)
            python += timed(lambda: plan.schedule_batch(batch, seed), 1)
        from_records += timed(lambda: plan.schedule_batch(records, seed), arguments.calls)
        scheduled = plan.schedule_batch(batch, seed)
        reading += timed(lambda: scheduled.llm_microbatches, arguments.calls)

    cpp_median, python_median = statistics.median(cpp), statistics.median(python)
    print(json.dumps({
        "benchmark": "Plan.schedule_batch vs the C++ call",
        "batch_samples": len(batch),
        "config": "encoder tp{tp} pp{pp} dp{dp}".format(**plan.config["encoder"]) + ", llm tp{tp} pp{pp} dp{dp}".format(
            **plan.config["llm"]) + f", {plan.microbatches} microbatches",
        "calls_per_side": len(cpp),
        "cpp_median_seconds": cpp_median,
        "python_median_seconds": python_median,
        "python_over_cpp": python_median / cpp_median - 1,
        "median_of_paired_ratios": statistics.median(p / c for p, c in zip(python, cpp)),
        "within_10_percent": python_median <= 1.10 * cpp_median,
        "python_from_list_of_dicts_median_seconds": statistics.median(from_records),
        "reading_llm_microbatches_median_seconds": statistics.median(reading),
    }, indent=2))


if __name__ == "__main__":
    main()
