"""Job attributes outside the frozen-job table.

The base job's defaults, ``final`` and ``protected``, the built-in ``noop``
job, zones (inherited, and refused when malformed) and the project's
merge-mode.
"""

from __future__ import annotations

from scheduler.config.graph import freeze_job_graph
from tests.config.builders import with_base


def test_base_job_defaults() -> None:
    result = with_base(app={"main": {".zuul.yaml": "- project: {check: {jobs: [base]}}\n"}})
    job = freeze_job_graph(result.layout, "app", "main", "check").jobs[0]
    assert (job.attempts, job.voting, job.timeout, job.parent) == (3, True, 1800, None)


def test_final_and_protected_allow_what_they_should() -> None:
    config = """
    - job: {name: sealed, final: true, timeout: 10}
    - job: {name: guarded, protected: true, abstract: true}
    - job: {name: guarded-child, parent: guarded}
    - project:
        name: app
        check:
          jobs:
            - sealed: {voting: false}
            - guarded-child
    """
    result = with_base(config, app={"main": {}})
    assert result.errors == ()
    graph = freeze_job_graph(result.layout, "app", "main", "check")
    sealed = graph.job("sealed")
    assert sealed is not None and (sealed.voting, sealed.timeout) == (False, 10)
    assert graph.names == ("sealed", "guarded-child")


def test_noop_is_built_in() -> None:
    """Zuul's noop job needs no definition and no parent, in every tenant."""
    app = {"main": {".zuul.yaml": "- project: {check: {jobs: [noop]}}\n"}}
    result = with_base(app=app)
    assert [str(e) for e in result.errors] == []
    (job,) = freeze_job_graph(result.layout, "app", "main", "check").jobs
    assert (job.name, job.parent, job.run, job.pre_run) == ("noop", None, (), ())


def test_noop_may_not_be_defined() -> None:
    app = {"main": {".zuul.yaml": "- job: {name: noop, run: x.sh}\n"}}
    result = with_base(app=app)
    assert [e.message for e in result.errors] == ["is built in and may not be defined"]
    assert result.errors[0].line == 1 and result.errors[0].project == "app"


def test_zone_and_merge_mode() -> None:
    app = {
        "main": {
            ".zuul.yaml": "- job: {name: east, zone: east-1, run: x.sh}\n"
            "- job: {name: child, parent: east, run: y.sh}\n"
            "- project: {merge-mode: rebase, check: {jobs: [east, child, {other: {}}]}}\n"
            "- job: {name: other, run: z.sh}\n"
        }
    }
    result = with_base(app=app)
    assert [str(e) for e in result.errors] == []
    graph = freeze_job_graph(result.layout, "app", "main", "check")
    assert {j.name: j.zone for j in graph.jobs} == {
        "east": "east-1",
        "child": "east-1",
        "other": "",
    }
    assert result.layout.merge_mode("app", "main") == "rebase"
    assert result.layout.merge_mode("config", "master") == "merge"


def test_a_bad_zone_is_refused_with_its_line() -> None:
    result = with_base(app={"main": {".zuul.yaml": "- job:\n    name: x\n    zone: 'a b'\n"}})
    (error,) = result.errors
    assert error.line == 3 and "is not a zone name" in error.message
