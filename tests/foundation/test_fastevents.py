"""Task events published the fast way (tasks/fastevents.py): a real Redis, kombu reading them.

Each test listens on the broker itself (``PSUBSCRIBE`` on the events'
channels) and compares what the fast dispatcher publishes with what
Celery's own dispatcher publishes for the same event. That Flower's kind of
reader (Celery's ``EventReceiver``) gets every task event from real workers
publishing this way is in ``tests/e2e/test_fast_send.py``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from celery import Celery
from celery.events.dispatcher import EventDispatcher

from scheduler.nudge import kept_connection


def _app(url: str, *, fast: bool, **conf: Any) -> Celery:
    app = Celery("fastevents-test", broker=url, events="tasks.fastevents:FastEvents")
    app.conf.update({kept_connection.SETTING: fast, **conf})
    return app


class Listener:
    """Every message published on the broker's event channels, as (channel, envelope)."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.pubsub = self.client.pubsub()
        self.pubsub.psubscribe("/*")
        self.pubsub.get_message(timeout=5)  # the subscription's confirmation

    def take(self) -> tuple[str, dict[str, Any]]:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            found = self.pubsub.get_message(timeout=1)
            if found is not None and found["type"] == "pmessage":
                return found["channel"].decode(), json.loads(found["data"])
        raise AssertionError("nothing was published")

    def close(self) -> None:
        self.pubsub.close()
        self.client.close()


@pytest.fixture
def listener(redis_url: str) -> Iterator[Listener]:
    found = Listener(redis_url)
    yield found
    found.close()


def _publish(app: Celery, event: Any, routing_key: str) -> None:
    with app.connection_for_write() as connection:
        dispatcher = app.events.Dispatcher(connection, hostname="test@host")
        try:
            dispatcher._publish(event, dispatcher.producer, routing_key)
        finally:
            dispatcher.close()


def _plain(envelope: dict[str, Any]) -> dict[str, Any]:
    """The envelope without its random delivery tag, the body decoded."""
    envelope["properties"].pop("delivery_tag")
    return envelope


EVENT = {
    "hostname": "test@host",
    "uuid": "4f8e-task",
    "name": "sluice.scheduler.process_pipeline",
    "args": "tenant=demo pipeline=check",
    "kwargs": "{}",
    "root_id": None,
    "parent_id": None,
    "timestamp": 1795789184.43,
    "type": "task-received",
}


@pytest.mark.parametrize(
    ("event", "routing_key"),
    [(EVENT, "task.received"), ([EVENT, {**EVENT, "type": "task-started"}], "task.multi")],
    ids=["one", "multi"],
)
def test_the_fast_way_publishes_what_kombu_publishes(
    redis_url: str, listener: Listener, event: Any, routing_key: str
) -> None:
    assert issubclass(_app(redis_url, fast=True).events.Dispatcher, EventDispatcher)
    _publish(_app(redis_url, fast=True), event, routing_key)
    ours = listener.take()
    _publish(_app(redis_url, fast=False), event, routing_key)
    kombus = listener.take()
    assert ours[0] == kombus[0] == f"/0.celeryev/{routing_key}"
    assert _plain(ours[1]) == _plain(kombus[1])


def test_celerys_receiver_reads_an_event_sent_the_fast_way(redis_url: str) -> None:
    app = _app(redis_url, fast=True)
    seen: list[dict[str, Any]] = []
    sent: list[str] = []
    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(connection, handlers={"*": seen.append})
        thread = threading.Thread(target=receiver.capture, kwargs={"wakeup": False}, daemon=True)
        thread.start()
        with app.connection_for_write() as out:
            dispatcher = app.events.Dispatcher(out, hostname="test@host")
            try:  # sent until the receiver, subscribing on its thread, hears one
                while not seen and len(sent) < 50:
                    sent.append(str(uuid.uuid4()))
                    dispatcher.send("task-received", uuid=sent[-1], name="sluice.executor.build")
                    time.sleep(0.1)
            finally:
                dispatcher.close()
                receiver.should_stop = True
                thread.join(timeout=10)
    assert seen, "Celery's receiver heard nothing"
    assert (seen[0]["type"], seen[0]["name"], seen[0]["hostname"]) == (
        "task-received",
        "sluice.executor.build",
        "test@host",
    )
    assert seen[0]["uuid"] in sent


class Published:
    """How many events went the fast way (``Pusher.publish``, then Redis as usual)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = kept_connection.Pusher.publish

        def counted(pusher: kept_connection.Pusher, channel: str, message: bytes) -> bool:
            self.calls += 1
            return original(pusher, channel, message)

        monkeypatch.setattr(kept_connection.Pusher, "publish", counted)


@pytest.mark.parametrize(
    ("conf", "event", "fast"),
    [
        ({}, EVENT, True),
        ({}, {**EVENT, "eta": datetime(2026, 1, 1, tzinfo=UTC)}, False),  # kombu's JSON knows it
        ({"event_serializer": "pickle", "accept_content": ["json", "pickle"]}, EVENT, False),
        ({"broker_transport_options": {"fanout_patterns": False}}, EVENT, False),
    ],
    ids=["plain", "beyond-json", "other-serializer", "other-channels"],
)
def test_kombu_publishes_what_the_fast_way_cannot(  # noqa: PLR0917 (fixtures and parameters)
    redis_url: str,
    listener: Listener,
    monkeypatch: pytest.MonkeyPatch,
    conf: dict[str, Any],
    event: dict[str, Any],
    fast: bool,
) -> None:
    published = Published(monkeypatch)
    _publish(_app(redis_url, fast=True, **conf), event, "task.received")
    listener.take()  # published either way
    assert published.calls == (1 if fast else 0)


def test_fast_send_off_leaves_every_event_to_kombu(
    redis_url: str, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    published = Published(monkeypatch)
    _publish(_app(redis_url, fast=False), EVENT, "task.received")
    listener.take()
    assert published.calls == 0
