"""The serial manager: one item at a time per shared queue, each alone on its branch tip."""

from __future__ import annotations

from scheduler.manager.serial import SerialManager
from scheduler.manager.settings import PipelineSettings
from scheduler.model.results import Result
from tests.scheduler.gate_harness import Gate

S, F = Result.SUCCESS, Result.FAILURE


def serial(**kwargs: object) -> Gate:
    settings = PipelineSettings("deploy", "serial", **kwargs)  # type: ignore[arg-type]
    return Gate(manager=SerialManager, settings=settings)


def test_one_item_at_a_time_each_tested_alone() -> None:
    g = serial()
    g.enqueue("A", "B", "C")
    assert [m.changes[-1].ref for m in g.merges] == ["A"]
    assert [g.item(r).active for r in "ABC"] == [True, False, False]
    g.merge_all()
    g.finish("A", result=F)
    assert g.reported == [("A", F)] and g.cancels == []
    assert g.merged_on("B") == ("B",) and not g.item("C").active
    g.merge_all()
    g.finish("B")
    assert g.merged_on("C") == ("C",)
    g.merge_all()
    g.finish("C")
    assert g.reported == [("A", F), ("B", S), ("C", S)]
    assert g.state.queues["app"].window == 1  # never changes


def test_a_shared_queue_serialises_its_projects_others_run_beside_it() -> None:
    def queue_for(project: str, branch: str) -> tuple[str, bool] | None:
        return ("deploys", False) if project in ("app", "lib") else None

    g = serial(queue_for=queue_for)
    g.enqueue("A", project="app")
    g.enqueue("L", project="lib")
    g.enqueue("O", project="other")
    assert sorted(m.changes[-1].ref for m in g.merges) == ["A", "O"]
    g.merge_all()
    g.finish("A")
    assert g.merged_on("L") == ("L",)
