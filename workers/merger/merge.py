"""Speculative merges: :func:`run_merge_job`, the merger's main entry point.

Changes are applied in job order, each on top of the speculative tip of its
project-branch (the branch head, or the pinned base, plus every change
ahead of it on that branch). Projects are independent in git, so the engine
works one project at a time under that repo's lock, never holding two
locks (no lock-order deadlock between jobs).

Per project: one fetch (branches, tags and the changes' refs together, in
one round trip; skipped when every commit is already in the cache and
every branch is pinned), then the merges in the repo's worktree, then one
ref transaction that writes the memo ref of each merge made (each state
after a change; the last of a branch is its final tip; the states found
in the memo are held, not written again) and drops the refs of the jobs
beyond the repo's window (:mod:`.jobrefs`), then the config files of the
touched branches from the merged trees. The fetch writes the changes it
fetches under ``refs/sluice/jobs/<job id>/``.

Every failure is a result: a conflict names the change and the files, any
other error (unknown ref, unreachable remote, corrupt repo, bad input)
names the project, the ref and the change.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from scheduler.wire.merger import (
    ChangeResult,
    ConfigFiles,
    Failure,
    MergeChange,
    MergeJob,
    MergeResult,
    ProjectState,
    Status,
)
from workers.gitobjects import freshen_loose_objects
from workers.merger.cache import RepoCache
from workers.merger.errors import (
    GitCommandError,
    InvalidJobError,
    MergeConflictError,
    MergerError,
    UnknownRefError,
)
from workers.merger.gitcmd import classify
from workers.merger.modes import Applier
from workers.merger.names import (
    check_change,
    check_commit,
    check_job_id,
    check_ref_name,
    memo_ref,
    source_ref,
)
from workers.merger.repo import Repo
from workers.merger.waiting import NO_BATCH, Batch, WaitingChange

Indexed = list[tuple[int, MergeChange]]

# A fetch that brings this many waiting changes along (a burst) keeps them as
# one pack: some four objects a change, each a file (an inode) when loose.
# Fewer stay loose, as git would keep them: every pack is one more index
# for each lookup until the next repack.
ONE_PACK_AT = 8

log = logging.getLogger(__name__)


@dataclass
class _ProjectOutcome:
    state: ProjectState
    changes: list[ChangeResult] = field(default_factory=list)
    config: list[ConfigFiles] = field(default_factory=list)
    conflict: Failure | None = None
    # the branches the changes moved, at their commits before the changes
    base: ProjectState | None = None


def run_merge_job(job: MergeJob, cache: RepoCache, batch: Batch = NO_BATCH) -> MergeResult:
    """Produce the speculative state of ``job``; never raises for git or input problems.

    ``batch``: the merge requests waiting in the queue, whose changes a
    fetch takes along (:mod:`.waiting`).
    """
    started = time.monotonic()
    result = _run_merge_job(job, cache, batch)
    failure = result.failure
    log.info(
        "merge job %s: %s, %d of %d changes in %.3fs%s",
        job.job_id,
        result.status,
        len(result.changes),
        len(job.changes),
        time.monotonic() - started,
        f" ({failure.kind}: {failure.message})" if failure else "",
    )
    return result


def _run_merge_job(job: MergeJob, cache: RepoCache, batch: Batch) -> MergeResult:
    try:
        check_job_id(job.job_id)
        for change in job.changes:
            check_change(change)
        for state in job.base_state:
            for branch, commit in state.branches.items():
                check_ref_name(branch, "branch")
                check_commit(commit)
    except InvalidJobError as exc:
        return MergeResult(job.job_id, Status.FAILED, failure=failure_of(exc))
    outcomes: list[_ProjectOutcome] = []
    for (connection, project), items in _by_project(job.changes).items():
        try:
            merge = partial(_merge_project, job=job, items=items, batch=batch)
            outcome = cache.run(connection, project, merge)
        except MergerError as exc:
            if not exc.ref:  # a project-wide problem: name the first change it stops
                exc.at(items[0][1].rev, items[0][0])
            return _failed(job, outcomes, failure_of(exc, connection, project, job.changes))
        outcomes.append(outcome)
        if outcome.conflict is not None:
            return _conflicted(job, outcomes, outcome.conflict)
    touched = {(o.state.connection, o.state.project) for o in outcomes}
    for required in job.required:
        key = (required.connection, required.project)
        if key in touched:
            continue
        touched.add(key)
        try:
            state = cache.run(*key, partial(_required_state, job=job, key=key, batch=batch))
        except MergerError as exc:
            return _failed(job, outcomes, failure_of(exc, *key))
        outcomes.append(_ProjectOutcome(state))
    return MergeResult(
        job.job_id,
        Status.OK,
        repo_state=tuple(o.state for o in outcomes),
        changes=_sorted_changes(outcomes),
        config=tuple(c for o in outcomes for c in o.config),
        bases=tuple(o.base for o in outcomes if o.base is not None and o.base.branches),
    )


def failure_of(
    exc: MergerError,
    connection: str = "",
    project: str = "",
    changes: Sequence[MergeChange] = (),
) -> Failure:
    """The failure result for an error, with the change it concerns when known."""
    index = exc.change_index
    change_id = changes[index].name if index is not None and index < len(changes) else ""
    return Failure(
        kind=exc.kind,
        message=str(exc),
        connection=connection,
        project=project,
        ref=exc.ref,
        change_index=index,
        change_id=change_id,
        files=tuple(getattr(exc, "files", ())),
    )


# --------------------------------------------------------------------------
# One project


def _merge_project(repo: Repo, *, job: MergeJob, items: Indexed, batch: Batch) -> _ProjectOutcome:
    connection, project = items[0][1].connection, items[0][1].project
    pinned = _pinned(job, connection, project)
    sources = _fetch_sources(repo, job, items, pinned, batch)
    heads = repo.heads()
    bases = _bases(repo, items, heads, pinned)
    stamps = _stamps(repo, job, items, sources)
    applier = Applier(repo.git, repo.path, repo.clean_worktree, repo.known_merge_base)
    tips = dict(bases)
    made: dict[str, str] = {}  # the memo refs of the merges this job makes
    held: list[str] = []  # those it found: the items ahead, merged by earlier jobs
    results: list[ChangeResult] = []
    for index, change in items:
        source = sources[index]
        memo = _memo_ref(tips[change.branch], source, change, stamps[index])
        merged = repo.commits_of([memo])[memo]
        if merged is None:
            try:
                tip = tips[change.branch]
                merged = _apply(
                    repo, applier, change, index=index, tip=tip, source=source, stamps=stamps
                )
            except MergeConflictError as exc:
                repo.update_job_refs(job.job_id, made, held=held)
                conflict = _conflict(exc, change, index)
                return _ProjectOutcome(ProjectState(connection, project), results, [], conflict)
            made[memo] = merged
        else:
            held.append(memo)
        tips[change.branch] = merged
        files = repo.changed_files(bases[change.branch], source)
        results.append(
            _change_result(
                index=index,
                change=change,
                source=source,
                merged=merged,
                merged_ref=memo,
                files=files,
            )
        )
    repo.update_job_refs(job.job_id, made, held=held)
    freshen_loose_objects(repo.path / "objects", tips.values())
    state = ProjectState(connection, project, {**heads, **pinned, **tips})
    moved = ProjectState(connection, project, {b: bases[b] for b in tips if tips[b] != bases[b]})
    config = []
    if job.read_config:
        config = [
            ConfigFiles(connection, project, b, t, repo.read_config(t)) for b, t in tips.items()
        ]
    return _ProjectOutcome(state, results, config, base=moved)


def _apply(
    repo: Repo,
    applier: Applier,
    change: MergeChange,
    *,
    index: int,
    tip: str,
    source: str,
    stamps: dict[int, int],
) -> str:
    """Apply one change on ``tip``; a git failure names the change."""
    try:
        return applier.apply(
            change.merge_mode, tip, source, name=change.name, timestamp=stamps[index]
        )
    except GitCommandError as exc:
        what = f"{repo.label}: {change.merge_mode} of {change.rev}"
        raise classify(exc, what).at(change.rev, index) from None


def _stamps(repo: Repo, job: MergeJob, items: Indexed, sources: dict[int, str]) -> dict[int, int]:
    """The date of the commits each change makes: the job's, else the change's own."""
    if job.timestamp is not None:
        return {index: job.timestamp for index, _change in items}
    times = repo.commit_times(sources.values())
    return {index: times[sources[index]] for index, _change in items}


def _memo_ref(tip: str, source: str, change: MergeChange, stamp: int) -> str:
    """The memo ref of ``change`` applied on the commit ``tip``: a hash of all its merge depends on.

    The commit below (its tree, its history), the change's commit, mode
    and name, and the date. Merges are deterministic, so a memo ref found
    in the cache *is* the commit the merge would make: the item behind in
    a gate re-uses the state of the item ahead of it and merges only its
    own change, and so does an item that enters the gate's window after
    the items ahead of it merged, whose branch is now the state they were
    tested in (a pushed gate, a forge's fast-forward).
    """
    parts = ("sluice-merge-2", tip, source, change.merge_mode.value, change.name, str(stamp))
    return memo_ref(hashlib.sha256("\0".join(parts).encode()).hexdigest())


def _fetch_sources(
    repo: Repo, job: MergeJob, items: Indexed, pinned: dict[str, str], batch: Batch
) -> dict[int, str]:
    """The commit of each change (index -> sha), fetching what the cache lacks.

    Nothing is fetched when every commit is here and every branch is
    pinned, or fetched after this request was made (``batch.fresh``).
    """
    sources: dict[int, str] = {}
    specs: list[str] = []
    present = repo.commits_of([c.commit for _i, c in items if c.commit] + list(pinned.values()))
    for index, change in items:
        known = present.get(change.commit) if change.commit else None
        if known is not None:
            sources[index] = known
        else:
            specs.append(f"+{change.ref or change.commit}:{source_ref(job.job_id, index)}")
    branches_pinned = all(present.get(pinned.get(item.branch, "")) for _i, item in items)
    key = (items[0][1].connection, items[0][1].project)
    if specs or not (branches_pinned or batch.fresh(key)):
        try:
            _fetch_with_waiting(repo, job, specs, batch.others(key))
        except UnknownRefError as exc:
            raise _which_change(exc, items) from None
        batch.fetched(key)
    wanted = {i: c.commit or source_ref(job.job_id, i) for i, c in items if i not in sources}
    found = repo.commits_of(wanted.values())
    for index, change in items:
        if index in sources:
            continue
        sha = found[wanted[index]]
        if sha is None:
            raise UnknownRefError(f"{repo.label}: {change.rev} is not a commit in the remote").at(
                change.rev, index
            )
        sources[index] = sha
    return sources


def _fetch_with_waiting(
    repo: Repo, job: MergeJob, specs: list[str], waiting: Sequence[WaitingChange]
) -> None:
    """Fetch the branches and ``specs``, with the changes of ``waiting`` jobs the cache lacks.

    A fetch that fails with those is made again without them: another
    job's ref is never this job's failure (its own merge reports it).
    """
    along = _missing(repo, waiting, job.job_id)
    jobs = Counter({job.job_id: len(specs)} if specs else {})
    jobs.update(w.job_id for w in along)
    if jobs:
        repo.note_jobs(list(jobs.items()))
    if along:
        try:
            repo.fetch(
                specs + [f"+{w.change.ref or w.change.commit}:{w.ref}" for w in along],
                one_pack=len(along) >= ONE_PACK_AT,
            )
            log.debug("%s: fetched %d waiting changes along", repo.label, len(along))
            return
        except MergerError as exc:
            log.info("%s: a fetch with %d waiting changes failed: %s", repo.label, len(along), exc)
    repo.fetch(specs)


def _missing(repo: Repo, waiting: Sequence[WaitingChange], job_id: str) -> list[WaitingChange]:
    """The waiting changes whose commits the cache lacks (valid ones, one per commit)."""
    valid: dict[str, WaitingChange] = {}
    for wanted in waiting:
        try:
            check_job_id(wanted.job_id)
            check_change(wanted.change)
        except InvalidJobError:
            continue  # its own merge says what is wrong with it
        if wanted.job_id != job_id:
            valid.setdefault(wanted.change.commit, wanted)
    present = repo.commits_of(valid) if valid else {}
    return [wanted for commit, wanted in valid.items() if present.get(commit) is None]


def _which_change(exc: UnknownRefError, items: Indexed) -> UnknownRefError:
    """Name the change whose ref the remote did not know."""
    message = str(exc)
    for index, change in items:
        for name in (change.ref, change.commit):
            if name and re.search(rf"(?<![\w/.-]){re.escape(name)}(?![\w/.-])", message):
                exc.at(name, index)
                return exc
    return exc


def _bases(
    repo: Repo, items: Indexed, heads: dict[str, str], pinned: dict[str, str]
) -> dict[str, str]:
    """Starting commit of each branch the changes target."""
    bases: dict[str, str] = {}
    for index, change in items:
        branch = change.branch
        if branch in bases:
            continue
        if branch in pinned:
            sha = repo.commit_of(pinned[branch])
            what = f"pinned base {pinned[branch]} of branch {branch!r}"
        else:
            sha = heads.get(branch)
            what = f"branch {branch!r}"
        if sha is None:
            raise UnknownRefError(f"{repo.label}: no {what}").at(branch, index)
        bases[branch] = sha
    return bases


def _required_state(
    repo: Repo, *, job: MergeJob, key: tuple[str, str], batch: Batch
) -> ProjectState:
    connection, project = key
    pinned = _pinned(job, connection, project)
    if not batch.fresh(key):
        _fetch_with_waiting(repo, job, [], batch.others(key))
        batch.fetched(key)
    return ProjectState(connection, project, {**repo.heads(), **pinned})


def _pinned(job: MergeJob, connection: str, project: str) -> dict[str, str]:
    for state in job.base_state:
        if (state.connection, state.project) == (connection, project):
            return dict(state.branches)
    return {}


# --------------------------------------------------------------------------
# Results


def _by_project(changes: Sequence[MergeChange]) -> dict[tuple[str, str], Indexed]:
    groups: dict[tuple[str, str], Indexed] = {}
    for index, change in enumerate(changes):
        groups.setdefault((change.connection, change.project), []).append((index, change))
    return groups


def _change_result(
    *,
    index: int,
    change: MergeChange,
    source: str,
    merged: str,
    merged_ref: str,
    files: list[str],
) -> ChangeResult:
    return ChangeResult(
        index=index,
        change_id=change.name,
        connection=change.connection,
        project=change.project,
        branch=change.branch,
        commit=source,
        merged_commit=merged,
        merged_ref=merged_ref,
        files=tuple(files),
    )


def _conflict(exc: MergeConflictError, change: MergeChange, index: int) -> Failure:
    files = ", ".join(exc.files) or "(no file named by git)"
    return Failure(
        kind="conflict",
        message=(
            f"change {change.name} ({change.merge_mode}) does not merge into "
            f"{change.connection}/{change.project} {change.branch}: conflict in {files}"
        ),
        connection=change.connection,
        project=change.project,
        ref=change.rev,
        change_index=index,
        change_id=change.name,
        files=tuple(exc.files),
    )


def _sorted_changes(
    outcomes: list[_ProjectOutcome], before: int | None = None
) -> tuple[ChangeResult, ...]:
    """Applied changes in job order; only those ahead of index ``before`` if given."""
    applied = (c for o in outcomes for c in o.changes if before is None or c.index < before)
    return tuple(sorted(applied, key=lambda c: c.index))


def _conflicted(job: MergeJob, outcomes: list[_ProjectOutcome], conflict: Failure) -> MergeResult:
    changes = _sorted_changes(outcomes, conflict.change_index)
    return MergeResult(job.job_id, Status.CONFLICT, changes=changes, failure=conflict)


def _failed(job: MergeJob, outcomes: list[_ProjectOutcome], failure: Failure) -> MergeResult:
    changes = _sorted_changes(outcomes, failure.change_index)
    return MergeResult(job.job_id, Status.FAILED, changes=changes, failure=failure)
