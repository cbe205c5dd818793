"""Frozen jobs as the scheduler sees them, builds, and the job graph of a buildset."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.config.model import Dependency
from scheduler.model.results import RETRYABLE, Result


def copy_json(value: Any) -> Any:
    """A copy of JSON data sharing nothing mutable with ``value`` (faster than deepcopy).

    Scalars are shared (immutable); only dicts and lists are copied, and a
    call is spent only on those (a pass clones every item's repo state).
    """
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else copy_json(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _SCALARS else copy_json(v) for v in value]
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


_SCALARS = frozenset((str, int, float, bool, type(None)))


class BuildState(enum.StrEnum):
    """The life of one build request (seed 003)."""

    REQUESTED = "REQUESTED"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"


@dataclass(frozen=True)
class JobInfo:
    """What scheduling needs of a frozen job; ``spec`` is the job itself, for the executor.

    ``spec`` is the frozen job's own plain form (``FrozenJob.to_dict``):
    the build request carries it as it is (:mod:`scheduler.wire.build_spec`).
    """

    name: str
    dependencies: tuple[Dependency, ...] = ()
    voting: bool = True
    attempts: int = 3
    semaphores: tuple[str, ...] = ()
    # executor zone ("" = unzoned)
    zone: str = ""
    spec: Mapping[str, Any] = field(default_factory=dict)
    # projects the build needs in its repo state: its required projects and the
    # projects holding its steps
    projects: tuple[str, ...] = ()
    # Zuul's provides and requires: names shared with jobs of other changes
    # (scheduler.manager.requirements)
    provides: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dependencies": [{"name": d.name, "soft": d.soft} for d in self.dependencies],
            "voting": self.voting,
            "attempts": self.attempts,
            "semaphores": list(self.semaphores),
            "zone": self.zone,
            "spec": dict(self.spec),
            "projects": list(self.projects),
            **({"provides": list(self.provides)} if self.provides else {}),
            **({"requires": list(self.requires)} if self.requires else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobInfo:
        return cls(
            name=str(data["name"]),
            dependencies=tuple(
                Dependency(str(d["name"]), bool(d.get("soft", False)))
                for d in data.get("dependencies", ())
            ),
            voting=bool(data.get("voting", True)),
            attempts=int(data.get("attempts", 3)),
            semaphores=tuple(str(s) for s in data.get("semaphores", ())),
            zone=str(data.get("zone", "")),
            spec=dict(data.get("spec", {})),
            projects=tuple(str(p) for p in data.get("projects", ())),
            provides=tuple(str(p) for p in data.get("provides", ())),
            requires=tuple(str(r) for r in data.get("requires", ())),
        )


@dataclass
class Build:
    """One attempt of a job; its uuid is also the uuid of its executor request."""

    uuid: str
    job: str
    attempt: int
    state: BuildState = BuildState.REQUESTED
    result: Result | None = None
    message: str = ""
    start_time: float | None = None
    end_time: float | None = None
    result_data: dict[str, Any] = field(default_factory=dict)
    log_path: str = ""
    worker: str = ""
    # a paused build whose dependents all finished was asked to resume
    resume_requested: bool = False
    # the node request of a job with a nodeset ("" = none); while it is not
    # answered the build waits for nodes (REQUESTED, no executor request yet)
    node_request: str = ""
    # which of the nodeset's alternatives that request asks for (0: the first)
    node_choice: int = 0
    # its nodes once fulfilled: [{name, id, label, host, connection}]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    # a line of its run output matched the job's failure-output: it is known
    # to fail before it ends (Zuul's pre_fail)
    pre_fail: bool = False

    def clone(self) -> Build:
        """An equal build sharing nothing mutable with this one (see ``QueueItem.clone``)."""
        new = object.__new__(Build)
        new.__dict__.update(self.__dict__)
        new.result_data = copy_json(self.result_data) if self.result_data else {}
        new.nodes = copy_json(self.nodes) if self.nodes else []
        return new

    @property
    def waiting_for_nodes(self) -> bool:
        return bool(self.node_request) and not self.nodes and not self.done

    @property
    def done(self) -> bool:
        return self.state is BuildState.COMPLETED

    @property
    def paused(self) -> bool:
        return self.state is BuildState.PAUSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "job": self.job,
            "attempt": self.attempt,
            "state": self.state.value,
            "result": self.result.value if self.result else None,
            "message": self.message,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "result_data": self.result_data,
            "log_path": self.log_path,
            "worker": self.worker,
            "resume_requested": self.resume_requested,
            **({"node_request": self.node_request} if self.node_request else {}),
            **({"node_choice": self.node_choice} if self.node_choice else {}),
            **({"nodes": self.nodes} if self.nodes else {}),
            **({"pre_fail": True} if self.pre_fail else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Build:
        result = data.get("result")
        return cls(
            uuid=str(data["uuid"]),
            job=str(data["job"]),
            attempt=int(data.get("attempt", 1)),
            state=BuildState(data.get("state", BuildState.REQUESTED.value)),
            result=Result(result) if result else None,
            message=str(data.get("message", "")),
            start_time=data.get("start_time"),
            end_time=data.get("end_time"),
            result_data=dict(data.get("result_data") or {}),
            log_path=str(data.get("log_path", "")),
            worker=str(data.get("worker", "")),
            resume_requested=bool(data.get("resume_requested", False)),
            node_request=str(data.get("node_request", "")),
            node_choice=int(data.get("node_choice", 0)),
            nodes=[dict(n) for n in data.get("nodes") or ()],
            pre_fail=bool(data.get("pre_fail", False)),
        )


@dataclass
class JobState:
    """A frozen job of a buildset and the builds run for it, oldest first."""

    info: JobInfo
    builds: list[Build] = field(default_factory=list)
    # Set when the job will not run (a hard dependency failed, the item ended).
    skipped: Result | None = None
    waiting_for_semaphore: str | None = None
    # Builds up to this attempt no longer count: the job runs again from its
    # first try (a paused job it depends on was retried, Zuul's rule).
    reset_after: int = 0

    def clone(self) -> JobState:
        """An equal job state sharing nothing mutable (its ``info`` is frozen: shared)."""
        new = object.__new__(JobState)
        new.__dict__.update(self.__dict__)
        new.builds = [build.clone() for build in self.builds]
        return new

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def current(self) -> Build | None:
        """The build of the job's current run (None before the first or after a reset)."""
        if self.builds and self.builds[-1].attempt > self.reset_after:
            return self.builds[-1]
        return None

    @property
    def next_attempt(self) -> int:
        """The attempt number of the job's next build (numbers go on across resets)."""
        return self.builds[-1].attempt + 1 if self.builds else 1

    def tries(self, build: Build) -> int:
        """Which try of the current run ``build`` is."""
        return build.attempt - self.reset_after

    def reset(self) -> None:
        """Run the job again from its first try; its earlier builds stay in the history."""
        self.reset_after = self.builds[-1].attempt if self.builds else 0
        self.skipped = None
        self.waiting_for_semaphore = None

    @property
    def result(self) -> Result | None:
        """The job's final result, or None while it may still run."""
        if self.skipped is not None:
            return self.skipped
        build = self.current
        if build is None or not build.done:
            return None
        if build.result in RETRYABLE:
            return Result.RETRY_LIMIT if self.tries(build) >= self.info.attempts else None
        return build.result

    @property
    def needs_retry(self) -> bool:
        build = self.current
        return (
            self.skipped is None
            and build is not None
            and build.done
            and build.result in RETRYABLE
            and self.tries(build) < self.info.attempts
        )

    @property
    def running(self) -> bool:
        build = self.current
        return build is not None and not build.done

    @property
    def paused(self) -> bool:
        """Paused (Zuul's ``zuul.pause``): its dependents may start, it waits for them."""
        build = self.current
        return build is not None and build.paused

    @property
    def succeeded_for_dependents(self) -> bool:
        """Succeeded, or paused: a paused job's dependents start (Zuul)."""
        return self.result is Result.SUCCESS or self.paused

    def to_dict(self) -> dict[str, Any]:
        return {
            "info": self.info.to_dict(),
            "skipped": self.skipped.value if self.skipped else None,
            "waiting_for_semaphore": self.waiting_for_semaphore,
            "reset_after": self.reset_after,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], builds: list[Build]) -> JobState:
        skipped = data.get("skipped")
        return cls(
            info=JobInfo.from_dict(data["info"]),
            builds=sorted(builds, key=lambda b: b.attempt),
            skipped=Result(skipped) if skipped else None,
            waiting_for_semaphore=data.get("waiting_for_semaphore"),
            reset_after=int(data.get("reset_after", 0)),
        )


