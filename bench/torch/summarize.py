# SPDX-License-Identifier: Apache-2.0
"""Summarizes bench/torch/run.sh's output folder. Per method: median over the jobs
of each job's median measured and predicted step, measured / predicted, and the
fitted model's op prediction error (median |error| over every op of a job, against
the op's CPU time and its wall time; median over the jobs), and the same for the
calibrated model (the fitted one times per-module, per-pass factors learned from
the earlier steps' ops; each op priced before its step ran), against CPU time. dflop's speedup over
data_blind: per job the median over steps of the per-step ratio (both methods ran
that batch one right after the other), median over the jobs; predicted likewise
from the medians. The loss run: first and last loss."""
import glob
import json
import os
import statistics
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def main(folder):
    jobs = [lines(path) for path in sorted(glob.glob(os.path.join(folder, "compare-*.json")))]
    table = {"jobs": len(jobs)}
    for method in ("dflop", "data_blind"):
        summaries = [next(l for l in job if l.get("summary") and l["method"] == method) for job in jobs]
        if not summaries:
            continue
        table[method] = {
            "config": summaries[0]["config"],
            "measured_seconds": statistics.median(s["median_measured_seconds"] for s in summaries),
            "measured_per_job": [s["median_measured_seconds"] for s in summaries],
            "predicted_seconds": statistics.median(s["median_predicted_seconds"] for s in summaries),
            "measured_over_predicted": statistics.median(s["measured_over_predicted"] for s in summaries),
            "op_error_cpu": statistics.median(s["op_prediction_cpu"]["all"]["median_abs_error"] for s in summaries),
            "op_error_wall": statistics.median(s["op_prediction"]["all"]["median_abs_error"] for s in summaries),
            "ops_per_job": summaries[0]["op_prediction"]["all"]["ops"],
            "op_error_cpu_per_job": [s["op_prediction_cpu"]["all"]["median_abs_error"] for s in summaries],
            "op_error_cpu_calibrated": statistics.median(
                s["op_prediction_cpu_calibrated"]["all"]["median_abs_error"] for s in summaries),
            "op_error_cpu_calibrated_per_job": [s["op_prediction_cpu_calibrated"]["all"]["median_abs_error"]
                                                for s in summaries],
            # per module and pass: median over the jobs of the signed and absolute medians
            "op_error_cpu_parts": {
                part: {"signed": statistics.median(s["op_prediction_cpu"][part]["median_error"] for s in summaries),
                       "abs": statistics.median(s["op_prediction_cpu"][part]["median_abs_error"] for s in summaries)}
                for part in ("encoder_forward", "encoder_backward", "llm_forward", "llm_backward")},
        }
    comparisons = [next(l for l in job if l.get("comparison")) for job in jobs]
    if comparisons:
        table["speedup"] = {
            "measured_per_step": statistics.median(c["speedup_measured_per_step"] for c in comparisons),
            "measured_per_job": [c["speedup_measured_per_step"] for c in comparisons],
            "measured_medians": statistics.median(c["speedup_measured"] for c in comparisons),
            "predicted": statistics.median(c["speedup_predicted"] for c in comparisons),
        }
    loss_path = os.path.join(folder, "loss.json")
    if os.path.exists(loss_path):
        s = next(l for l in lines(loss_path) if l.get("summary"))
        table["loss"] = {"steps": s["steps"], "first": s["first_loss"], "last": s["last_loss"],
                         "measured_over_predicted": s["measured_over_predicted"],
                         "op_error_cpu": s["op_prediction_cpu"]["all"]["median_abs_error"],
                         "op_error_wall": s["op_prediction"]["all"]["median_abs_error"]}
    print(json.dumps(table))
    print("| method | configuration | measured step | predicted | measured / predicted | op error (CPU) | "
          "op error (CPU, calibrated) | op error (wall) |", file=sys.stderr)
    print("|---|---|---:|---:|---:|---:|---:|---:|", file=sys.stderr)
    for method in ("dflop", "data_blind"):
        if method in table:
            t = table[method]
            print(f"| {method} | {t['config']} | {t['measured_seconds']:.3f} s | {t['predicted_seconds']:.3f} s | "
                  f"{t['measured_over_predicted']:.3f} | {100 * t['op_error_cpu']:.1f}% | "
                  f"{100 * t['op_error_cpu_calibrated']:.1f}% | {100 * t['op_error_wall']:.1f}% |",
                  file=sys.stderr)
    for method in ("dflop", "data_blind"):
        if method in table:
            t = table[method]
            print(f"{method}: op error (CPU) per job " + ", ".join(f"{100 * x:.1f}%" for x in t["op_error_cpu_per_job"])
                  + "; calibrated " + ", ".join(f"{100 * x:.1f}%" for x in t["op_error_cpu_calibrated_per_job"])
                  + "; per part signed / abs: " + ", ".join(
                      f"{part} {100 * v['signed']:+.1f}% / {100 * v['abs']:.1f}%" for part, v in t["op_error_cpu_parts"].items()),
                  file=sys.stderr)
    if "speedup" in table:
        s = table["speedup"]
        print(f"dflop over data_blind: measured {s['measured_per_step']:.3f}x per step (per job: "
              + ", ".join(f"{x:.3f}x" for x in s["measured_per_job"])
              + f"; ratio of medians {s['measured_medians']:.3f}x), predicted {s['predicted']:.3f}x", file=sys.stderr)
    if "loss" in table:
        l = table["loss"]
        print(f"loss over {l['steps']} steps: {l['first']:.4f} -> {l['last']:.4f}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "torch-bench")
