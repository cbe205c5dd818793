"""Zuul's ``provides`` and ``requires`` between changes, and the artifacts a job receives.

A job that ``requires`` a name waits for the jobs that ``provide`` it in the
items it is tested with:

* the items ahead of it in its queue (a dependent pipeline's chain,
  ``QueueItem.ahead``), nearest first;
* the live items, anywhere in the pipeline, of the changes it depends on
  (``Depends-On`` not merged when it was enqueued: ``Change.needs``).

Each providing job of those items must have succeeded (or paused, Zuul's
rule); while one has not ended the requiring job waits (its item is not at
rest: :func:`waiting`). A providing job that ended otherwise (failed,
skipped, aborted) fails the requiring job at once, without a build, with
Zuul's message (:func:`failure`).

A change it depends on without a live item in the pipeline is looked up in
what its last reported buildset in this pipeline left
(:mod:`scheduler.stores.provided`: Zuul's database lookup): a failed
provider there fails the job the same way, a successful one gives its
artifacts; a change without a record (never tested here; a merged change
is not among the needs at all) provides nothing and is not waited for.

Of a batch ahead only its tail counts (it builds for its riders), never
the item's own batch (its tail builds for it); changes that need each
other (a cycle) never wait for each other's providers.

The job then receives in ``zuul.artifacts`` the artifacts those providers
returned (farthest item first), followed by those its parents within its
own buildset returned (its dependencies, in the order of the job graph),
each tagged with where it came from (:mod:`scheduler.model.artifacts`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.model import artifacts
from scheduler.model.build import Build, BuildState, JobState
from scheduler.model.change import Change
from scheduler.model.item import PipelineState, QueueItem
from scheduler.model.results import Result
from scheduler.stores.provided import ProvidedRecord

# how far a chain of items ahead is followed (a guard against a corrupt loop)
MAX_AHEAD = 10_000


@dataclass(frozen=True)
class Requirements:
    """Whether a job's requirements are met now, and what they give it.

    ``ready``: every provider ended well (or there is none); ``failure``: a
    provider ended otherwise, the job can never run (Zuul's message);
    neither: it waits.
    """

    ready: bool
    failure: str = ""
    artifacts: tuple[dict[str, Any], ...] = field(default=())


def _needed(change: Change) -> tuple[Change, ...]:
    return tuple(n for n in change.needs if n.key != change.key)


class Records(Protocol):
    """What changes no longer in the pipeline left (``scheduler.stores.provided``)."""

    def get(self, change: Change) -> ProvidedRecord | None: ...


class NoRecords:
    """A pipeline without records (the managers' tests)."""

    def get(self, change: Change) -> ProvidedRecord | None:
        return None


NO_RECORDS = NoRecords()


def providers(state: PipelineState, item: QueueItem) -> Iterator[QueueItem | Change]:
    """What ``item``'s jobs wait for, nearest first: items (read only), or a change it
    depends on that has no live item in the pipeline."""
    seen = {item.uuid}
    # a batch's riders build nothing of their own: its tail (its last member,
    # the first met walking back) builds for them all, item's own batch in its buildset
    batch = item.batch
    ahead, steps = item.ahead, 0
    while ahead is not None and ahead not in seen and steps < MAX_AHEAD:
        found = state.items.peek(ahead)
        if found is None:
            break
        seen.add(found.uuid)
        if not found.dequeued and not (found.batch and found.batch == batch):
            yield found
        batch = found.batch
        ahead, steps = found.ahead, steps + 1
    for need in _needed(item.change):
        for other in state.items.peek_values():
            if other.dequeued or not other.change.same_change(need):
                continue
            if need.commit and other.change.commit != need.commit:
                continue  # another patchset of the change: not what this one is tested with
            if any(n.key == item.change.key for n in other.change.needs):
                break  # a cycle: each needs the other, neither waits for the other's
            if other.uuid not in seen:
                seen.add(other.uuid)
                yield other
            break
        else:
            yield need


def failure(job: str, wanted: set[str], build: str, result: str, change: Change) -> str:
    """Zuul's message for a requiring ``job`` whose provider's ``build`` ended ``result``."""
    number = artifacts.change_numbers(change.ref).get("change", change.ref)
    return (
        f"Job {job} requires artifact(s) {', '.join(sorted(wanted))} provided by build "
        f"{build} (triggered by change {number} on project {change.project}), "
        f'but that build failed with result "{result}"'
    )


def resolve(
    state: PipelineState, item: QueueItem, job: JobState, records: Records = NO_RECORDS
) -> Requirements:
    """Whether ``job`` of ``item`` may start as its ``requires`` go, and its artifacts."""
    requires = set(job.info.requires)
    found: list[list[dict[str, Any]]] = []
    if requires:
        for provider in providers(state, item):
            if isinstance(provider, Change):
                mine = _recorded(job.name, requires, records.get(provider))
            else:
                mine = _live(job.name, requires, provider)
            if isinstance(mine, Requirements):
                return mine
            found.append(mine)
    found.reverse()  # Zuul's order: the farthest item's first
    return Requirements(True, artifacts=tuple(artifacts.merged(*found, parents(item, job))))


# a provider's artifacts, or why the job cannot start (yet, or ever)
Found = list[dict[str, Any]] | Requirements


def _live(name: str, requires: set[str], provider: QueueItem) -> Found:
    """What the jobs of a live item that provide ``requires`` give."""
    jobs = provider.buildset.jobs
    if jobs is None:
        if provider.result is None:
            return Requirements(False)  # not frozen yet: its providers are unknown
        return []  # ended without jobs (a merge conflict): it provides nothing
    mine: list[dict[str, Any]] = []
    for other in jobs.values():
        wanted = requires.intersection(other.info.provides)
        if not wanted:
            continue
        build = other.current
        if other.succeeded_for_dependents and build is not None:
            mine.extend(artifacts.received(build.result_data, provider.change, other.name))
        elif other.result is not None:
            uuid = build.uuid if build is not None else ""
            message = failure(name, wanted, uuid, other.result.value, provider.change)
            return Requirements(False, failure=message)
        else:
            return Requirements(False)
    return mine


def _recorded(name: str, requires: set[str], record: ProvidedRecord | None) -> Found:
    """What a change's last reported buildset left (no record: it provides nothing)."""
    if record is None:
        return []
    mine: list[dict[str, Any]] = []
    for build in record.builds:
        wanted = requires.intersection(build.provides)
        if not wanted:
            continue
        if build.result != Result.SUCCESS.value:
            message = failure(name, wanted, build.uuid, build.result, record.change)
            return Requirements(False, failure=message)
        mine.extend(dict(a) for a in build.artifacts)
    return mine


def parents(item: QueueItem, job: JobState) -> list[dict[str, Any]]:
    """The artifacts ``job``'s parents returned (its dependencies, directly or through
    others, in its buildset), in the order of the job graph."""
    jobs = item.buildset.jobs or {}
    wanted: set[str] = set()
    todo = [d.name for d in job.info.dependencies]
    while todo:
        name = todo.pop()
        if name not in wanted and name in jobs:
            wanted.add(name)
            todo.extend(d.name for d in jobs[name].info.dependencies)
    found: list[dict[str, Any]] = []
    for other in jobs.values():
        build = other.current
        if other.name in wanted and build is not None and build.result_data:
            found.extend(artifacts.received(build.result_data, item.change, other.name))
    return found


def waiting(item: QueueItem) -> bool:
    """A job of ``item`` that requires something is ready but has not started: it may
    wait for the providers of other items, which change without an event of its own."""
    if item.result is not None or not item.active:
        return False
    graph = item.buildset.graph
    return any(
        job.info.requires
        and (job.needs_retry or (job.current is None and job.result is None and graph.ready(job)))
        for job in graph
    )


def fail(job: JobState, uuid: str, message: str, now: float) -> None:
    """End ``job`` FAILURE with ``message``, without running it (Zuul's fake build)."""
    build = Build(uuid=uuid, job=job.name, attempt=job.next_attempt)
    build.state = BuildState.COMPLETED
    build.result = Result.FAILURE
    build.message = message
    build.start_time = build.end_time = now
    job.builds.append(build)
