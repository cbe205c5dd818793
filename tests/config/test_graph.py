from __future__ import annotations

import pytest

from scheduler.config import FreezeError
from scheduler.config.graph import freeze_job_graph
from tests.config.builders import with_base

APP = """
- job: {name: build}
- job: {name: unit, dependencies: [build]}
- job: {name: lint}
- job: {name: integ, dependencies: [unit, {name: lint, soft: true}, {name: docs, soft: true}]}
- project:
    check: {jobs: [build, unit, lint, integ]}
    gate: {jobs: [build, unit, integ]}
"""


def test_dependencies_follow_the_configuration() -> None:
    graph = freeze_job_graph(
        with_base(app={"main": {".zuul.yaml": APP}}).layout, "app", "main", "check"
    )
    assert graph.dependencies["integ"] == ("unit", "lint")
    assert graph.dependencies["unit"] == ("build",)
    assert graph.dependencies["build"] == graph.dependencies["lint"] == ()


def test_soft_dependencies_drop_out_of_smaller_graphs() -> None:
    graph = freeze_job_graph(
        with_base(app={"main": {".zuul.yaml": APP}}).layout, "app", "main", "gate"
    )
    assert dict(graph.dependencies) == {"build": (), "unit": ("build",), "integ": ("unit",)}


def test_long_cycle_is_named_in_order() -> None:
    app = """
    - job: {name: a, dependencies: [b]}
    - job: {name: b, dependencies: [c]}
    - job: {name: c, dependencies: [a]}
    - job: {name: d, dependencies: [a]}
    - project:
        check: {jobs: [d, a, b, c]}
    """
    result = with_base(app={"main": {".zuul.yaml": app}})
    assert [str(e) for e in result.errors] == [
        ".zuul.yaml:6: project 'app': check: dependency cycle: a -> b -> c -> a"
    ]
    with pytest.raises(FreezeError) as info:
        freeze_job_graph(result.layout, "app", "main", "check", ["x"])
    assert str(info.value) == str(result.errors[0])


def test_unknown_pipeline_and_unconfigured_project() -> None:
    layout = with_base(app={"main": {".zuul.yaml": APP}}).layout
    with pytest.raises(FreezeError, match="pipeline 'post' is not defined"):
        freeze_job_graph(layout, "app", "main", "post")
    assert freeze_job_graph(layout, "lib", "main", "check").jobs == ()


def test_hard_dependency_removed_by_files_matcher_fails_the_item() -> None:
    app = """
    - job: {name: build, files: ['^src/']}
    - job: {name: unit, dependencies: [build]}
    - project:
        check: {jobs: [build, unit]}
    """
    layout = with_base(app={"main": {".zuul.yaml": app}}).layout
    assert freeze_job_graph(layout, "app", "main", "check", ["src/a.py"]).names == ("build", "unit")
    with pytest.raises(FreezeError) as info:
        freeze_job_graph(layout, "app", "main", "check", ["docs/a.rst"])
    assert str(info.value) == (
        ".zuul.yaml:4: project 'app': check: job 'unit' depends on 'build', "
        "which does not run for this item"
    )
