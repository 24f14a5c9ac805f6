# SPDX-License-Identifier: Apache-2.0
"""Samples, traces, mixtures and statistics agree with `dflop generate` and `dflop stats --json`."""

import numpy

import dflop


def test_generate_mixture_writes_the_cli_trace(cli, tmp_path):
    samples = dflop.generate_mixture("video-heavy", 500, 4)
    dflop.write_trace(samples, tmp_path / "python.jsonl")
    assert (tmp_path / "python.jsonl").read_text() == cli("generate", "--mixture", "video-heavy", "--samples", 500,
                                                           "--seed", 4)
    assert dflop.read_trace(tmp_path / "python.jsonl").to_records() == samples.to_records()
    assert set(dflop.mixture_names()) >= {"onevision", "video-heavy", "text-heavy"}


def test_statistics_equal_dflop_stats(cli_json, small_trace):
    path, samples = small_trace
    expected = cli_json("stats", "--workload", path)
    del expected["workload"]
    assert dflop.statistics(samples) == expected
    assert dflop.statistics(path) == expected


def test_samples_behave_as_a_sequence():
    samples = dflop.generate_mixture("onevision", 50, 0)
    assert len(samples) == 50 and samples[-1] == samples[49] and samples[0].id == "s000000"
    picked = samples.take([7, 3, 7])
    assert picked.ids == ["s000007", "s000003", "s000007"]
    assert [s.id for s in samples][:2] == ["s000000", "s000001"]
    records = samples.to_records()
    assert dflop.Samples(records).to_records() == records
    assert dflop.samples_from(samples) is samples


def test_the_three_forms_of_sizes_agree(tmp_path):
    samples = dflop.generate_mixture("onevision", 200, 8)
    records = samples.to_records()
    array = numpy.array([(r["id"], r["modality"], r["encoder_items"], r["encoder_tokens"], r["llm_tokens"])
                         for r in records],
                        dtype=[("id", "U10"), ("modality", "U12"), ("encoder_items", "i4"),
                               ("encoder_tokens", "u8"), ("llm_tokens", "f8")])
    dflop.write_trace(samples, tmp_path / "t.jsonl")
    for form in (records, array, tmp_path / "t.jsonl", str(tmp_path / "t.jsonl")):
        assert dflop.samples_from(form).to_records() == records
    without_ids = dflop.samples_from([{k: v for k, v in r.items() if k != "id"} for r in records[:3]])
    assert without_ids.ids == ["0", "1", "2"]


def test_models_and_gpus_round_trip_through_json():
    model = dflop.load_model("siglip-400m+qwen2.5-7b")
    assert dflop.Model.from_json(model.to_json()) == model
    assert model.llm_layers == 28 and model.encoder_layers == 27
    gpu = dflop.load_gpu("a100-80gb")
    assert dflop.Gpu.from_json(gpu.to_json()) == gpu
    assert dflop.Cluster(16, 8, gpu).gpu == gpu
    assert "qwen2.5-7b" in dflop.llm_names() and "siglip-400m" in dflop.encoder_names()
    assert "h100-80gb" in dflop.gpu_names()
