#!/usr/bin/env python3
"""Checks that two builds of the `dflop` tool choose the same plans.

A refactor that should not change what the planner decides is checked by
planning every built-in mixture with both tools and comparing the JSON of
`dflop plan --json` byte for byte, with the wall-time fields of `search`
(which no two runs share) set aside.

    tools/check/same_plans.py OLD_DFLOP NEW_DFLOP [--samples N] [--gpus N ...]

Exit status 0 when every plan is the same, 1 when one differs (the first
differing lines are printed), 2 for bad arguments.
"""
import argparse
import difflib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MIXTURES = ["onevision", "video-heavy", "text-heavy", "image-only", "omni"]
# Wall times: the only fields two runs of the same plan do not share.
TIMING_FIELDS = ["seconds", "enumeration_seconds", "scoring_seconds", "finalist_seconds", "baseline_seconds"]


def plan_json(dflop, workload, gpus):
    """`dflop plan --json` of `workload` on `gpus` GPUs, timing fields removed, as sorted text."""
    out = subprocess.run([dflop, "plan", "--json", "--workload", str(workload), "--gpus", str(gpus)],
                         check=True, capture_output=True, text=True).stdout
    plan = json.loads(out)
    for field in TIMING_FIELDS:
        plan["search"].pop(field, None)
    return json.dumps(plan, indent=1, sort_keys=False).splitlines()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the dflop tool before the change")
    parser.add_argument("new", help="the dflop tool after it")
    parser.add_argument("--samples", type=int, default=10000, help="samples per generated mixture")
    parser.add_argument("--gpus", type=int, nargs="+", default=[64], help="cluster sizes to plan for")
    args = parser.parse_args()
    for tool in (args.old, args.new):
        if not Path(tool).is_file():
            parser.error(f"no dflop tool at '{tool}'")
    differing = 0
    with tempfile.TemporaryDirectory() as scratch:
        for mixture in MIXTURES:
            workload = Path(scratch) / f"{mixture}.jsonl"
            subprocess.run([args.old, "generate", "--mixture", mixture, "--samples", str(args.samples),
                            "--output", str(workload)], check=True)
            for gpus in args.gpus:
                old, new = plan_json(args.old, workload, gpus), plan_json(args.new, workload, gpus)
                same = old == new
                print(f"{mixture:12} {gpus:5} GPUs: {'same' if same else 'DIFFERENT'}", flush=True)
                if not same:
                    differing += 1
                    sys.stdout.writelines(line + "\n" for line in
                                          list(difflib.unified_diff(old, new, "old", "new", lineterm=""))[:40])
    print(f"{differing} of {len(MIXTURES) * len(args.gpus)} plans differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
