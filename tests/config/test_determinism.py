"""Two processes, same input: byte-identical layout JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scheduler.config.graph import freeze_job_graph
from scheduler.config.serialize import canonical_json
from tests.config.sample import render, sample

ROOT = Path(__file__).resolve().parents[2]


def _run(seed: str, *args: str) -> bytes:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    done = subprocess.run(
        [sys.executable, "-m", "tests.config.sample", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def test_two_processes_build_byte_identical_layouts() -> None:
    first = _run("1")
    second = _run("2", "--reverse")  # other hash seed, input given in reverse order
    assert first == second
    assert first.decode("ascii") == render(sample())


def test_sample_is_rich_enough_to_mean_something() -> None:
    result = sample()
    assert [e.describe() for e in result.errors] == [
        "app@main: .zuul.yaml:18: job 'broken': timeout: expected an integer, got string"
    ]
    graph = freeze_job_graph(result.layout, "app", "main", "check", ["src/a.py"])
    assert graph.names == ("pep8", "unit", "integ")
    assert dict(graph.dependencies) == {"pep8": (), "unit": (), "integ": ("unit",)}
    stable = freeze_job_graph(result.layout, "app", "stable/1", "check", None)
    unit = stable.job("unit")
    assert unit is not None and unit.vars["stable"] is True


def test_content_hash_follows_content() -> None:
    result = sample()
    changed = sample()
    assert result.layout.content_hash() == changed.layout.content_hash()
    from dataclasses import replace

    other = replace(result.layout, default_parent="other")
    assert other.content_hash() != result.layout.content_hash()


def test_frozen_jobs_round_trip_through_json() -> None:
    from scheduler.config import FrozenJob

    result = sample()
    for branch in ("main", "stable/1"):
        graph = freeze_job_graph(result.layout, "app", branch, "check", None)
        for job in graph.jobs:
            assert FrozenJob.from_dict(job.to_dict()) == job
            assert FrozenJob.from_dict(json.loads(json.dumps(job.to_dict()))) == job
            assert FrozenJob.from_dict(json.loads(canonical_json(job))) == job