class BuildsetJobs:
    """The jobs of a buildset with their dependencies (already checked for cycles)."""

    def __init__(self, jobs: Mapping[str, JobState]) -> None:
        self.jobs = jobs

    def __iter__(self) -> Iterator[JobState]:
        return iter(self.jobs.values())

    def _dependency_states(self, job: JobState) -> Iterator[tuple[Dependency, JobState | None]]:
        for dep in job.info.dependencies:
            yield dep, self.jobs.get(dep.name)

    def blocked_by_failure(self, job: JobState) -> bool:
        """A hard dependency ended without success: the job can never run."""
        for dep, state in self._dependency_states(job):
            if dep.soft and (state is None or state.result is Result.SKIPPED):
                continue
            if state is None:
                return True
            result = state.result
            if result is not None and result is not Result.SUCCESS:
                return True
        return False

    def ready(self, job: JobState) -> bool:
        """Every dependency that will run has succeeded."""
        for dep, state in self._dependency_states(job):
            if state is None:
                if dep.soft:
                    continue
                return False
            if state.result is Result.SKIPPED and dep.soft:
                continue
            if not state.succeeded_for_dependents:
                return False
        return True

    def dependents(self, name: str) -> list[JobState]:
        """Every job that depends on ``name``, directly or through others."""
        found: dict[str, JobState] = {}
        todo = [name]
        while todo:
            current = todo.pop()
            for job in self.jobs.values():
                if job.name not in found and any(d.name == current for d in job.info.dependencies):
                    found[job.name] = job
                    todo.append(job.name)
        return list(found.values())

    def to_resume(self) -> list[JobState]:
        """Paused jobs not yet asked to resume whose dependents have all finished."""
        return [
            job
            for job in self.jobs.values()
            if job.paused
            and job.current is not None
            and not job.current.resume_requested
            and all(d.result is not None for d in self.dependents(job.name))
        ]

    def parent_data(self, job: JobState) -> dict[str, Any]:
        """Result data of the jobs this job depends on, merged in dependency order."""
        data: dict[str, Any] = {}
        for _, state in self._dependency_states(job):
            if state is not None and state.current is not None:
                data.update(state.current.result_data)
        return data

    @property
    def complete(self) -> bool:
        return all(job.result is not None for job in self.jobs.values())
