# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: the `dflop` tool the results are compared with (DFLOP_CLI,
set by ctest) and small workloads written as traces."""

import json
import os
import subprocess

import pytest

import dflop


def _cli_path():
    path = os.environ.get("DFLOP_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("DFLOP_CLI must name the built dflop tool (ctest sets it; by hand: DFLOP_CLI=build/bin/dflop)")
    return path


@pytest.fixture(scope="session")
def cli():
    """Runs `dflop ARGS...` and returns its standard output; fails the test on a non-zero exit."""
    path = _cli_path()

    def run(*args):
        done = subprocess.run([path, *map(str, args)], capture_output=True, text=True)
        assert done.returncode == 0, f"dflop {' '.join(map(str, args))} failed: {done.stderr}"
        return done.stdout

    return run


@pytest.fixture(scope="session")
def cli_json(cli):
    """`dflop ARGS... --json` parsed: one object, or a list for JSON Lines."""

    def run(*args):
        text = cli(*args, "--json")
        lines = [line for line in text.splitlines() if line.strip()]
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return [json.loads(line) for line in lines]

    return run


@pytest.fixture(scope="session")
def small_trace(tmp_path_factory):
    """A 2000-sample onevision trace file and its samples."""
    samples = dflop.generate_mixture("onevision", 2000, 3)
    path = tmp_path_factory.mktemp("trace") / "small.jsonl"
    dflop.write_trace(samples, path)
    return path, samples


def without_timings(plan_json):
    """A plan's JSON without the search's wall-clock seconds (they differ run to run), and
    without `dflop plan --json`'s own `time_breakdown` of one batch (not part of a plan)."""
    document = json.loads(json.dumps(plan_json))
    document.pop("time_breakdown", None)
    for key in list(document.get("search", {})):
        if key.endswith("seconds"):
            del document["search"][key]
    return document
