"""A build's PROGRESS, as a real worker publishes it: only for a build that outlasts the delay.

The test listens to what the worker writes to Redis (:mod:`tests.fixtures.published`).
A build whose whole task (``runtime`` of its ``task-succeeded`` event,
measured by the worker) took less than :data:`~workers.notify.PROGRESS_DELAY`
cannot have reached the delay after its claim: it stores nothing in the
result backend (the build task ignores its result) and sends no
``task-progress`` event. A longer build stores its PROGRESS states and then
its result over them (which also proves the listening works).
"""

from __future__ import annotations

import json

from scheduler.nudge.dispatch import send_build
from scheduler.nudge.task_names import executor_queue_name
from tests.executor.helpers import Repo, make_spec
from tests.executor_e2e.conftest import Builds
from tests.fixtures.published import META_PREFIX, Published
from tests.fixtures.workers import WorkerFactory
from workers.notify import PROGRESS_DELAY

# attempts at a build that ends within the delay (a loaded machine may be slow)
SHORT_ATTEMPTS = 5


def test_only_a_build_that_outlasts_the_delay_shows_progress(
    celery_workers: WorkerFactory, builds: Builds, repo: Repo, published: Published
) -> None:
    repo.script("run.sh", 'if [ -e slow ]; then sleep 1.5; fi\necho "ran"')
    short = repo.commit()
    repo.write("slow", "")
    slow = repo.commit("slow")
    celery_workers.start([executor_queue_name()])

    def run(commit: str) -> str:
        request = builds.submit(make_spec(repo, commit))
        task = send_build(request.uuid, settings=builds.settings)
        assert published.outcome(str(task.id))["result"] == "SUCCESS"
        return str(task.id)

    run(short)  # the worker process's first build imports what builds need
    fast: list[str] = []
    for _ in range(SHORT_ATTEMPTS):
        task_id = run(short)
        if published.succeeded(task_id)["runtime"] < PROGRESS_DELAY:
            fast.append(task_id)
            break
    assert fast, f"no build ended within {PROGRESS_DELAY}s in {SHORT_ATTEMPTS} attempts"
    long = run(slow)
    assert published.succeeded(long)["runtime"] > PROGRESS_DELAY

    # the short build: nothing stored in the result backend, no PROGRESS event
    assert published.states[fast[0]] == []
    assert "task-progress" not in published.event_types(fast[0])
    assert published.redis.get(f"{META_PREFIX}{fast[0]}") is None
    # the long one: PROGRESS from the delay on, the result stored over it last
    states = published.states[long]
    assert states[-1] == "SUCCESS" and set(states[:-1]) == {"PROGRESS"}, states
    progress = [e for e in published.events[long] if e["type"] == "task-progress"]
    assert progress and progress[-1]["phase"] == "run"
    assert all(e["job"] == "unit-tests" for e in progress)
    types = published.event_types(long)
    assert types.index("task-succeeded") > max(
        i for i, t in enumerate(types) if t == "task-progress"
    )
    # and the backend keeps the long build's result: no late PROGRESS overwrote it
    raw = published.redis.get(f"{META_PREFIX}{long}")
    assert raw is not None and json.loads(raw)["status"] == "SUCCESS"
    assert json.loads(raw)["result"]["outcome"] == "completed"
