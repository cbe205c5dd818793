"""What a build produced: the :class:`BuildResult`.

Frozen and JSON-serializable (``to_dict``/``from_dict``), so the task
adapter can store it as the build request's result in ZooKeeper as is.

Result codes use Zuul's vocabulary:

* ``SUCCESS``: every phase passed.
* ``FAILURE``: a run executable failed (or the job wrote invalid result data).
* ``POST_FAILURE``: a post-run executable failed or timed out; it overrides
  ``SUCCESS`` and ``FAILURE`` but never ``RETRY`` or ``TIMED_OUT`` (Zuul).
* ``TIMED_OUT``: pre-run and run together exceeded the job's ``timeout``.
* ``ABORTED``: the build was cancelled; no further phase ran.
* ``RETRY``: a pre-run executable failed, or the workspace could not be
  prepared; the scheduler runs the job again (counted against ``attempts``,
  ``RETRY_LIMIT`` beyond). A job may veto it by writing
  ``{"zuul": {"retry": false}}`` to its result data: then ``FAILURE``.
* ``ERROR``: the runner refused the job (a playbook, a path leaving the
  repository, a missing executable); retrying cannot help.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.model.results import Result

RESULT_SCHEMA = 1


class Phase(enum.StrEnum):
    """The three phases of a job, in the order they run."""

    PRE_RUN = "pre-run"
    RUN = "run"
    POST_RUN = "post-run"


# The phases in order, as a tuple (iterating an enum class is a generator each time).
PHASES: tuple[Phase, ...] = tuple(Phase)


class StepOutcome(enum.StrEnum):
    """How one executable of a phase ended."""

    OK = "ok"  # exit code 0
    FAILED = "failed"  # non-zero exit code (or killed by a signal of its own)
    TIMED_OUT = "timed_out"  # killed by the runner at its deadline
    ABORTED = "aborted"  # killed by the runner on cancel


@dataclass(frozen=True)
class StepRun:
    """One executable of one phase: what ran, how it ended, how long it took."""

    phase: Phase
    path: str
    outcome: StepOutcome
    # The exit code; negative for a signal (as subprocess reports it); None
    # when the runner killed the step.
    exit_code: int | None
    started_at: float
    duration: float
    # The project whose repository holds the executable.
    project: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase.value,
            "path": self.path,
            "project": self.project,
            "outcome": self.outcome.value,
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "duration": self.duration,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepRun:
        return cls(
            phase=Phase(data["phase"]),
            path=str(data["path"]),
            outcome=StepOutcome(data["outcome"]),
            exit_code=data.get("exit_code"),
            started_at=float(data["started_at"]),
            duration=float(data["duration"]),
            project=str(data.get("project", "")),
        )


@dataclass(frozen=True)
class BuildResult:
    """The outcome of :func:`run_build`; times are seconds since the epoch."""

    build_uuid: str
    result: Result
    message: str
    started_at: float
    ended_at: float
    steps: tuple[StepRun, ...] = ()
    result_data: Mapping[str, Any] = field(default_factory=dict)
    log_path: str = ""
    log_tail: tuple[str, ...] = ()
    # Set when the workspace was kept (a hold): where it is.
    held_workspace: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": RESULT_SCHEMA,
            "build_uuid": self.build_uuid,
            "result": self.result.value,
            "message": self.message,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "steps": [step.to_dict() for step in self.steps],
            "result_data": dict(self.result_data),
            "log_path": self.log_path,
            "log_tail": list(self.log_tail),
            "held_workspace": self.held_workspace,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BuildResult:
        return cls(
            build_uuid=str(data["build_uuid"]),
            result=Result(data["result"]),
            message=str(data.get("message", "")),
            started_at=float(data["started_at"]),
            ended_at=float(data["ended_at"]),
            steps=tuple(StepRun.from_dict(s) for s in data.get("steps", [])),
            result_data=dict(data.get("result_data", {})),
            log_path=str(data.get("log_path", "")),
            log_tail=tuple(str(line) for line in data.get("log_tail", [])),
            held_workspace=data.get("held_workspace"),
        )
