"""The one retry policy of the ZooKeeper layer, and the Celery one of the tasks."""

from __future__ import annotations

import time

import pytest

from scheduler.nudge import task_names
from scheduler.zk import retry
from scheduler.zk.errors import LockLostError, ZooKeeperUnavailableError
from scheduler.zk.retry import RetryPolicy


def test_tries_are_bounded_and_back_off() -> None:
    policy = RetryPolicy(max_tries=4, delay=0.01, backoff=2.0, max_delay=0.02)
    started = time.monotonic()
    assert list(policy.tries()) == [1, 2, 3, 4]
    # waits 0.01 + 0.02 + 0.02 (capped)
    assert 0.045 <= time.monotonic() - started < 1.0
    assert list(
        RetryPolicy(max_tries=4, delay=0.01, max_delay=0.02).waits().__next__() for _ in [0]
    )


def test_deadline_ends_tries_with_one_last_try_at_the_deadline() -> None:
    policy = RetryPolicy(max_tries=None, delay=0.05, backoff=1.0, max_delay=0.05, deadline=0.12)
    started = time.monotonic()
    count = len(list(policy.tries()))
    elapsed = time.monotonic() - started
    assert 3 <= count <= 4
    assert elapsed < 0.5


def test_call_retries_named_errors_and_reraises_the_last() -> None:
    calls: list[int] = []
    retried: list[tuple[int, str]] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ZooKeeperUnavailableError(f"down {len(calls)}")
        return "up"

    policy = RetryPolicy(max_tries=5, retry_on=(ZooKeeperUnavailableError,))
    assert policy(flaky, on_retry=lambda n, exc: retried.append((n, str(exc)))) == "up"
    assert retried == [(1, "down 1"), (2, "down 2")]

    def always_down() -> str:
        raise ZooKeeperUnavailableError("still down")

    with pytest.raises(ZooKeeperUnavailableError, match="still down"):
        RetryPolicy(max_tries=3, retry_on=(ZooKeeperUnavailableError,))(always_down)
    with pytest.raises(ZooKeeperUnavailableError, match="still down"):
        RetryPolicy(
            max_tries=None, deadline=0.05, delay=0.01, retry_on=(ZooKeeperUnavailableError,)
        )(always_down)


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("bad input")

    with pytest.raises(ValueError):
        retry.OUTAGE(broken)
    assert calls == [1]


def test_a_policy_needs_an_end() -> None:
    with pytest.raises(ValueError, match="max_tries or a deadline"):
        RetryPolicy(max_tries=None)
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(max_tries=0)


def test_jitter_spreads_waits_within_the_cap() -> None:
    policy = RetryPolicy(delay=0.1, backoff=1.0, max_delay=0.15, jitter=0.5)
    waits = [w for w, _ in zip(policy.waits(), range(50), strict=False)]
    assert all(0.1 <= w <= 0.15 for w in waits)
    assert len(set(waits)) > 1


def test_every_task_retries_through_celery_on_transient_errors_only() -> None:
    import tasks  # noqa: F401  (registers every task)
    from tasks.app import app
    from tasks.retrying import TRANSIENT

    for name in (
        task_names.FORWARD_CONNECTION_EVENTS,
        task_names.PROCESS_TENANT,
        task_names.PROCESS_PIPELINE,
        task_names.MERGE,
        task_names.RECONFIGURE,
        task_names.BUILD,
    ):
        task = app.tasks[name]
        assert task.autoretry_for == TRANSIENT, name
        assert task.retry_backoff and task.retry_jitter, name
        assert task.max_retries and task.max_retries >= 5, name
    assert ZooKeeperUnavailableError in TRANSIENT and LockLostError in TRANSIENT
