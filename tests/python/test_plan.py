# SPDX-License-Identifier: Apache-2.0
"""dflop.plan and Plan.schedule_batch give what `dflop plan --json` and `dflop schedule --json` print."""

import json
import threading
import time

import pytest

import dflop
from conftest import without_timings


def test_the_readme_call_prints_the_cli_figure(cli_json):
    expected = cli_json("plan")  # the built-in default: onevision 10000 seed 0, 64 x h100-80gb, batch 512
    plan = dflop.plan(dflop.generate_mixture("onevision", 10000, 0), "siglip-400m+qwen2.5-7b",
                      dflop.Cluster(64, 8, "h100-80gb"), global_batch=512)
    assert plan.iteration_seconds == expected["iteration_seconds"]
    assert without_timings(plan.to_dict()) == without_timings(expected)


@pytest.mark.parametrize("schedule", ["auto", "1f1b", "zb-h1", "gpipe"])
def test_plan_of_a_trace_equals_the_cli(cli_json, small_trace, schedule):
    path, samples = small_trace
    expected = cli_json("plan", "--workload", path, "--gpus", 16, "--global-batch", 64, "--batches", 2, "--seed", 5,
                        "--schedule", schedule)
    for workload in (path, samples, samples.to_records()):
        plan = dflop.plan(workload, "siglip-400m+qwen2.5-7b", dflop.Cluster(16, 8, "h100-80gb"), global_batch=64,
                          batches=2, seed=5, schedule=schedule, threads=1)
        assert without_timings(plan.to_dict()) == without_timings(expected)
    assert plan.config == expected["config"]
    assert plan.chosen.iteration_seconds == expected["iteration_seconds"]
    assert set(plan.baselines) == set(expected["baselines"])
    for name, baseline in plan.baselines.items():
        assert baseline.iteration_seconds == expected["baselines"][name]["iteration_seconds"]


def planned_as_the_cli(cli_json, small_trace, flags, **keywords):
    """dflop.plan(**keywords) on the small trace, checked equal to `dflop plan FLAGS` (timings aside)."""
    path, samples = small_trace
    expected = cli_json("plan", "--workload", path, "--gpus", 16, "--global-batch", 64, "--batches", 2, *flags)
    plan = dflop.plan(samples, "siglip-400m+qwen2.5-7b", dflop.Cluster(16), global_batch=64, batches=2, **keywords)
    assert without_timings(plan.to_dict()) == without_timings(expected)
    return plan


def test_gradient_buckets_plan_as_the_cli_does(cli_json, small_trace):
    _, samples = small_trace
    plan = planned_as_the_cli(cli_json, small_trace, ["--gradient-bucket-mb", 25], gradient_bucket_mb=25)
    assert plan.to_dict()["batch"]["gradient_bucket_bytes"] == 25 * 1024 * 1024
    default = dflop.plan(samples, "siglip-400m+qwen2.5-7b", dflop.Cluster(16), global_batch=64, batches=2)
    assert default.to_dict()["batch"]["gradient_bucket_bytes"] == 25 * 1024 * 1024  # the default, as the CLI's
    unbucketed = planned_as_the_cli(cli_json, small_trace, ["--gradient-bucket-mb", 0], gradient_bucket_mb=0)
    assert unbucketed.to_dict()["batch"]["gradient_bucket_bytes"] == 0
    with pytest.raises(dflop.InputError, match="gradient_bucket_mb: must be a finite number of MiB >= 0"):
        dflop.plan(samples, "siglip-400m+qwen2.5-7b", dflop.Cluster(16), global_batch=64, gradient_bucket_mb=-1)


def test_whole_stage_recompute_is_the_cli_flag(cli_json, small_trace):
    _, samples = small_trace
    plan = planned_as_the_cli(cli_json, small_trace, ["--whole-stage-recompute"], whole_stage_recompute=True)
    for module in ("encoder", "llm"):
        assert "recompute_layers" not in plan.config[module]


