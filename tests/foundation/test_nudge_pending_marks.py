"""One waiting nudge per pipeline (scheduler/nudge/pending_marks.py), with a real Redis.

What is sent shows in the broker's own queue: ``notify_pipeline`` pushes a
``process_pipeline`` message onto the ``scheduler`` list, or does not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis

from cli.stack.process import free_port
from scheduler.nudge import dispatch, kept_connection, pending_marks
from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings
from scheduler.stores.job_requests import JobRequest
from scheduler.zk import paths

QUEUE = "scheduler"


def _settings(broker_url: str, *, fast: bool = True) -> Settings:
    settings = load_settings(environ={})
    return replace(settings, broker_url=broker_url, broker=replace(settings.broker, fast_send=fast))


def _result(tenant: str = "demo", pipeline: str = "check") -> JobRequest:
    """A request whose result was just committed: what a build or merge notifies about."""
    return JobRequest(
        uuid="r1",
        tenant=tenant,
        pipeline=pipeline,
        result_queue=paths.pipeline_result_queue(tenant, pipeline),
    )


@pytest.fixture
def broker(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.delete(QUEUE)
    for key in client.scan_iter(f"{pending_marks.PREFIX}*"):
        client.delete(key)
    yield client
    client.close()


def test_a_result_is_not_nudged_again_while_a_nudge_waits(
    broker: redis.Redis, redis_url: str
) -> None:
    settings = _settings(redis_url)
    for _ in range(5):  # five builds end before the first nudge starts
        dispatch.notify_pipeline(_result(), settings)
    assert broker.llen(QUEUE) == 1

    pending_marks.started(settings, "demo", "check")  # the waiting nudge starts its pass
    dispatch.notify_pipeline(_result(), settings)  # a result after the pass began
    assert broker.llen(QUEUE) == 2


def test_each_pipeline_has_its_own_mark(broker: redis.Redis, redis_url: str) -> None:
    settings = _settings(redis_url)
    for tenant, pipeline in [("demo", "check"), ("demo", "gate"), ("other", "check")]:
        dispatch.notify_pipeline(_result(tenant, pipeline), settings)
    assert broker.llen(QUEUE) == 3
    keys = {key.decode() for key in broker.scan_iter(f"{pending_marks.PREFIX}*")}
    assert keys == {
        pending_marks.mark_key("demo", "check"),
        pending_marks.mark_key("demo", "gate"),
        pending_marks.mark_key("other", "check"),
    }


def test_a_mark_whose_nudge_never_started_expires(
    broker: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A nudge lost after its mark was set holds the next ones back for the time to live only."""
    monkeypatch.setattr(pending_marks, "TTL_MS", 300)
    settings = _settings(redis_url)
    dispatch.notify_pipeline(_result(), settings)
    broker.delete(QUEUE)  # the nudge is lost (an operator purged the queue)
    dispatch.notify_pipeline(_result(), settings)
    assert broker.llen(QUEUE) == 0  # held back: the lost one's mark is still there
    time.sleep(0.4)
    dispatch.notify_pipeline(_result(), settings)
    assert broker.llen(QUEUE) == 1


def test_a_delayed_start_nudge_is_sent_whatever_the_mark(
    broker: redis.Redis, redis_url: str
) -> None:
    settings = _settings(redis_url)
    dispatch.notify_pipeline(_result(), settings)
    dispatch.notify_pipeline(_result(), settings, delay=1.0)  # through Celery, with a countdown
    assert broker.llen(QUEUE) == 2


def test_without_the_fast_way_every_result_nudges(broker: redis.Redis, redis_url: str) -> None:
    settings = _settings(redis_url, fast=False)
    for _ in range(3):
        dispatch.notify_pipeline(_result(), settings)
    assert broker.llen(QUEUE) == 3
    assert list(broker.scan_iter(f"{pending_marks.PREFIX}*")) == []


def test_a_scheduler_without_the_fast_way_still_deletes_the_marks(
    broker: redis.Redis, redis_url: str
) -> None:
    """Executors that mark, a scheduler with ``broker.fast_send: false``: no mark stays."""
    dispatch.notify_pipeline(_result(), _settings(redis_url))
    assert broker.exists(pending_marks.mark_key("demo", "check"))
    pending_marks.started(_settings(redis_url, fast=False), "demo", "check")
    assert not broker.exists(pending_marks.mark_key("demo", "check"))


def test_a_mark_that_cannot_be_set_sends_the_nudge() -> None:
    """Redis away: the nudge goes through Celery (whose own send then fails loudly)."""
    settings = _settings(f"redis://127.0.0.1:{free_port()}/0")
    assert pending_marks.should_send(settings, "demo", "check")
    # the process's fast way pauses, as after a failed push: the next results
    # do not try Redis again, each one, for its connect timeout
    assert not kept_connection.pusher(settings.broker_url).ready
    assert pending_marks.should_send(settings, "demo", "check")
    pending_marks.started(settings, "demo", "check")  # logged, not raised
