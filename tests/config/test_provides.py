"""A job's ``provides`` and ``requires``: free-form names, merged along the chain, frozen."""

from __future__ import annotations

import pytest

from scheduler.config import FrozenJob
from scheduler.config.graph import freeze_job_graph
from scheduler.layouts.source import job_info
from scheduler.model.build import JobInfo
from scheduler.wire.build_spec import _job
from tests.config.builders import with_base
from tests.config.test_invalid import load, messages


def test_provides_and_requires_are_frozen_and_merged_without_duplicates() -> None:
    config = """
    - job:
        name: image-base
        provides: images
    """
    app = {
        "main": {
            ".zuul.yaml": """
            - job:
                name: build-image
                parent: image-base
                provides: [images, registry image]
                requires: builder
            - project:
                gate:
                  jobs:
                    - build-image:
                        requires: [builder, wheels]
            """
        }
    }
    result = with_base(config, app=app)
    assert [str(e) for e in result.errors] == []
    graph = freeze_job_graph(result.layout, "app", "main", "gate", None)
    job = graph.job("build-image")
    assert job is not None
    assert job.provides == ("images", "registry image")
    assert job.requires == ("builder", "wheels")
    # the build request carries them as they are; scheduling sees them in JobInfo
    assert _job(job.to_dict()) == job
    info = job_info(job, graph)
    assert (info.provides, info.requires) == (job.provides, job.requires)
    assert JobInfo.from_dict(info.to_dict()) == info


def test_a_job_without_them_has_none() -> None:
    old = {"name": "a", "project": "p", "branch": "main", "pipeline": "gate"}
    job = FrozenJob.from_dict(old)
    assert (job.provides, job.requires) == ((), ())
    assert "provides" not in JobInfo("a").to_dict()


@pytest.mark.parametrize("key", ["provides", "requires"])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{name: image}", "expected a string or a list of strings, got mapping"),
        ("[1]", "expected a list of strings, found integer"),
        ("[image, [nested]]", "expected a list of strings, found list"),
        ("['']", "a name must not be empty"),
        ("'   '", "a name must not be empty"),
        ("'" + "x" * 300 + "'", "a name is longer than 255 characters"),
        ('"image\\nname"', "'image\\nname' holds a control character"),
    ],
)
def test_malformed_names_are_config_errors_with_file_and_line(
    key: str, value: str, message: str
) -> None:
    result = load(app=f"- job:\n    name: a\n    {key}: {value}\n")
    assert messages(result) == [f".zuul.yaml:3: job 'a': {key}: {message}"]
