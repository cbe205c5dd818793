"""What the workers publish to Redis, read as a test listens: result states and task events.

The result backend publishes every state it stores on the result key's
channel, and task events go out on the ``celeryev`` fanout channels. A
build task stores no result of its own (``ignore_result``, tasks/executor.py):
its outcome is read here from its ``task-succeeded`` event, as Flower reads it.
"""

from __future__ import annotations

import ast
import base64
import json
from collections import defaultdict
from typing import Any

import redis

from tests.fixtures.waiting import wait_until

META_PREFIX = "celery-task-meta-"


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

    def outcome(self, task_id: str) -> dict[str, Any]:
        """The task's return value, from its ``task-succeeded`` event (a repr, read back)."""
        value = ast.literal_eval(self.succeeded(task_id)["result"])
        assert isinstance(value, dict), value
        return value


def _events(data: bytes) -> list[dict[str, Any]]:
    """Celery events out of kombu's Redis fanout envelope (a worker sends them in groups)."""
    envelope = json.loads(data)
    body = envelope["body"]
    if envelope["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body)
    events = json.loads(body)
    return list(events) if isinstance(events, list) else [events]