def test_saved_plan_is_the_cli_plan_file_and_reads_back(cli, small_trace, tmp_path):
    path, samples = small_trace
    cli("plan", "--workload", path, "--gpus", 16, "--global-batch", 64, "--batches", 2, "--save", tmp_path / "cli.json")
    plan = dflop.plan(samples, "siglip-400m+qwen2.5-7b", dflop.Cluster(16), global_batch=64, batches=2)
    plan.save(tmp_path / "python.json")
    saved = json.loads((tmp_path / "python.json").read_text())
    assert without_timings(saved) == without_timings(json.loads((tmp_path / "cli.json").read_text()))
    assert dflop.Plan.load(tmp_path / "python.json").to_json() == plan.to_json()
    assert dflop.Plan.from_json(plan.to_json()).to_json() == plan.to_json()


@pytest.mark.parametrize("method", ["dflop", "data_blind", "dflop_reference"])
def test_schedule_batch_equals_dflop_schedule(cli, cli_json, small_trace, tmp_path, method):
    path, samples = small_trace
    plan_file = tmp_path / "plan.json"
    cli("plan", "--workload", path, "--gpus", 16, "--global-batch", 64, "--batches", 2, "--save", plan_file)
    plan = dflop.Plan.load(plan_file)
    lines = cli_json("schedule", "--plan", plan_file, "--workload", path, "--batches", 3, "--seed", 11,
                     "--method", method)
    assert len(lines) == 3
    position = {sample_id: i for i, sample_id in enumerate(samples.ids)}
    for k, line in enumerate(lines):
        batch = samples.take([position[sample_id] for sample_id in line["samples"]])
        scheduled = plan.schedule_batch(batch, seed=11 + k, method=method)
        ids = batch.ids

        def as_ids(groups):
            return [[[ids[i] for i in group] for group in replica] for replica in groups]

        assert scheduled.predicted_seconds == line["predicted_seconds"]
        assert scheduled.slot_order == line["slot_order"]
        assert as_ids(scheduled.llm_microbatches) == line["llm_microbatches"]
        assert as_ids(scheduled.encoder_parts) == line["encoder_parts"]
        for replica in range(scheduled.llm_replicas):
            assert scheduled.replica_microbatches(replica) == scheduled.llm_microbatches[replica]


def test_no_plan_fits_raises_infeasible_error_with_the_cli_text(small_trace):
    path, samples = small_trace
    with pytest.raises(dflop.InfeasibleError) as caught:
        dflop.plan(samples, "siglip-400m+qwen2.5-32b", dflop.Cluster(8, 8, "h100-80gb"), global_batch=64, batches=2)
    assert "fits in memory" in str(caught.value)
    assert isinstance(caught.value, dflop.Error) and not isinstance(caught.value, ValueError)


def test_planning_releases_the_gil():
    workload = dflop.generate_mixture("onevision", 10000, 0)
    done = threading.Event()
    result = {}

    def plan_in_background():
        result["plan"] = dflop.plan(workload, "siglip-400m+qwen2.5-7b", dflop.Cluster(64), threads=1)
        done.set()

    worker = threading.Thread(target=plan_in_background)
    started = last = time.perf_counter()
    longest_stall = 0.0
    worker.start()
    while not done.is_set():  # were the GIL held while planning, this loop would stall for the whole plan
        now = time.perf_counter()
        longest_stall, last = max(longest_stall, now - last), now
    planning = time.perf_counter() - started
    worker.join()
    assert result["plan"].iteration_seconds > 0
    assert planning > 0.3, "planning too short to tell"
    assert longest_stall < planning / 2, f"the main thread stalled {longest_stall:.3f} s of {planning:.3f} s"


