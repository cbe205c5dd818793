"""Telling the pipeline that a request emitted an event (a nudge after the fact).

A worker that claims or completes a request has committed the request's
event to the pipeline's result queue in ZooKeeper; the ``notify`` callback
(the task adapter's ``dispatch.notify_pipeline``) then nudges that pipeline.
A failing nudge is logged and never fails the work: the sweep finds the
queued event and sends the nudge again.

A build's start is nudged only if the build still runs
:data:`STARTED_NUDGE_DELAY` seconds after its claim (:class:`LaterNudge`, a
timer in the executor, cancelled when the build ends): a build that ends
sooner has its ``request-started`` event applied by the pass that applies
its completion, with no nudge, no task and no pass of its own (the start
time travels in the event, so the history is exact). A longer build shows
as running that much later. If the executor dies before the timer fires,
the event waits in ZooKeeper for the sweep's nudge, as any lost nudge does.

A build's progress (its task's PROGRESS state) is deferred the same way
(:class:`LaterProgress`): published only if the build still runs
:data:`PROGRESS_DELAY` seconds after its claim. Until then the latest phase
is only kept; a build that ends sooner goes straight to its result, with
no PROGRESS stored and no ``task-progress`` event (each costs CPU in the
result backend, and nobody sees a state that lasts milliseconds).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from scheduler.stores.job_requests import JobRequest
from workers.later import call_later

log = logging.getLogger(__name__)

# seconds after a claim before its pipeline is nudged about the start
STARTED_NUDGE_DELAY = 1.0
# seconds after a claim before a build's progress is published
PROGRESS_DELAY = 0.5


class Notify(Protocol):
    """Nudge the pipeline of ``request``'s events, ``delay`` seconds from now."""

    def __call__(self, request: JobRequest, /, delay: float = 0.0) -> None: ...


# progress(meta): a running build's phase, for the task's PROGRESS state
Progress = Callable[[Mapping[str, Any]], None]


def no_progress(_meta: Mapping[str, Any]) -> None:
    return None


def no_notify(_request: JobRequest, /, delay: float = 0.0) -> None:
    return None


def notify_safely(notify: Notify, request: JobRequest, what: str, delay: float = 0.0) -> None:
    try:
        notify(request, delay=delay)
    except Exception:  # a hook boundary: the sweep re-sends a lost nudge
        log.exception("%s request %s: nudging its pipeline failed", what, request.uuid)


class LaterNudge:
    """Nudge the pipeline of ``request`` in ``delay`` seconds unless cancelled first.

    The nudge is sent from the process's delayed-call thread
    (:mod:`workers.later`; Celery's producer pool is thread-safe); one sent
    while the caller sends its own is harmless: nudges coalesce.
    """

    def __init__(self, notify: Notify, request: JobRequest, what: str, delay: float) -> None:
        self._call = call_later(
            delay, notify_safely, notify, request, what, name=f"nudge-{request.uuid[:8]}"
        )

    def cancel(self) -> None:
        self._call.cancel()


def progress_safely(progress: Progress, meta: Mapping[str, Any]) -> None:
    try:
        progress(meta)
    except Exception:  # a hook boundary: progress is for people, never fails a build
        log.exception("reporting progress %s failed", dict(meta))


class LaterProgress:
    """A :data:`Progress` that publishes only after ``delay`` seconds; call it as one.

    The clock starts when this is made (the build task makes it just
    before it claims its request). Before ``delay`` a call only keeps its
    meta (the latest wins); when the delay passes, the process's delayed-call
    thread (:mod:`workers.later`) publishes the kept meta at once, and every
    later call publishes directly.
    :meth:`close`, when the build ends and before the task stores its
    result, cancels the timer, waits for a publication in flight and drops
    any later one: a PROGRESS state never lands after the result (which it
    would overwrite). One publication runs at a time, all under one lock,
    so ``progress`` needs no locking of its own; a failing one is logged
    (:func:`progress_safely`). :attr:`published` says whether any was
    attempted: the build task stores its result only then (tasks/executor.py).
    """

    def __init__(self, progress: Progress, delay: float, *, name: str = "progress") -> None:
        self._progress = progress
        self._lock = threading.Lock()
        self._kept: Mapping[str, Any] | None = None
        self._due = False  # the delay has passed: publish directly
        self._closed = False
        self._published = False
        self._timer = call_later(delay, self._publish_kept, name=name)

    @property
    def published(self) -> bool:
        """A publication was attempted (it may have failed): the build outlasted the delay."""
        with self._lock:
            return self._published

    def __call__(self, meta: Mapping[str, Any]) -> None:
        with self._lock:
            if self._closed:
                return
            if not self._due:
                self._kept = meta
                return
            self._published = True
            progress_safely(self._progress, meta)

    def _publish_kept(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._due = True
            kept, self._kept = self._kept, None
            if kept is not None:
                self._published = True
                progress_safely(self._progress, kept)

    def close(self) -> None:
        """No publication after this returns, nor while it waits for one in flight."""
        self._timer.cancel()
        with self._lock:
            self._closed = True
            self._kept = None
