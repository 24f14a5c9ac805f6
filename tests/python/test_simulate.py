# SPDX-License-Identifier: Apache-2.0
"""dflop.simulate gives what `dflop simulate --json` gives for the same costs."""

import numpy
import pytest

import dflop


def write_costs(path, forward, backward, weight=None):
    header = "microbatch,stage,forward,backward" + (",weight" if weight is not None else "")
    rows = []
    for j in range(forward.shape[0]):
        for s in range(forward.shape[1]):
            row = f"{j},{s},{forward[j, s]!r},{backward[j, s]!r}"
            rows.append(row + (f",{weight[j, s]!r}" if weight is not None else ""))
    path.write_text(header + "\n" + "\n".join(rows) + "\n")


@pytest.mark.parametrize("schedule,order", [("1f1b", "identity"), ("gpipe", "johnson"), ("interleaved", "neh"),
                                            ("zb-h1", "neh")])
def test_simulate_equals_the_cli(cli_json, tmp_path, schedule, order):
    generator = numpy.random.default_rng(2)
    forward = generator.uniform(0.5, 2.0, size=(8, 4))
    backward = 2 * forward
    weight = forward / 2
    write_costs(tmp_path / "costs.csv", forward, backward, weight)
    expected = cli_json("simulate", "--schedule", schedule, "--costs", tmp_path / "costs.csv", "--order", order,
                        "--budget", 50, "--transfer", 0.01)
    from_file = dflop.simulate(schedule, tmp_path / "costs.csv", order=order, budget=50, transfer=0.01)
    from_arrays = dflop.simulate(schedule, forward=forward, backward=backward, weight=weight, order=order, budget=50,
                                 transfer=0.01)
    for result in (from_file, from_arrays):
        assert {k: v for k, v in result.items() if k != "order"} == expected
        assert sorted(result["order"]) == list(range(8))


def test_bad_simulation_requests(tmp_path):
    ones = numpy.ones((4, 2))
    with pytest.raises(dflop.InputError, match="unknown schedule 'fast'"):
        dflop.simulate("fast", forward=ones, backward=ones)
    with pytest.raises(dflop.InputError, match="zb-h1 needs the weight array"):
        dflop.simulate("zb-h1", forward=ones, backward=ones)
    with pytest.raises(dflop.InputError, match="is 3 x 2, forward is 4 x 2"):
        dflop.simulate("1f1b", forward=ones, backward=numpy.ones((3, 2)))
    bad = ones.copy()
    bad[2, 1] = -1
    with pytest.raises(dflop.InputError) as caught:
        dflop.simulate("1f1b", forward=ones, backward=bad)
    assert caught.value.source == "backward" and caught.value.line == 3
    path = tmp_path / "costs.csv"
    path.write_text("microbatch,stage,forward,backward\n0,0,1,2\n0,0,1,2\n")
    with pytest.raises(dflop.InputError) as caught:
        dflop.simulate("1f1b", path)
    assert caught.value.source == str(path) and caught.value.line == 3 and "given twice" in caught.value.reason
