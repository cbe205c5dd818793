"""The fast send of long-lived processes: a real Redis, real Celery reading what it wrote.

Which way a send went shows in Redis itself: Celery's way publishes a
``task-sent`` event (a ``PUBLISH`` on the events' fanout), the fast way
does not. Sends from inside a running task, read by real workers, are in
``tests/e2e/test_fast_send.py``.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.result import AsyncResult

from cli.stack.process import free_port
from cli.stack.redis import RedisServer
from scheduler.errors import SettingsError
from scheduler.nudge import dispatch, kept_connection, task_names
from scheduler.settings.exposure import BrokerError
from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings

QUEUE = "fastsend-test"


def _settings(broker_url: str, *, fast: bool = True) -> Settings:
    settings = load_settings(environ={})
    return replace(settings, broker_url=broker_url, broker=replace(settings.broker, fast_send=fast))


class Broker:
    """The test's Redis as a sender sees it: queued messages and published events."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url)
        self.client.config_resetstat()

    def publishes(self) -> int:
        """``PUBLISH`` commands so far: one ``task-sent`` event per send through Celery."""
        stats: dict[str, dict[str, int]] = self.client.info("commandstats")
        return stats.get("cmdstat_publish", {}).get("calls", 0)

    def take(self, queue: str = QUEUE) -> dict[str, Any]:
        """The oldest message of ``queue``, read with Celery (kombu decodes it)."""
        app = dispatch.client_app(_settings(self.url))
        with app.connection_for_read() as connection:
            message = connection.SimpleQueue(queue).get(timeout=5)
            try:
                args, kwargs, embed = message.decode()
                return {
                    "headers": message.headers,
                    "args": args,
                    "kwargs": kwargs,
                    "embed": embed,
                    "routing_key": message.delivery_info["routing_key"],
                    "properties": message.properties,
                }
            finally:
                message.ack()


@pytest.fixture
def broker(redis_url: str) -> Iterator[Broker]:
    found = Broker(redis_url)
    yield found
    found.client.close()


def test_a_plain_send_goes_the_fast_way_and_reads_as_celerys_own(broker: Broker) -> None:
    label = "tenant=demo pipeline=check"
    fast = dispatch.send(
        task_names.PROCESS_PIPELINE,
        "demo",
        "check",
        settings=_settings(broker.url),
        label=label,
        queue=QUEUE,
        kwargs={"if_results": True},
    )
    assert broker.publishes() == 0  # no task-sent event
    assert isinstance(fast, AsyncResult) and fast.app is dispatch.client_app(_settings(broker.url))
    ours = broker.take()
    celerys_result = dispatch.send(
        task_names.PROCESS_PIPELINE,
        "demo",
        "check",
        settings=_settings(broker.url, fast=False),
        label=label,
        queue=QUEUE,
        kwargs={"if_results": True},
    )
    assert broker.publishes() == 1
    celerys = broker.take()

    assert ours["headers"]["id"] == fast.id
    assert ours["headers"]["root_id"] == fast.id and ours["headers"]["parent_id"] is None
    assert ours["headers"]["argsrepr"] == label
    for side, result in ((ours, fast), (celerys, celerys_result)):
        for ids in ("id", "root_id"):
            assert side["headers"].pop(ids) == result.id
        assert side["properties"].pop("correlation_id") == result.id
        side["properties"].pop("delivery_tag")
        # kombu copies send_task's argsrepr option into the properties too; nobody reads it
        side["properties"].pop("argsrepr", None)
    assert ours == celerys
    assert (ours["args"], ours["kwargs"]) == (["demo", "check"], {"if_results": True})


def test_without_a_queue_the_fast_way_routes_as_celery_does(redis_url: str) -> None:
    app = dispatch.client_app(_settings(redis_url))
    names = [v for k, v in vars(task_names).items() if k.isupper() and isinstance(v, str)]
    assert task_names.MERGE in names and task_names.BUILD in names
    for name in [*names, "sluice.nowhere.task"]:
        route = app.amqp.router.route({}, name)
        assert route["queue"].name == task_names.queue_of(name), name


def test_builds_and_merges_go_the_fast_way(broker: Broker) -> None:
    settings = _settings(broker.url)
    build = dispatch.send_build("uuid-b", "zone-1", settings=settings, label="a build")
    merge = dispatch.send_merge("uuid-m", settings=settings)
    assert broker.publishes() == 0
    sent = broker.take("executor.zone-1")
    assert sent["headers"]["id"] == build.id
    assert (sent["args"], sent["kwargs"]) == (["uuid-b"], {"zone": "zone-1"})
    assert sent["headers"]["argsrepr"] == "a build"
    sent = broker.take("merger")
    assert (sent["headers"]["id"], sent["args"]) == (merge.id, ["uuid-m"])
    assert sent["headers"]["argsrepr"] == "request=uuid-m"


@pytest.mark.parametrize(
    ("options", "shows"),
    [
        ({"countdown": 30}, lambda h: h["eta"] is not None),
        ({"expires": 60}, lambda h: h["expires"] is not None),
        ({"headers": {"x-trace": "t1"}}, lambda h: h["x-trace"] == "t1"),
        ({"priority": 0}, lambda h: True),
        ({"queue": QUEUE, "retry": False}, lambda h: True),
    ],
)
def test_what_only_celery_honours_goes_through_celery(
    broker: Broker, options: dict[str, Any], shows: Any
) -> None:
    options.setdefault("queue", QUEUE)
    result = dispatch.send(
        task_names.PROCESS_TENANT, "demo", settings=_settings(broker.url), **options
    )
    assert broker.publishes() == 1  # Celery's task-sent event
    sent = broker.take()
    assert sent["headers"]["id"] == result.id
    assert shows(sent["headers"])


