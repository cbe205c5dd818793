"""A build's progress is published only once the build outlasts a delay (workers.notify).

:class:`~workers.notify.LaterProgress` with real timer threads; the
publication side (``tasks.executor._progress``) with its SQL estimate
counted: a short build asks SQL nothing.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from scheduler.settings.load import load_settings
from tasks import executor
from tests.fixtures.waiting import wait_until
from workers.notify import PROGRESS_DELAY, STARTED_NUDGE_DELAY, LaterProgress

DELAY = 0.3


class Published:
    """A progress hook that records what it was given, and from which thread."""

    def __init__(self) -> None:
        self.metas: list[Mapping[str, Any]] = []
        self.threads: list[str] = []

    def __call__(self, meta: Mapping[str, Any]) -> None:
        self.metas.append(meta)
        self.threads.append(threading.current_thread().name)


@pytest.fixture
def published() -> Published:
    return Published()


@pytest.fixture
def later(published: Published) -> Iterator[LaterProgress]:
    deferred = LaterProgress(published, DELAY, name="progress-test")
    yield deferred
    deferred.close()


def test_the_delay_is_half_a_second_before_the_start_nudge() -> None:
    assert PROGRESS_DELAY == 0.5 and PROGRESS_DELAY < STARTED_NUDGE_DELAY


def test_nothing_is_published_before_the_delay(later: LaterProgress, published: Published) -> None:
    began = time.monotonic()
    later({"phase": "started"})
    later({"phase": "run"})
    assert published.metas == []
    assert time.monotonic() - began < DELAY  # (the check ran before the delay passed)


def test_the_latest_meta_is_published_when_the_delay_passes_then_each_directly(
    later: LaterProgress, published: Published
) -> None:
    began = time.monotonic()
    later({"phase": "started"})
    later({"phase": "pre-run"})

    wait_until(lambda: published.metas, 5, "the kept meta published")

    assert time.monotonic() - began >= DELAY
    assert published.metas == [{"phase": "pre-run"}]
    assert published.threads == ["later"]  # by the process's delayed-call thread
    later({"phase": "run"})
    assert published.metas == [{"phase": "pre-run"}, {"phase": "run"}]  # at once
    assert published.threads[1] == threading.current_thread().name


def test_a_build_that_reports_nothing_before_the_delay_publishes_its_first_report_at_once(
    later: LaterProgress, published: Published
) -> None:
    time.sleep(DELAY + 0.1)
    assert published.metas == []
    later({"phase": "started"})
    assert published.metas == [{"phase": "started"}]


def test_nothing_is_published_after_close(later: LaterProgress, published: Published) -> None:
    later({"phase": "started"})
    later.close()
    time.sleep(DELAY + 0.2)  # the cancelled timer stays silent
    later({"phase": "run"})
    assert published.metas == []
    assert not later.published  # the build task then stores no result (tasks/executor.py)


def test_published_says_whether_a_publication_was_attempted(
    later: LaterProgress, published: Published
) -> None:
    later({"phase": "started"})
    assert not later.published
    wait_until(lambda: later.published, 5, "the kept meta published")
    assert published.metas == [{"phase": "started"}]
    later.close()
    assert later.published  # stays true: the task stores its result over the PROGRESS


def test_a_failed_publication_counts_as_published() -> None:
    """A PROGRESS store that failed midway may have landed: the result must follow it."""

    def failing(meta: Mapping[str, Any]) -> None:
        raise ConnectionError("the result backend is down")

    deferred = LaterProgress(failing, DELAY, name="progress-test")
    try:
        deferred({"phase": "started"})
        wait_until(lambda: deferred.published, 5, "the kept meta's publication tried")
    finally:
        deferred.close()


def test_nothing_is_published_after_close_once_the_delay_passed(
    later: LaterProgress, published: Published
) -> None:
    later({"phase": "started"})
    wait_until(lambda: published.metas, 5, "the kept meta published")
    later.close()
    later({"phase": "post-run"})
    assert published.metas == [{"phase": "started"}]


def test_close_waits_for_a_publication_in_flight() -> None:
    """The timer publishes as the build ends: close returns only after it, none follows."""
    entered, release = threading.Event(), threading.Event()
    published: list[Mapping[str, Any]] = []

    def slow(meta: Mapping[str, Any]) -> None:
        entered.set()
        release.wait(10)
        published.append(meta)

    later = LaterProgress(slow, 0.05)
    later({"phase": "started"})
    assert entered.wait(5), "the timer did not publish"
    closer = threading.Thread(target=later.close, daemon=True)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close returned while a publication was in flight"
    release.set()
    closer.join(5)
    assert not closer.is_alive()
    assert published == [{"phase": "started"}]  # landed before close returned
    later({"phase": "run"})
    assert published == [{"phase": "started"}]


def test_a_failing_publication_never_fails_the_build(caplog: pytest.LogCaptureFixture) -> None:
    def failing(_meta: Mapping[str, Any]) -> None:
        raise RuntimeError("the result backend is down")

    later = LaterProgress(failing, 0.05)
    try:
        later({"phase": "started"})
        wait_until(lambda: "reporting progress" in caplog.text, 5, "the timer's failure logged")
        later({"phase": "run"})  # directly, in this thread: logged, not raised
        failures = [r for r in caplog.records if r.getMessage().startswith("reporting progress")]
        assert [r.getMessage() for r in failures] == [
            "reporting progress {'phase': 'started'} failed",
            "reporting progress {'phase': 'run'} failed",
        ]
    finally:
        later.close()


class FakeTask:
    """What ``tasks.executor._progress`` takes from a running task, recorded."""

    class Request:
        id = "task-1"
        hostname = "executor@test"

    class Backend:
        def __init__(self) -> None:
            self.stored: list[tuple[str, Mapping[str, Any], str]] = []

        def store_result(self, task_id: str, meta: Mapping[str, Any], state: str, **_: Any) -> None:
            self.stored.append((task_id, meta, state))

    class App:
        class Events:
            def default_dispatcher(self, hostname: str) -> Any:
                raise ConnectionError("no broker here")  # an event lost: the build goes on

        events = Events()

    def __init__(self) -> None:
        self.request = self.Request()
        self.backend = self.Backend()
        self.app = self.App()


def test_a_short_build_asks_sql_nothing_and_a_long_one_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[Mapping[str, Any]] = []

    def query(_settings: Any, meta: Mapping[str, Any]) -> float | None:
        asked.append(meta)
        return 12.5

    monkeypatch.setattr(executor, "_query_estimate", query)
    settings = load_settings(environ={"SLUICE_DATABASE_URL": "sqlite:///unused.db"})
    # a job of its own: estimates are cached per job and process
    meta = {"phase": "started", "tenant": "t", "job": uuid.uuid4().hex, "project": "p"}

    short = FakeTask()
    later = LaterProgress(executor._progress(short, settings), DELAY)  # type: ignore[arg-type]
    later(meta)
    later.close()
    assert asked == [] and short.backend.stored == []

    long = FakeTask()
    later = LaterProgress(executor._progress(long, settings), DELAY)  # type: ignore[arg-type]
    later(meta)
    wait_until(lambda: long.backend.stored, 5, "the long build's progress stored")
    later({**meta, "phase": "run"})
    later.close()
    assert [m["phase"] for m in asked] == ["started"]
    assert long.backend.stored == [
        ("task-1", {**meta, "estimate": 12.5}, "PROGRESS"),
        ("task-1", {**meta, "phase": "run", "estimate": 12.5}, "PROGRESS"),
    ]


@pytest.mark.parametrize("sent", [None, 42.0], ids=["none-known", "known"])
def test_the_estimate_the_scheduler_sent_is_shown_without_sql(
    monkeypatch: pytest.MonkeyPatch, sent: float | None
) -> None:
    """With the request's estimate (scheduler/reporting/estimates.py) SQL is not asked."""

    def query(_settings: Any, _meta: Mapping[str, Any]) -> float | None:
        raise AssertionError("SQL asked")

    monkeypatch.setattr(executor, "_query_estimate", query)
    settings = load_settings(environ={"SLUICE_DATABASE_URL": "sqlite:///unused.db"})
    meta = {"phase": "started", "tenant": "t", "job": uuid.uuid4().hex, "estimate": sent}
    task = FakeTask()
    report = executor._progress(task, settings)  # type: ignore[arg-type]
    report(meta)
    report({**meta, "phase": "run"})
    assert [stored[1]["estimate"] for stored in task.backend.stored] == [sent, sent]
