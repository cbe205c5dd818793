"""A job's ``failure-output``: regexes checked at load time, merged along the chain, frozen."""

from __future__ import annotations

from scheduler.config import FrozenJob
from scheduler.config.graph import freeze_job_graph
from scheduler.wire.build_spec import _job
from tests.config.builders import with_base
from tests.config.test_invalid import load, messages


def test_failure_output_is_frozen_and_merged_without_duplicates() -> None:
    config = """
    - job:
        name: tox
        failure-output: '^FAIL: '
    """
    app = {
        "main": {
            ".zuul.yaml": """
            - job:
                name: unit
                parent: tox
                failure-output: ['^FAIL: ', 'Traceback \\(most recent call last\\)']
            - project:
                gate:
                  jobs:
                    - unit:
                        failure-output: 'ERROR: .* failed'
            """
        }
    }
    result = with_base(config, app=app)
    assert [str(e) for e in result.errors] == []
    graph = freeze_job_graph(result.layout, "app", "main", "gate", None)
    job = graph.job("unit")
    assert job is not None
    assert job.failure_output == (
        "^FAIL: ",
        "Traceback \\(most recent call last\\)",
        "ERROR: .* failed",
    )
    # the build request carries it to the executor as it is
    assert _job(job.to_dict()) == job


def test_a_job_without_failure_output_has_none() -> None:
    old = {"name": "a", "project": "p", "branch": "main", "pipeline": "gate"}
    assert FrozenJob.from_dict(old).failure_output == ()


def test_an_invalid_failure_output_regex_is_a_config_error_with_file_and_line() -> None:
    result = load(app="- job:\n    name: a\n    failure-output: ['ok', 'bad [x']\n")
    assert messages(result) == [
        ".zuul.yaml:3: job 'a': failure-output: regex 'bad [x' refused: invalid regular "
        "expression: unterminated character set at position 4"
    ]


def test_a_failure_output_regex_with_two_repetitions_is_refused() -> None:
    # searched anywhere in a line, a.*a.*b takes seconds on a 4 KiB line of "a"
    result = load(app="- job:\n    name: a\n    failure-output: 'a.*a.*b'\n")
    assert messages(result) == [
        ".zuul.yaml:3: job 'a': failure-output: regex 'a.*a.*b' refused: a failure-output "
        "pattern may hold at most 1 repetition (*, +, {m,n}); it is searched anywhere in a line"
    ]


def test_failure_output_must_be_strings() -> None:
    result = load(app="- job:\n    name: a\n    failure-output: [1]\n")
    assert messages(result) == [
        ".zuul.yaml:3: job 'a': failure-output: expected a list of strings, found integer"
    ]
