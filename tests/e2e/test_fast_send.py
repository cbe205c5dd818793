"""Sends from inside running tasks, the fast way, read and run by real workers.

A change goes through check on real ``celery worker`` processes while the
test listens to every task event on the broker. The scheduler sends each
build from inside its ``process_pipeline`` task, and the executor sends a
pipeline nudge from inside each build: those go the fast way
(scheduler/nudge/kept_connection.py). The workers receive them with the label as their
arguments, the sending task as parent and its root as root, and run them;
no ``task-sent`` event is published for them. With ``SLUICE_FAST_SEND=0``
the same sends go through Celery, each with its ``task-sent`` event.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery

from scheduler.nudge import task_names
from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check
from tests.fixtures.waiting import wait_until


@contextmanager
def task_events(app: Celery) -> Iterator[list[dict[str, Any]]]:
    """Every event published on ``app``'s broker while the block runs, in order."""
    seen: list[dict[str, Any]] = []
    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(connection, handlers={"*": seen.append})
        thread = threading.Thread(target=receiver.capture, kwargs={"wakeup": False}, daemon=True)
        thread.start()
        try:
            yield seen
        finally:
            receiver.should_stop = True
            thread.join(timeout=10)


def _of(events: list[dict[str, Any]], kind: str, name: str = "") -> dict[str, dict[str, Any]]:
    """Events of type ``kind`` (of task ``name``) by task id."""
    return {
        e["uuid"]: e for e in events if e["type"] == kind and (not name or e.get("name") == name)
    }


def _nudges_after(events: list[dict[str, Any]], build_id: str) -> list[dict[str, Any]]:
    """The pipeline nudges a build sent when it ended (not the delayed ones of its start)."""
    received = _of(events, "task-received", task_names.PROCESS_PIPELINE).values()
    return [e for e in received if e["parent_id"] == build_id and not e["eta"]]


def _settled(events: list[dict[str, Any]], fast: bool) -> bool:
    """Three builds ran, and the nudges they sent ran too.

    Through Celery each build sends one. The fast way, a build that ends while
    a nudge of its pipeline waits to start sends none (scheduler/nudge/pending_marks.py):
    at least the first does.
    """
    succeeded = _of(events, "task-succeeded")
    builds = _of(events, "task-received", task_names.BUILD)
    if len(builds) != 3 or not all(build_id in succeeded for build_id in builds):
        return False
    nudges = {b: _nudges_after(events, b) for b in builds}
    if not all(n["uuid"] in succeeded for sent in nudges.values() for n in sent):
        return False
    return any(nudges.values()) if fast else all(nudges.values())


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "through-celery"])
def test_sends_from_inside_tasks_reach_workers_with_label_and_parent(
    system: SluiceSystem, fast: bool
) -> None:
    prepare_check(system)
    with task_events(system.workers.app) as events:
        # the receiver listens before any task is sent: it hears the worker come up
        system.start_worker(env={} if fast else {"SLUICE_FAST_SEND": "0"})
        wait_until(
            lambda: any(e["type"].startswith("worker-") for e in events),
            30,
            "the event receiver to hear the worker",
        )
        system.sluice("reconfigure")
        system.enqueue("feature")
        system.sluice("wait", "--idle", "--timeout", "90")
        wait_until(lambda: _settled(list(events), fast), 30, "three builds and their nudges to run")
        snapshot = list(events)

    received = _of(snapshot, "task-received")
    sent = _of(snapshot, "task-sent")
    builds = _of(snapshot, "task-received", task_names.BUILD)
    jobs = set()
    for build_id, build in builds.items():
        # sent from inside the scheduler's pipeline task, which a worker ran
        parent = received[build["parent_id"]]
        assert parent["name"] == task_names.PROCESS_PIPELINE
        assert build["root_id"] == (parent["root_id"] or parent["uuid"])
        # the label is what Flower shows as the task's arguments
        words = set(build["args"].split())
        assert {"tenant=demo", "pipeline=check", "project=app", "attempt=1"} <= words
        jobs |= {w for w in words if w.startswith("job=")}
        assert (build_id in sent) is not fast
        # the executor's nudge, sent from inside the build when it ended
        for nudge in _nudges_after(snapshot, build_id):
            assert nudge["args"] == "tenant=demo pipeline=check"
            assert nudge["root_id"] == build["root_id"]
            assert (nudge["uuid"] in sent) is not fast
    assert jobs == {"job=lint", "job=unit", "job=experimental"}

    # the fast way leaves only what Celery alone can send (a delayed nudge) to publish task-sent
    sent_by_tasks = [e for e in sent.values() if e["parent_id"]]
    if fast:
        assert all(e["eta"] for e in sent_by_tasks), sent_by_tasks
    else:
        assert len([e for e in sent_by_tasks if not e["eta"]]) >= 6
