# SPDX-License-Identifier: Apache-2.0
"""dflop's default packer against the reference system's own balancing: a CP-SAT model.

Not a test: a comparison to run by hand. For each batch, both split the same
N samples into K non-empty microbatches minimizing the makespan (the largest
microbatch cost over both modules) and the script prints makespan and time.

CP-SAT model (the reference system's formulation): one boolean per (sample,
microbatch); each sample in exactly one microbatch; every microbatch
non-empty; one makespan variable bounding every microbatch's cost in both
dimensions (encoder and LLM); minimize it; 10 s time limit. CP-SAT needs
integer coefficients: costs are scaled by --scale and rounded for the model,
and both makespans are then recomputed from the float costs. dflop: the
default packer (`dflop.pack(costs, K)`, refined, seed 0).

Costs per sample: as bench/pack_bench.cpp prices them (dflop's FLOPs cost
model, mirrored here: siglip-400m+qwen2.5-7b on an H100, forward FLOPs per
part over the throughput curve (w + 3e10) / (peak * 0.55), backward 2x
forward, TP 1; columns = encoder time (patch embedding, layers, projector)
and LLM time (layers, LM head) of the whole module), with the encoder column
scaled to the LLM column's total so both dimensions bind. Batches: the
built-in onevision mixture, seeds 1000, 1001, ... (the benchmark's).

Times: dflop's is the median of 5 calls from Python; CP-SAT's is Solve() only
(building the model in Python, seconds more, is not counted) with CP-SAT's
default workers unless --workers says otherwise, so it depends on the cores.

Usage (needs the Python extension and OR-Tools, e.g. in a virtual environment
with `pip install ortools numpy`):
  PYTHONPATH=<build>/python python3 bench/pack/cpsat_compare.py [--batches 3] [--bins 64 336]
      [--samples 512] [--time-limit 10] [--workers 0] [--json]
"""

import argparse
import json
import sys
import time

import numpy as np

try:
    from ortools.sat.python import cp_model
except ImportError:  # pragma: no cover - a hand-run script
    sys.exit("cpsat_compare.py needs OR-Tools: pip install ortools")

import dflop

MODEL = "siglip-400m+qwen2.5-7b"
GPU = "h100-80gb"
MAX_EFFICIENCY = 0.55  # dflop::throughput_curve defaults
HALF_SATURATION_FLOPS = 3e10
BACKWARD_RATIO = 2.0  # no activation recomputation


def sample_costs(batch, model, peak_flops):
    """N x 2 float64 array: encoder and LLM seconds per sample (dflop's FLOPs cost model, TP 1)."""

    def seconds(flops):
        return (flops + HALF_SATURATION_FLOPS) / (peak_flops * MAX_EFFICIENCY) if flops > 0 else 0.0

    enc, llm = model["encoder"], model["llm"]
    h_enc, h_llm = float(enc["hidden"]), float(llm["hidden"])
    enc_kv = enc["kv_heads"] / enc["heads"]
    llm_kv = llm["kv_heads"] / llm["heads"]
    projector = h_enc * h_llm + h_llm * h_llm
    costs = np.zeros((len(batch), 2))
    for i, s in enumerate(batch):
        if s.encoder_items > 0:
            tokens = float(s.encoder_tokens)
            squared = tokens * tokens / s.encoder_items  # tokens split evenly over the items
            layer = 2 * tokens * h_enc * h_enc * (2 + 2 * enc_kv) + 4 * h_enc * squared + 4 * tokens * h_enc * enc["ffn"]
            embedding = 2 * tokens * 3 * enc["patch_size"] ** 2 * h_enc
            head = 2 * tokens * projector
            forward = enc["layers"] * seconds(layer) + seconds(embedding) + seconds(head)
            costs[i, 0] = forward * (1 + BACKWARD_RATIO)
        n = float(s.llm_tokens)
        if n > 0:
            layer = 2 * n * h_llm * h_llm * (2 + 2 * llm_kv) + 2 * h_llm * n * n + 6 * n * h_llm * llm["ffn"]
            head = 2 * n * h_llm * llm["vocab"]
            costs[i, 1] = (llm["layers"] * seconds(layer) + seconds(head)) * (1 + BACKWARD_RATIO)
    costs[:, 0] *= costs[:, 1].sum() / costs[:, 0].sum()
    return np.ascontiguousarray(costs)


def makespan(costs, bin_of, bins):
    loads = np.zeros((bins, costs.shape[1]))
    np.add.at(loads, bin_of, costs)
    return float(loads.max())


