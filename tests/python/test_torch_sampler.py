# SPDX-License-Identifier: Apache-2.0
"""dflop.torch.DflopBatchSampler in real DataLoaders over 4 simulated ranks: each global batch covered exactly
once across ranks, each rank's microbatches those of Plan.schedule_batch, the same in separate processes."""

import json
import os
import subprocess
import sys
from collections import Counter

import numpy
import pytest
import torch
from torch.utils.data import DataLoader

import dflop
from dflop.torch import DflopBatchSampler

RANKS = 4


@pytest.fixture(scope="module")
def sizes():
    return dflop.generate_mixture("onevision", 300, 1).to_records()


@pytest.fixture(scope="module")
def plan(sizes):
    """A real plan with 4 LLM replicas (the first cluster size, from a few, that the planner splits so).
    1F1B: the schedule search ("auto") prefers deeper pipelines, hence fewer replicas, on these sizes."""
    for gpus in (10, 6, 12, 8, 14):
        candidate = dflop.plan(sizes, "siglip-400m+qwen2.5-7b", dflop.Cluster(gpus, gpus), global_batch=32,
                               batches=2, schedule="1f1b")
        if candidate.llm_replicas == RANKS:
            return candidate
    pytest.fail("no cluster size gave a plan with 4 LLM replicas; pick others for this test")


