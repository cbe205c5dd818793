"""Task-level retry, as an operator does it: ``sluice retry`` and Flower's async-apply.

Both are safe by construction: a finished build retried finds its request
completed and does nothing visible; a nudge lost before any worker ran it
(the broker purged) does its work when retried.
"""

from __future__ import annotations

from typing import Any

import redis

from scheduler.nudge import task_names
from tests.e2e.flower import get, post
from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check
from tests.fixtures.waiting import wait_until


def _tasks(flower: str, name: str) -> list[dict[str, Any]]:
    found: dict[str, dict[str, Any]] = get(f"{flower}/api/tasks")
    return [t for t in found.values() if t["name"] == name]


def _task(flower: str, task_id: str) -> dict[str, Any]:
    def known() -> bool:
        try:
            return get(f"{flower}/api/task/info/{task_id}")["state"] in ("SUCCESS", "FAILURE")
        except OSError:
            return False

    wait_until(known, 60, f"task {task_id} done in Flower", interval=0.2)
    info: dict[str, Any] = get(f"{flower}/api/task/info/{task_id}")
    return info


def test_retrying_finished_builds_does_nothing_visible(system: SluiceSystem, flower: str) -> None:
    prepare_check(system)
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")
    wait_until(
        lambda: len(_tasks(flower, task_names.BUILD)) == 3, 30, "Flower saw 3 builds", interval=0.2
    )
    lint = next(t for t in _tasks(flower, task_names.BUILD) if "job=lint" in t["args"])

    # a build that ended well within half a second left nothing in the result
    # backend (tasks/executor.py): Flower knows it. On a loaded host the build
    # may take longer and its result is kept: the retry is sent all the same
    code, out = system.sluice_result("retry", lint["uuid"])
    if code == 0:
        assert "re-sent sluice.executor.build" in out, out
    else:
        assert code == 1 and "unknown to the result backend" in out and "--flower" in out
    out = system.sluice("retry", "--flower", flower, lint["uuid"])
    assert "re-sent sluice.executor.build" in out and "found in Flower" in out
    again = _task(flower, out.split()[-1])
    assert "duplicate" in again["result"], again

    # Flower's own async-apply of the same task name and arguments: the same
    request = lint["args"].split("request=")[1].split()[0]
    sent = post(f"{flower}/api/task/async-apply/{task_names.BUILD}", {"args": [request]})
    assert "duplicate" in _task(flower, sent["task-id"])["result"]

    assert len(system.builds()) == 3  # nothing ran twice
    (buildset,) = system.buildsets()
    assert buildset["result"] == "SUCCESS"


def test_retrying_a_purged_nudge_does_the_work(system: SluiceSystem, flower: str) -> None:
    prepare_check(system)
    # no executor, no sweep timer; the scheduler sends through Celery, whose
    # task-sent event tells Flower of a build before any worker received it
    # (sent the fast way, a purged nudge is known to nobody: the sweep sends it again)
    system.start_worker(("scheduler", "merger"), env={"SLUICE_FAST_SEND": "0"})
    system.sluice("reconfigure")
    system.enqueue("feature")
    broker = redis.Redis.from_url(system.environment.redis_url)

    def nudged() -> bool:
        return int(broker.llen("executor")) == 2  # lint and experimental

    wait_until(nudged, 60, "two build nudges in the executor queue", interval=0.2)
    broker.delete("executor")  # an operator purged the queue: the nudges are lost
    system.start_worker(("executor",))
    lost = _tasks(flower, task_names.BUILD)
    assert len(lost) == 2 and all(t["state"] != "SUCCESS" for t in lost)

    # never ran, so only Flower knows them; the label names the request
    out = system.sluice_result("retry", lost[0]["uuid"])[1]
    assert "unknown to the result backend" in out and "--flower" in out
    for task in lost:
        out = system.sluice("retry", "--flower", flower, task["uuid"])
        assert "found in Flower" in out
    system.sluice("wait", "--idle", "--timeout", "90")
    results = {b["job"]: b["result"] for b in system.builds()}
    assert results == {"lint": "SUCCESS", "unit": "SUCCESS", "experimental": "FAILURE"}
    broker.close()


def test_an_unknown_task_is_a_clear_error(system: SluiceSystem) -> None:
    prepare_check(system)
    code, out = system.sluice_result("retry", "no-such-task")
    assert code == 1 and "task no-such-task is unknown" in out


def test_a_hop_stores_no_result_unless_it_fails(system: SluiceSystem) -> None:
    """The scheduler's hops are not in the result backend when they succeed; a failed one
    is (``task_store_errors_even_if_ignored``), so ``sluice retry`` finds it."""
    prepare_check(system)
    system.start_worker(("scheduler",), concurrency=1)
    app = system.workers.app
    passed = app.send_task(task_names.PROCESS_TENANT, args=["no-events"], queue="scheduler")
    failed = app.send_task(task_names.PROCESS_TENANT, args=[""], queue="scheduler")  # refused

    def stored() -> bool:
        return app.AsyncResult(failed.id).state == "FAILURE"

    wait_until(stored, 60, "the failed hop stored", interval=0.2)
    assert "must be a non-empty name" in str(app.AsyncResult(failed.id).result)
    out = system.sluice("retry", failed.id)
    assert "found in the result backend" in out
    # the hop that passed ran (one worker process, in order) and left nothing
    assert app.AsyncResult(passed.id).state == "PENDING"
