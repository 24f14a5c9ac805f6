# SPDX-License-Identifier: Apache-2.0
"""Every kind of bad input raises dflop.InputError (a ValueError) naming the source, the line and the reason,
with the text the dflop tool prints for the same file."""

import json
import os
import subprocess

import numpy
import pytest

import dflop

GOOD = {"id": "a", "modality": "image", "encoder_items": 2, "encoder_tokens": 1458, "llm_tokens": 1500}
GOOD_TOO = {"id": "b", "modality": "text", "encoder_items": 0, "encoder_tokens": 0, "llm_tokens": 300}

# (bad third record, what the reason must say)
BAD_RECORDS = [
    ({"id": "c", "modality": "text", "encoder_items": 0, "encoder_tokens": 0}, "missing field 'llm_tokens'"),
    ({"id": "c", "modality": "text", "encoder_items": 0, "encoder_tokens": 0, "llm_tokens": "12"},
     "field 'llm_tokens' must be an integer"),
    ({"id": "c", "modality": "text", "encoder_items": 0, "encoder_tokens": 0, "llm_tokens": 3.5},
     "field 'llm_tokens' must be an integer"),
    ({"id": "c", "modality": "smell", "encoder_items": 0, "encoder_tokens": 0, "llm_tokens": 3},
     'unknown modality "smell"'),
    ({"id": "c", "modality": "text", "encoder_items": 2, "encoder_tokens": 9, "llm_tokens": 3},
     "a text sample has encoder_items 2"),
    ({"id": "c", "modality": "video", "encoder_items": 4, "encoder_tokens": 2, "llm_tokens": 3},
     "encoder_tokens (2) is less than encoder_items (4)"),
    ({"id": "c", "modality": "text", "encoder_items": 0, "encoder_tokens": 0, "llm_tokens": 0}, "llm_tokens is 0"),
    (dict(GOOD), 'duplicate id "a"'),
]


def check(caught, source, line, reason_part):
    error = caught.value
    assert isinstance(error, ValueError) and isinstance(error, dflop.Error)
    assert error.source == str(source) and error.line == line
    assert reason_part in error.reason
    assert str(error) == (f"{source}:{line}: {error.reason}" if line else f"{source}: {error.reason}")


@pytest.mark.parametrize("bad,reason", BAD_RECORDS)
def test_bad_trace_line(cli, tmp_path, bad, reason):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(bad) + "\n")  # the bad record is on line 3
    with pytest.raises(dflop.InputError) as caught:
        dflop.read_trace(path)
    check(caught, path, 3, reason)
    done = subprocess.run([os.environ["DFLOP_CLI"], "stats", "--workload", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip() == f"dflop: error: {caught.value}"


def test_invalid_json_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD_TOO) + '\n{"id": "c", \n')
    with pytest.raises(dflop.InputError) as caught:
        dflop.read_trace(path)
    check(caught, path, 3, "invalid JSON")


def test_missing_trace_file(tmp_path):
    with pytest.raises(dflop.InputError) as caught:
        dflop.read_trace(tmp_path / "absent.jsonl")
    check(caught, tmp_path / "absent.jsonl", 0, "cannot open file")


@pytest.mark.parametrize("bad,reason", BAD_RECORDS)
def test_bad_record(bad, reason):
    with pytest.raises(dflop.InputError) as caught:
        dflop.samples_from([GOOD, GOOD_TOO, bad])
    check(caught, "sizes", 3, reason)
    with pytest.raises(ValueError):
        dflop.Samples.from_records([GOOD, GOOD_TOO, bad])


def test_record_that_is_not_a_dict():
    with pytest.raises(dflop.InputError) as caught:
        dflop.samples_from([GOOD, ["image", 2, 1458, 1500]], source="dataset")
    check(caught, "dataset", 2, "expected a dict or a dflop.Sample")


def test_booleans_and_huge_numbers_are_not_sizes():
    with pytest.raises(dflop.InputError) as caught:
        dflop.samples_from([dict(GOOD_TOO, llm_tokens=True)])
    check(caught, "sizes", 1, "must be an integer")
    with pytest.raises(dflop.InputError) as caught:
        dflop.samples_from([GOOD_TOO, dict(GOOD_TOO, id="z", llm_tokens=2**70)])
    check(caught, "sizes", 2, "out of range")


def structured(rows, llm_dtype="i8", modality_dtype="U12"):
    dtype = [("modality", modality_dtype), ("encoder_items", "i8"), ("encoder_tokens", "i8"), ("llm_tokens", llm_dtype)]
    return numpy.array(rows, dtype=dtype)