def test_arguments_beyond_plain_json_are_left_to_kombus_encoder(broker: Broker) -> None:
    request = uuid.uuid4()
    result = dispatch.send(
        task_names.MERGE, request, settings=_settings(broker.url), label="l", queue=QUEUE
    )
    assert broker.publishes() == 1
    sent = broker.take()
    assert (sent["headers"]["id"], sent["args"]) == (result.id, [request])


def test_fast_send_off_sends_everything_through_celery(broker: Broker) -> None:
    settings = _settings(broker.url, fast=False)
    dispatch.send(task_names.PROCESS_TENANT, "demo", settings=settings, queue=QUEUE)
    dispatch.send_merge("uuid-m", settings=settings)
    task_id = dispatch.send_quickly(task_names.PROCESS_TENANT, "demo", settings=settings)
    assert broker.publishes() == 3
    assert broker.take()["args"] == ["demo"]
    assert broker.take("merger")["args"] == ["uuid-m"]
    assert broker.take("scheduler")["headers"]["id"] == task_id


def test_a_refused_connection_goes_through_celery_then_the_fast_way_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    settings = _settings(url)
    caplog.set_level(logging.WARNING, logger=kept_connection.__name__)
    # nobody listens: the fast way fails, Celery fails too and says so as always
    with pytest.raises(BrokerError, match=f"broker redis://127.0.0.1:{port}/0: cannot connect"):
        dispatch.send(task_names.PROCESS_TENANT, "t0", settings=settings, queue=QUEUE)
    assert "sending through Celery for 30 s" in caplog.text
    pusher = kept_connection.pusher(url)
    assert not pusher.ready  # a broker that is down costs one failed attempt, not one a send

    server = RedisServer(data_dir=tmp_path / "redis", port=port)
    server.start()
    try:
        server.wait_ready()
        broker = Broker(url)
        # the pause still runs: Celery sends it, with its task-sent event
        first = dispatch.send(task_names.PROCESS_TENANT, "t1", settings=settings, queue=QUEUE)
        assert broker.publishes() == 1
        assert broker.take()["headers"]["id"] == first.id

        pusher.paused_until = 0.0  # the pause is over
        second = dispatch.send(task_names.PROCESS_TENANT, "t2", settings=settings, queue=QUEUE)
        assert broker.publishes() == 1
        assert broker.take()["headers"]["id"] == second.id

        # Redis restarts: the kept connection is dead, a fresh one is opened at once
        server.stop()
        server.start()
        server.wait_ready()
        broker = Broker(url)
        third = dispatch.send(task_names.PROCESS_TENANT, "t3", settings=settings, queue=QUEUE)
        assert broker.publishes() == 0 and pusher.ready
        assert broker.take()["headers"]["id"] == third.id
    finally:
        server.stop()


def test_a_refused_password_is_said_at_once(redis_with_password: RedisServer) -> None:
    url = f"redis://:wrong@127.0.0.1:{redis_with_password.port}/0"
    for _ in range(2):  # every time: no fallback, no pause
        with pytest.raises(BrokerError, match="authentication failed") as info:
            dispatch.send(task_names.PROCESS_TENANT, "t", settings=_settings(url))
        assert info.value.__cause__ is None  # the fast way said it, Celery was never asked
        assert kept_connection.pusher(url).ready


def test_a_forked_child_keeps_a_connection_of_its_own(broker: Broker) -> None:
    settings = _settings(broker.url)
    before = dispatch.send(task_names.PROCESS_TENANT, "parent", settings=settings, queue=QUEUE)
    parent = kept_connection.pusher(broker.url)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and never return into pytest
        code = 1
        try:
            os.close(read)
            child = kept_connection.pusher(broker.url)
            result = dispatch.send(
                task_names.PROCESS_TENANT, "child", settings=settings, queue=QUEUE
            )
            report = {
                "id": result.id,
                "own": child is not parent and child.client is not parent.client,
                "pid": os.getpid(),
            }
            os.write(write, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as stream:
        report = json.loads(stream.read() or "{}")
    assert os.waitpid(pid, 0)[1] == 0
    assert report["own"]
    after = dispatch.send(task_names.PROCESS_TENANT, "parent", settings=settings, queue=QUEUE)
    assert kept_connection.pusher(broker.url) is parent
    assert broker.publishes() == 0  # all three went the fast way
    sent = [broker.take() for _ in range(3)]
    assert [s["headers"]["id"] for s in sent] == [before.id, report["id"], after.id]
    assert sent[1]["headers"]["origin"].startswith(f"gen{report['pid']}@")
    assert sent[2]["headers"]["origin"].startswith(f"gen{os.getpid()}@")


@pytest.mark.parametrize(
    ("value", "expected"), [("0", False), ("false", False), ("1", True), ("yes", True)]
)
def test_sluice_fast_send_turns_it_off_and_on(value: str, expected: bool) -> None:
    settings = load_settings(environ={"SLUICE_FAST_SEND": value})
    assert settings.broker.fast_send is expected


def test_fast_send_is_a_broker_setting(tmp_path: Path) -> None:
    assert load_settings(environ={}).broker.fast_send is True
    config = tmp_path / "sluice.yaml"
    config.write_text("broker:\n  fast_send: false\n")
    assert load_settings(config, {}).broker.fast_send is False
    with pytest.raises(SettingsError, match="SLUICE_FAST_SEND: expected 1 or 0"):
        load_settings(environ={"SLUICE_FAST_SEND": "maybe"})
