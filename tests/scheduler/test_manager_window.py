"""Shared queues and the window of a dependent pipeline (Zuul's rules)."""

from __future__ import annotations

import pytest

from scheduler.manager.settings import PipelineSettings
from scheduler.manager.window import WindowSettings, in_window
from scheduler.model.results import Result
from scheduler.wire.events import Enqueue
from tests.scheduler.gate_harness import Gate, change

S, F = Result.SUCCESS, Result.FAILURE


@pytest.mark.parametrize(
    ("settings", "start", "grown", "shrunk"),
    [
        (WindowSettings(), 20, 21, 10),  # Zuul's defaults: +1, halved
        (WindowSettings(floor=3), 5, 6, 3),  # never below the floor
        (WindowSettings(ceiling=6), 6, 6, 3),  # never above the ceiling
        (WindowSettings(increase_type="exponential", increase_factor=2), 4, 8, 3),
        (WindowSettings(decrease_type="linear", decrease_factor=2, floor=1), 4, 5, 2),
        (WindowSettings(), 0, 0, 0),  # 0: unlimited, never changes
    ],
)
def test_window_growth_and_shrink(
    settings: WindowSettings, start: int, grown: int, shrunk: int
) -> None:
    assert settings.grow(start) == grown
    assert settings.shrink(start) == shrunk


def test_in_window() -> None:
    assert in_window(0, 99) and in_window(2, 1) and not in_window(2, 2)


def gate(window: int, floor: int = 1) -> Gate:
    settings = PipelineSettings("gate", "dependent", window=WindowSettings(window, floor))
    return Gate(settings=settings)


def test_items_beyond_the_window_wait_and_the_window_follows_the_head() -> None:
    g = gate(window=2)
    g.enqueue("A", "B", "C")
    assert [m.changes[-1].ref for m in g.merges] == ["A", "B"]
    assert [g.item(r).active for r in "ABC"] == [True, True, False]
    g.merge_all()
    g.finish("A")
    assert g.state.queues["app"].window == 3  # grew on success at the head
    assert g.item("C").active and g.merged_on("C") == ("B", "C")
    g.merge_all()
    g.finish("B", result=F)
    assert g.reported == [("A", S), ("B", F)]
    assert g.state.queues["app"].window == 1  # 3 // 2, shrunk on failure
    assert g.merged_on("C") == ("C",)
    g.enqueue("D")
    assert not g.item("D").active
    assert all(m.changes[-1].ref != "D" for m in g.merges)
    g.merge_all()
    g.finish("C")
    assert g.state.queues["app"].window == 2 and g.item("D").active
    assert g.merged_on("D") == ("D",)


def test_an_item_that_falls_out_of_the_window_starts_no_new_builds() -> None:
    from scheduler.config.model import Dependency
    from scheduler.model.build import JobInfo

    jobs = [JobInfo("lint"), JobInfo("unit", dependencies=(Dependency("lint"),))]
    settings = PipelineSettings("gate", "dependent", window=WindowSettings(3, floor=1))
    g = Gate(jobs, settings=settings)
    g.enqueue("A", "B", "C")
    g.merge_all()
    g.state.queues["app"].window = 1  # as after failures at the head
    g.finish("C", "lint")
    assert not g.item("C").active and g.running("C") == []
    g.state.queues["app"].window = 3
    g.run()
    assert g.running("C") == ["unit"]


def test_projects_sharing_a_queue_gate_together_others_alone() -> None:
    def queue_for(project: str, branch: str) -> tuple[str, bool] | None:
        return ("integrated", False) if project in ("app", "lib") else None

    g = Gate(settings=PipelineSettings("gate", "dependent", queue_for=queue_for))
    g.enqueue("A", project="app")
    g.enqueue("L", project="lib")
    g.enqueue("O", project="other")
    assert g.queue("integrated") == ["A", "L"] and g.queue("other") == ["O"]
    assert g.merged_on("L") == ("A", "L") and g.merged_on("O") == ("O",)


def test_a_per_branch_queue_has_one_queue_per_branch() -> None:
    def queue_for(project: str, branch: str) -> tuple[str, bool] | None:
        return ("integrated", True)

    g = Gate(settings=PipelineSettings("gate", "dependent", queue_for=queue_for))
    g.run(Enqueue(change("A")), Enqueue(change("B", branch="stable")))
    assert g.queue("integrated@main") == ["A"] and g.queue("integrated@stable") == ["B"]
    assert g.merged_on("B") == ("B",)
