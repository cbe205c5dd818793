"""A build's PROGRESS, as a real worker publishes it: only for a build that outlasts the delay.

The test listens to what the worker writes to Redis: the result backend
publishes every state it stores on the result key's channel, and task
events go out on the ``celeryev`` fanout channels. A build whose whole
task (``runtime`` of its ``task-succeeded`` event, measured by the worker)
took less than :data:`~workers.notify.PROGRESS_DELAY` cannot have reached
the delay after its claim: it must go from STARTED straight to SUCCESS,
with no ``task-progress`` event. A longer build shows both (which also
proves the listening works).
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from scheduler.dispatch import executor_queue_name, send_build
from tests.executor.helpers import Repo, make_spec
from tests.executor_e2e.conftest import Builds
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import ServiceEnvironment, WorkerFactory
from workers.notify import PROGRESS_DELAY

META_PREFIX = "celery-task-meta-"
# attempts at a build that ends within the delay (a loaded machine may be slow)
SHORT_ATTEMPTS = 5


class Published:
    """Every result state and task event the workers publish, per task id."""

    def __init__(self, url: str) -> None:
        self.redis = redis.Redis.from_url(url)
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        self.pubsub.psubscribe(f"{META_PREFIX}*", "*celeryev/task.*")
        self.states: dict[str, list[str]] = defaultdict(list)
        self.events: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def read(self) -> None:
        while (message := self.pubsub.get_message(timeout=0.05)) is not None:
            channel = message["channel"].decode()
            if channel.startswith(META_PREFIX):
                meta = json.loads(message["data"])
                self.states[meta["task_id"]].append(meta["status"])
            else:
                for event in _events(message["data"]):
                    self.events[event["uuid"]].append(event)

    def event_types(self, task_id: str) -> list[str]:
        return [e["type"] for e in self.events[task_id]]

    def succeeded(self, task_id: str) -> dict[str, Any]:
        """The task's ``task-succeeded`` event, once seen (the last thing a task publishes)."""

        def seen() -> dict[str, Any]:
            self.read()
            return next((e for e in self.events[task_id] if e["type"] == "task-succeeded"), {})

        return wait_until(seen, 60, f"task {task_id} succeeded")

    def close(self) -> None:
        self.pubsub.close()
        self.redis.close()


def _events(data: bytes) -> list[dict[str, Any]]:
    """Celery events out of kombu's Redis fanout envelope (a worker sends them in groups)."""
    envelope = json.loads(data)
    body = envelope["body"]
    if envelope["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body)
    events = json.loads(body)
    return list(events) if isinstance(events, list) else [events]


@pytest.fixture
def published(test_environment: ServiceEnvironment) -> Iterator[Published]:
    listener = Published(test_environment.redis_url)
    yield listener
    listener.close()


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
        assert task.get(timeout=60)["result"] == "SUCCESS"
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

    # the short build: straight to its result, no PROGRESS written, no event
    assert published.states[fast[0]] == ["STARTED", "SUCCESS"]
    assert "task-progress" not in published.event_types(fast[0])
    # the long one: PROGRESS from the delay on, the result last
    states = published.states[long]
    assert states[0] == "STARTED" and states[-1] == "SUCCESS" and "PROGRESS" in states
    assert set(states[1:-1]) == {"PROGRESS"}
    progress = [e for e in published.events[long] if e["type"] == "task-progress"]
    assert progress and progress[-1]["phase"] == "run"
    assert all(e["job"] == "unit-tests" for e in progress)
    types = published.event_types(long)
    assert types.index("task-succeeded") > max(
        i for i, t in enumerate(types) if t == "task-progress"
    )
    # and the backend keeps the results: no late PROGRESS overwrote them
    for task_id in (fast[0], long):
        raw = published.redis.get(f"{META_PREFIX}{task_id}")
        assert raw is not None and json.loads(raw)["status"] == "SUCCESS"
