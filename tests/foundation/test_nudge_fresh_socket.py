"""The quick nudge: a Celery message pushed to Redis without Celery, read by Celery."""

from __future__ import annotations

import socket
from dataclasses import replace

import pytest
from celery import Celery

from scheduler.nudge import dispatch, envelope, fresh_socket, task_names
from scheduler.nudge.envelope import RedisTarget, redis_target
from scheduler.settings.load import load_settings


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6380/2", RedisTarget("127.0.0.1", 6380, 2, None, None)),
        ("redis://localhost", RedisTarget("localhost", 6379, 0, None, None)),
        ("redis://:s%40cret@h:1/0", RedisTarget("h", 1, 0, None, "s@cret")),
        ("redis://user:pw@h/3", RedisTarget("h", 6379, 3, "user", "pw")),
    ],
)
def test_plain_redis_urls_are_understood(url: str, expected: RedisTarget) -> None:
    assert redis_target(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "amqp://guest@localhost//",
        "rediss://h:6380/0",
        "redis://h:6379/0?ssl_cert_reqs=none",
        "sentinel://h:26379",
        "redis://h:6379/name",
        "redis://h:notaport/0",
        "redis+socket:///tmp/redis.sock",
    ],
)
def test_anything_else_is_left_to_celery(url: str) -> None:
    assert redis_target(url) is None
    assert fresh_socket.send(url, task_names.PROCESS_TENANT, ["t"], "scheduler") is None


def test_an_unreachable_broker_is_left_to_celery() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    assert fresh_socket.send(url, task_names.PROCESS_TENANT, ["t"], "scheduler") is None


def _consumer(redis_url: str) -> Celery:
    app = Celery("quicksend-test", set_as_current=False)
    app.conf.update(broker_url=redis_url)
    return app


def test_celery_reads_the_message_as_its_own(redis_url: str) -> None:
    queue = "quicksend-test"
    task_id = fresh_socket.send(redis_url, task_names.PROCESS_PIPELINE, ["demo", "check"], queue)
    assert task_id is not None
    app = _consumer(redis_url)
    with app.connection_for_read() as connection:
        message = connection.SimpleQueue(queue).get(timeout=5)
        try:
            assert message.headers["task"] == task_names.PROCESS_PIPELINE
            assert message.headers["id"] == task_id
            args, kwargs, _embed = message.decode()
            assert (args, kwargs) == (["demo", "check"], {})
            assert message.delivery_info["routing_key"] == queue
        finally:
            message.ack()


@pytest.mark.parametrize("quick", [True, False])
def test_send_quickly_routes_by_task_name_with_or_without_celery(
    redis_url: str, quick: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not quick:  # as for a broker the quick path does not handle: Celery sends it
        monkeypatch.setattr(envelope, "redis_target", lambda url: None)
    settings = replace(load_settings(), broker_url=redis_url)
    task_id = dispatch.send_quickly(task_names.MERGE, "uuid-1", settings=settings)
    app = _consumer(redis_url)
    with app.connection_for_read() as connection:
        message = connection.SimpleQueue("merger").get(timeout=5)
        try:
            assert message.headers["id"] == task_id
            assert message.headers["task"] == task_names.MERGE
            assert message.decode()[0] == ["uuid-1"]
        finally:
            message.ack()