class Dataset(torch.utils.data.Dataset):
    """LLaVA-style items; the loader returns their positions so the test can check coverage."""

    def __init__(self, sizes):
        self.items = [{"index": i, "conversations": ["..."] * 2, **s} for i, s in enumerate(sizes)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def collate(items):
    return [item["index"] for item in items]


def loaded(sizes, plan, rank, epoch, seed=7, workers=0):
    sampler = DflopBatchSampler(sizes, plan, rank, seed=seed)
    sampler.set_epoch(epoch)
    loader = DataLoader(Dataset(sizes), batch_sampler=sampler, collate_fn=collate, num_workers=workers)
    return sampler, list(loader)


def test_each_global_batch_is_covered_exactly_once_across_ranks(sizes, plan):
    per_rank = [loaded(sizes, plan, rank, epoch=0) for rank in range(RANKS)]
    sampler = per_rank[0][0]
    m = plan.microbatches
    assert sampler.batches_per_epoch == len(sizes) // plan.global_batch
    assert sampler.samples_left_out == len(sizes) % plan.global_batch
    for _, microbatches in per_rank:
        assert len(microbatches) == len(sampler) == sampler.batches_per_epoch * m
    seen = Counter()
    for k, (indices, scheduled) in enumerate(sampler.schedules()):
        batch = Counter()
        for rank, (_, microbatches) in enumerate(per_rank):
            mine = microbatches[k * m:(k + 1) * m]
            assert all(mine), "an empty microbatch"
            assert mine == [[indices[i] for i in group] for group in scheduled.replica_microbatches(rank)]
            batch.update(i for group in mine for i in group)
        assert batch == Counter(indices), f"global batch {k} not covered exactly once"
        seen.update(batch)
    assert max(seen.values()) == 1 and len(seen) == sampler.batches_per_epoch * plan.global_batch


def test_microbatches_are_plan_schedule_batch_in_execution_order(sizes, plan):
    sampler, microbatches = loaded(sizes, plan, rank=2, epoch=3)
    samples = dflop.samples_from(sizes)
    m = plan.microbatches
    for k, indices in enumerate(sampler.global_batch_indices()):
        expected = plan.schedule_batch(samples.take(indices), seed=7 + 3 * sampler.batches_per_epoch + k)
        assert microbatches[k * m:(k + 1) * m] == [[indices[i] for i in g] for g in expected.llm_microbatches[2]]


def test_epochs_differ_and_repeat(sizes, plan):
    _, first = loaded(sizes, plan, 1, epoch=0)
    _, again = loaded(sizes, plan, 1, epoch=0)
    _, second = loaded(sizes, plan, 1, epoch=1)
    assert first == again and first != second


def test_same_microbatches_in_separate_processes(sizes, plan, tmp_path):
    plan.save(tmp_path / "plan.json")
    (tmp_path / "sizes.json").write_text(json.dumps(sizes))
    script = (
        "import json, sys, dflop\n"
        "from dflop.torch import DflopBatchSampler\n"
        "sizes = json.load(open(sys.argv[1]))\n"
        "sampler = DflopBatchSampler(sizes, dflop.Plan.load(sys.argv[2]), int(sys.argv[3]), seed=7)\n"
        "sampler.set_epoch(int(sys.argv[4]))\n"
        "print(json.dumps(list(sampler)))\n")
    for rank, epoch in ((0, 0), (3, 2)):
        done = subprocess.run([sys.executable, "-c", script, tmp_path / "sizes.json", tmp_path / "plan.json",
                               str(rank), str(epoch)], capture_output=True, text=True, env=dict(os.environ))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == loaded(sizes, plan, rank, epoch)[1]


def test_worker_processes_load_the_same_microbatches(sizes, plan):
    assert loaded(sizes, plan, 0, epoch=1, workers=2)[1] == loaded(sizes, plan, 0, epoch=1)[1]


def test_sizes_as_array_or_trace_give_the_same_microbatches(sizes, plan, tmp_path):
    array = numpy.array([(s["modality"], s["encoder_items"], s["encoder_tokens"], s["llm_tokens"]) for s in sizes],
                        dtype=[("modality", "U12"), ("encoder_items", "i8"), ("encoder_tokens", "i8"),
                               ("llm_tokens", "i8")])
    dflop.write_trace(dflop.samples_from(sizes), tmp_path / "sizes.jsonl")
    reference = list(DflopBatchSampler(sizes, plan, 1, seed=7))
    assert list(DflopBatchSampler(array, plan, 1, seed=7)) == reference
    assert list(DflopBatchSampler(tmp_path / "sizes.jsonl", plan, 1, seed=7)) == reference


def test_bad_sampler_arguments(sizes, plan):
    with pytest.raises(ValueError, match="rank 4 out of range"):
        DflopBatchSampler(sizes, plan, 4)
    with pytest.raises(ValueError, match="cannot fill the plan's global batch"):
        DflopBatchSampler(sizes[:10], plan, 0)
    bad = [dict(s) for s in sizes]
    del bad[41]["llm_tokens"]
    with pytest.raises(dflop.InputError) as caught:
        DflopBatchSampler(bad, plan, 0)
    assert str(caught.value) == "sizes:42: missing field 'llm_tokens'"


def test_the_plans_excluded_samples_are_never_drawn(sizes, plan):
    giants = [dict(sizes[i], id=f"giant{i}", modality="text", encoder_items=0, encoder_tokens=0,
                   llm_tokens=10 ** 15) for i in (3, 150)]
    with_giants = list(sizes[:3]) + [giants[0]] + list(sizes[3:150]) + [giants[1]] + list(sizes[150:])
    gpus = plan.cluster.gpus
    excluded_plan = dflop.plan(with_giants, "siglip-400m+qwen2.5-7b", dflop.Cluster(gpus, gpus), global_batch=32,
                               batches=2, exclude_unfittable=True)
    assert excluded_plan.excluded_samples == ["giant3", "giant150"]
    giant_positions = {3, 151}
    for rank in range(excluded_plan.llm_replicas):
        sampler = DflopBatchSampler(with_giants, excluded_plan, rank, seed=7)
        assert sampler.samples_excluded == 2
        assert sampler.batches_per_epoch == (len(with_giants) - 2) // 32
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            drawn = [i for microbatch in sampler for i in microbatch]
            assert drawn and not giant_positions & set(drawn)
    # Without the exclusion the same workload is refused, naming the samples.
    with pytest.raises(dflop.InputError, match="giant3"):
        dflop.plan(with_giants, "siglip-400m+qwen2.5-7b", dflop.Cluster(gpus, gpus), global_batch=32, batches=2)
