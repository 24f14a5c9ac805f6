# SPDX-License-Identifier: Apache-2.0
"""dflop.pack over NumPy arrays gives what `dflop pack --json` gives for the same costs."""

import numpy
import pytest

import dflop


@pytest.mark.parametrize("packer", ["sequential", "lpt", "karmarkar_karp", "refined"])
def test_pack_equals_the_cli(cli_json, tmp_path, packer):
    generator = numpy.random.default_rng(5)
    costs = generator.uniform(0.1, 3.0, size=(200, 2))
    path = tmp_path / "costs.csv"
    path.write_text("id,encoder,llm\n" + "".join(f"x{i},{a!r},{b!r}\n" for i, (a, b) in enumerate(costs)))
    expected = cli_json("pack", "--costs", path, "--bins", 12, "--packer", packer, "--seed", 3)
    result = dflop.pack(costs, 12, packer=packer, seed=3)
    assert [[f"x{i}" for i in b] for b in result.bins] == expected["bins"]
    assert result.makespan == expected["makespan"] and result.lower_bound == expected["lower_bound"]
    assert sorted(i for b in result.bins for i in b) == list(range(200))
    assert all(result.bin_of[i] == k for k, b in enumerate(result.bins) for i in b)


def test_one_dimension_and_buffers():
    costs = numpy.array([5.0, 1.0, 4.0, 2.0, 3.0])
    result = dflop.pack(costs, 2, packer="exact")
    assert result.makespan == 8.0 and result.lower_bound <= 8.0
    assert dflop.pack(costs.reshape(5, 1), 2, packer="exact").bins == result.bins
    readonly = costs.copy()
    readonly.flags.writeable = False
    assert dflop.pack(readonly, 2, packer="exact").bins == result.bins


def test_bad_costs():
    with pytest.raises(dflop.InputError, match="C-contiguous"):
        dflop.pack(numpy.ones((10, 4))[:, ::2], 2)
    with pytest.raises(dflop.InputError, match="float64"):
        dflop.pack(numpy.ones(10, dtype=numpy.float32), 2)
    with pytest.raises(dflop.InputError, match="sample 3, dimension 1: cost -1.000000 is negative"):
        costs = numpy.ones((5, 2))
        costs[3, 1] = -1
        dflop.pack(costs, 2)
    with pytest.raises(dflop.InputError, match="not finite"):
        dflop.pack(numpy.array([1.0, numpy.nan]), 1)
    with pytest.raises(dflop.InputError, match="3 samples cannot fill 4 bins"):
        dflop.pack(numpy.ones(3), 4)
    with pytest.raises(dflop.InputError, match="unknown packer 'best'"):
        dflop.pack(numpy.ones(3), 2, packer="best")