def solve_cpsat(costs, bins, time_limit, workers, scale):
    """The reference's CP-SAT model; returns (assignment or None, status name, seconds, best bound)."""
    n, dims = costs.shape
    integer = np.rint(costs * scale).astype(np.int64)
    model = cp_model.CpModel()
    x = [[model.NewBoolVar(f"x{i}_{k}") for k in range(bins)] for i in range(n)]
    for i in range(n):
        model.AddExactlyOne(x[i])
    for k in range(bins):
        model.Add(sum(x[i][k] for i in range(n)) >= 1)
    top = int(integer.sum(axis=0).max())
    span = model.NewIntVar(0, top, "makespan")
    for k in range(bins):
        for d in range(dims):
            model.Add(sum(int(integer[i, d]) * x[i][k] for i in range(n) if integer[i, d] > 0) <= span)
    model.Minimize(span)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    if workers > 0:
        solver.parameters.num_workers = workers
    start = time.perf_counter()
    status = solver.Solve(model)
    seconds = time.perf_counter() - start
    name = solver.StatusName(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, name, seconds, None
    assignment = np.array([next(k for k in range(bins) if solver.Value(x[i][k])) for i in range(n)])
    return assignment, name, seconds, solver.BestObjectiveBound() / scale


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3, help="batches per shape (seeds 1000, 1001, ...)")
    parser.add_argument("--samples", type=int, default=512, help="samples per batch (N)")
    parser.add_argument("--bins", type=int, nargs="+", default=[64, 336], help="microbatches (K), one shape each")
    parser.add_argument("--mixture", default="onevision", help="built-in mixture to draw from")
    parser.add_argument("--time-limit", type=float, default=10.0, help="CP-SAT limit in seconds (the reference's: 10)")
    parser.add_argument("--workers", type=int, default=0, help="CP-SAT workers (0: its default)")
    parser.add_argument("--scale", type=float, default=1e6, help="cost units per second in the integer model")
    parser.add_argument("--json", action="store_true", help="print one JSON object per batch instead of a table")
    args = parser.parse_args()

    model = json.loads(dflop.load_model(MODEL).to_json())
    peak_flops = json.loads(dflop.load_gpu(GPU).to_json())["peak_tflops"] * 1e12
    rows = []
    for bins in args.bins:
        for b in range(args.batches):
            seed = 1000 + b
            costs = sample_costs(dflop.generate_mixture(args.mixture, args.samples, seed), model, peak_flops)
            calls = []  # the median of 5 calls, so a stray stall does not count
            for _ in range(5):
                start = time.perf_counter()
                packed = dflop.pack(costs, bins)
                calls.append(time.perf_counter() - start)
            dflop_seconds = sorted(calls)[2]
            assignment, status, cpsat_seconds, bound = solve_cpsat(costs, bins, args.time_limit, args.workers, args.scale)
            row = {
                "samples": args.samples,
                "bins": bins,
                "seed": seed,
                "lower_bound": packed.lower_bound,
                "dflop_makespan": makespan(costs, np.array(packed.bin_of), bins),
                "dflop_seconds": dflop_seconds,
                "cpsat_status": status,
                "cpsat_makespan": makespan(costs, assignment, bins) if assignment is not None else None,
                "cpsat_seconds": cpsat_seconds,
                "cpsat_bound": bound,
            }
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"# N={args.samples} K={bins} seed={seed}: dflop {row['dflop_makespan']:.6f} s in "
                      f"{1e3 * dflop_seconds:.2f} ms; CP-SAT {status} "
                      f"{row['cpsat_makespan'] if row['cpsat_makespan'] is not None else float('nan'):.6f} s in "
                      f"{cpsat_seconds:.1f} s", file=sys.stderr, flush=True)
    if args.json:
        return
    print("| N | K | batch | lower bound | dflop refined: makespan, time | CP-SAT: makespan, time, status | "
          "CP-SAT / dflop - 1 |")
    print("|---:|---:|---:|---:|---|---|---:|")
    for r in rows:
        if r["cpsat_makespan"] is None:
            cpsat, ratio = f"none, {r['cpsat_seconds']:.1f} s, {r['cpsat_status']}", "-"
        else:
            cpsat = f"{r['cpsat_makespan']:.4f} s, {r['cpsat_seconds']:.1f} s, {r['cpsat_status']}"
            ratio = f"{100 * (r['cpsat_makespan'] / r['dflop_makespan'] - 1):+.2f}%"
        print(f"| {r['samples']} | {r['bins']} | {r['seed']} | {r['lower_bound']:.4f} s | "
              f"{r['dflop_makespan']:.4f} s, {1e3 * r['dflop_seconds']:.2f} ms | {cpsat} | {ratio} |")


if __name__ == "__main__":
    main()