def test_structured_array_rows():
    array = structured([("image", 2, 1458, 1500.0), ("text", 0, 0, 300.5)], llm_dtype="f8")
    with pytest.raises(dflop.InputError) as caught:
        dflop.samples_from(array)
    check(caught, "sizes", 2, "field 'llm_tokens' must be an integer, found float 300.5")
    array = structured([("image", 2, 1458, 1500), ("text", 3, 0, 300)])
    with pytest.raises(dflop.InputError) as caught:
        dflop.samples_from(array)
    check(caught, "sizes", 2, "a text sample has encoder_items 3")


def test_structured_array_columns():
    with pytest.raises(dflop.InputError) as caught:
        dflop.samples_from(numpy.zeros(3, dtype=[("modality", "U8"), ("llm_tokens", "i8")]))
    check(caught, "sizes", 0, "missing field 'encoder_items'")
    with pytest.raises(dflop.InputError) as caught:
        dflop.samples_from(structured([(1, 0, 0, 5)], modality_dtype="i4"))
    check(caught, "sizes", 0, "field 'modality' must hold strings")


def test_unknown_presets_and_bad_model_files(tmp_path):
    with pytest.raises(dflop.InputError) as caught:
        dflop.load_model("siglip-400m+gpt-5")
    check(caught, "model", 0, "unknown LLM 'gpt-5'")
    with pytest.raises(dflop.InputError) as caught:
        dflop.load_gpu("b300")
    check(caught, "gpu", 0, "unknown GPU 'b300'")
    model_file = tmp_path / "model.json"
    model_file.write_text('{\n  "name": "m",\n  "encoder": ,\n}\n')
    with pytest.raises(dflop.InputError) as caught:
        dflop.load_model(model_file)
    assert caught.value.source == str(model_file) and caught.value.line == 3
    gpu_file = tmp_path / "gpu.json"
    gpu = json.loads(dflop.load_gpu("h100-80gb").to_json())
    gpu["tflops"] = 1
    gpu_file.write_text(json.dumps(gpu))
    with pytest.raises(dflop.InputError) as caught:
        dflop.Cluster(8, 8, gpu_file)
    assert caught.value.source == str(gpu_file) and "tflops" in caught.value.reason


def test_bad_plan_requests():
    workload = dflop.generate_mixture("onevision", 300, 1)
    with pytest.raises(dflop.InputError, match="need at least 2 GPUs"):
        dflop.plan(workload, "siglip-400m+qwen2.5-7b", dflop.Cluster(1, 8))
    with pytest.raises(dflop.InputError, match="neither 'auto' nor a one-chunk schedule"):
        dflop.plan(workload, "siglip-400m+qwen2.5-7b", dflop.Cluster(8), schedule="interleaved")
    with pytest.raises(dflop.InputError, match="300 samples cannot fill a global batch of 512"):
        dflop.plan(workload, "siglip-400m+qwen2.5-7b", dflop.Cluster(8))
    with pytest.raises(TypeError):
        dflop.plan({"not": "samples"}, "siglip-400m+qwen2.5-7b", dflop.Cluster(8))


def test_bad_plan_files(tmp_path):
    plan = dflop.plan(dflop.generate_mixture("onevision", 300, 1), "siglip-400m+qwen2.5-7b", dflop.Cluster(8),
                      global_batch=32, batches=1)
    with pytest.raises(dflop.InputError) as caught:
        dflop.Plan.from_json(plan.to_json().replace('"batches": 1,', '"batches": 1', 1), source="edited.json")
    assert caught.value.source == "edited.json" and caught.value.line > 1 and "invalid JSON" in caught.value.reason
    document = plan.to_dict()
    document["config"]["llm"]["dp"] += 1
    with pytest.raises(dflop.InputError) as caught:
        dflop.Plan.from_json(json.dumps(document), source="edited.json")
    assert "field 'config'" in caught.value.reason and "GPUs" in caught.value.reason
    with pytest.raises(dflop.InputError, match="has no method 'fastest'"):
        plan.schedule_batch(dflop.generate_mixture("onevision", 32, 2), method="fastest")


def test_bad_samples():
    with pytest.raises(dflop.InputError) as caught:
        dflop.Sample("x", "text", 1, 1, 5)
    check(caught, "Sample", 0, "a text sample has encoder_items 1")
    samples = dflop.generate_mixture("onevision", 10, 0)
    with pytest.raises(IndexError):
        samples.take([3, 10])
    with pytest.raises(dflop.InputError, match="no samples"):
        dflop.statistics(dflop.Samples())
