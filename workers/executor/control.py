"""How a running build talks to whoever owns it: :class:`BuildControl`.

The runner knows nothing of ZooKeeper or Celery. It calls these hooks, and
the task adapter implements them on top of the build request in ZooKeeper:

* ``cancel_requested()`` is polled several times a second while a phase
  runs (and before each step). It must be cheap: read a flag kept up to
  date by a watch on the ``cancel`` child node, not a round trip per call.
  Returning true stops the build (``ABORTED``) within 2 s.
* ``on_started(info)`` is called once the workspace is ready, before the
  first phase: the log path is known then (the status page can follow it).
* ``on_phase(phase)`` is called as each phase starts.
* ``on_pre_fail(line)`` is called at most once, when a line of the run
  steps' output matched the job's ``failure-output``
  (:mod:`workers.executor.failureoutput`): the build is known to fail; it
  runs on to its end. The adapter tells the pipeline at once.
* ``pause(result_data)`` is called after a successful run phase when the job
  asked to pause (``{"zuul": {"pause": true}}`` in its result data, Zuul's
  convention). It blocks until the build is resumed or cancelled: the
  adapter sets PAUSED, stores the result data for the dependent jobs, emits
  the paused event and waits for the ``resume`` (or ``cancel``) child node.
  Afterwards the runner checks ``cancel_requested()`` again.

A hook that raises is logged and otherwise ignored (a failing hook never
stops a build); a ``cancel_requested()`` that raises counts as "no".
:class:`BaseControl` implements every hook as a no-op to subclass;
:class:`LocalControl` drives a build from threads (tests, a local runner).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.wire.build_result import Phase


@dataclass(frozen=True)
class StartedInfo:
    """What :meth:`BuildControl.on_started` learns about the build."""

    build_uuid: str
    workspace: str
    project_dir: str
    log_path: str
    started_at: float


class BuildControl(Protocol):
    """The hooks :func:`run_build` calls; see the module docstring."""

    def cancel_requested(self) -> bool: ...

    def on_started(self, info: StartedInfo) -> None: ...

    def on_phase(self, phase: Phase) -> None: ...

    def pause(self, result_data: Mapping[str, Any]) -> None: ...

    def on_pre_fail(self, line: str) -> None: ...


class BaseControl:
    """Every hook a no-op: never cancelled, a pause returns at once."""

    def cancel_requested(self) -> bool:
        return False

    def on_started(self, info: StartedInfo) -> None:
        return None

    def on_phase(self, phase: Phase) -> None:
        return None

    def pause(self, result_data: Mapping[str, Any]) -> None:
        return None

    def on_pre_fail(self, line: str) -> None:
        return None


class LocalControl(BaseControl):
    """Control from other threads: :meth:`cancel`, :meth:`resume`, events to wait on.

    ``started``, ``paused`` and the ``phases`` list let a test (or a local
    runner) follow the build; ``paused_data`` is the result data the job
    had written when it paused.
    """

    def __init__(self) -> None:
        self._cancel = threading.Event()
        self._resume = threading.Event()
        self.started = threading.Event()
        self.paused = threading.Event()
        self.info: StartedInfo | None = None
        self.phases: list[Phase] = []
        self.paused_data: dict[str, Any] | None = None
        # the lines on_pre_fail was called with
        self.pre_failed: list[str] = []

    def cancel(self) -> None:
        self._cancel.set()

    def resume(self) -> None:
        self._resume.set()

    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def on_started(self, info: StartedInfo) -> None:
        self.info = info
        self.started.set()

    def on_phase(self, phase: Phase) -> None:
        self.phases.append(phase)

    def on_pre_fail(self, line: str) -> None:
        self.pre_failed.append(line)

    def pause(self, result_data: Mapping[str, Any]) -> None:
        self.paused_data = dict(result_data)
        self.paused.set()
        while not (self._resume.is_set() or self._cancel.is_set()):
            self._resume.wait(0.05)