def test_unfittable_samples_raise_input_error_or_are_excluded_as_the_cli_does(cli_json, small_trace, tmp_path):
    _, samples = small_trace
    records = samples.to_records()[:600]
    records.append({"id": "giant", "modality": "text", "encoder_items": 0, "encoder_tokens": 0,
                    "llm_tokens": 10 ** 15})
    path = tmp_path / "giant.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    cluster = dflop.Cluster(16, 8, "h100-80gb")
    with pytest.raises(dflop.InputError, match=r"1 sample cannot fit in memory .*: giant \(0 encoder, "
                                               r"1000000000000000 LLM tokens\)"):
        dflop.plan(records, "siglip-400m+qwen2.5-7b", cluster, global_batch=64, batches=2)
    plan = dflop.plan(records, "siglip-400m+qwen2.5-7b", cluster, global_batch=64, batches=2,
                      exclude_unfittable=True)
    assert plan.excluded_samples == ["giant"]
    expected = cli_json("plan", "--workload", path, "--gpus", 16, "--global-batch", 64, "--batches", 2,
                        "--exclude-unfittable", tmp_path / "excluded.txt")
    assert without_timings(plan.to_dict()) == without_timings(expected)
    assert (tmp_path / "excluded.txt").read_text() == "giant\n"


def test_the_memory_budget_and_its_estimate_are_the_plan_files(cli_json, small_trace):
    path, samples = small_trace
    cluster = dflop.Cluster(16, 8, "h100-80gb")
    plan = dflop.plan(samples, "siglip-400m+qwen2.5-7b", cluster, global_batch=64, batches=2)
    expected = cli_json("plan", "--workload", path, "--gpus", 16, "--global-batch", 64, "--batches", 2)
    assert plan.memory_budget_bytes == expected["batch"]["memory_budget_bytes"] == int(80 * 2 ** 30 * 0.9)
    assert plan.memory_cap == expected["memory_cap"]
    assert plan.memory_cap["batches"] == 128
    assert 0 <= plan.memory_cap["infeasible"] <= plan.memory_cap["capped"] <= plan.memory_cap["batches"]
    scheduled = plan.schedule_batch(samples.to_records()[:64], seed=3)
    assert isinstance(scheduled.memory_capped, bool)


def test_planned_recompute_is_the_cli_flag(cli_json, small_trace):
    _, samples = small_trace
    plan = planned_as_the_cli(cli_json, small_trace, ["--planned-recompute"], planned_recompute=True)
    assert plan.to_dict()["batch"]["recompute_per_batch"] is False
    default = dflop.plan(samples, "siglip-400m+qwen2.5-7b", dflop.Cluster(16), global_batch=64, batches=2)
    assert "recompute_per_batch" not in default.to_dict()["batch"]


def test_encoder_run_ahead_is_the_cli_flag(cli_json, small_trace):
    plan = planned_as_the_cli(cli_json, small_trace, ["--no-encoder-run-ahead"], encoder_run_ahead=False)
    assert plan.method("dflop").encoder_run_ahead == 0
    assert "encoder_run_ahead" not in plan.to_dict()["config"]
    searched = planned_as_the_cli(cli_json, small_trace, [])
    assert searched.method("dflop").encoder_run_ahead == searched.to_dict()["config"].get("encoder_run_ahead", 0)
    assert searched.method("dflop").iteration_seconds <= plan.method("dflop").iteration_seconds


def test_batch_schedule_says_what_each_stage_recomputes(small_trace):
    _, samples = small_trace
    plan = dflop.plan(samples, "siglip-400m+qwen2.5-7b", dflop.Cluster(16), global_batch=64, batches=2)
    scheduled = plan.schedule_batch(samples.to_records()[:64], seed=3)
    config = plan.config
    for module, counts in (("encoder", scheduled.encoder_recomputed), ("llm", scheduled.llm_recomputed)):
        degrees = config[module]
        assert len(counts) == degrees["dp"] * scheduled.microbatches * degrees["pp"]
        stage_layers = [last - first for first, last in degrees["layers"]]
        for at, count in enumerate(counts):
            assert 0 <= count <= (stage_layers[at % degrees["pp"]] if degrees["recompute"] else 0)
