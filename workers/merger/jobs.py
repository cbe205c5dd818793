"""The scheduler's other git questions: files of a change, config, branch heads.

Each job function takes a job dataclass and the host's :class:`RepoCache`
and returns a result dataclass; like :func:`run_merge_job`, none raises for
a git or input problem, it reports a :class:`Failure` instead. Each fetches
the project first (fetch on demand), so answers reflect the remote now.
"""

from __future__ import annotations

from scheduler.wire.merger import (
    BranchHeadsJob,
    BranchHeadsResult,
    ConfigFiles,
    ConfigJob,
    ConfigResult,
    FilesChangesJob,
    FilesChangesResult,
    ProjectState,
    Status,
)
from workers.merger.cache import RepoCache
from workers.merger.errors import MergerError, UnknownRefError
from workers.merger.merge import failure_of
from workers.merger.names import (
    JOBS_NAMESPACE,
    MEMO_NAMESPACE,
    check_change,
    check_job_id,
    check_ref_name,
    job_prefix,
    source_ref,
)
from workers.merger.repo import Repo


def run_files_changes_job(job: FilesChangesJob, cache: RepoCache) -> FilesChangesResult:
    """Files the change touches against the merge-base with its target branch."""
    change = job.change

    def work(repo: Repo) -> list[str]:
        ref = source_ref(job.job_id, 0)
        specs = [] if change.commit and repo.commit_of(change.commit) else [f"+{change.rev}:{ref}"]
        if specs:
            repo.note_jobs([(job.job_id, len(specs))])
        repo.fetch(specs)
        if specs:
            repo.drop_overdue_refs()
        source = repo.commit_of(change.commit or ref)
        if source is None:
            raise UnknownRefError(f"{repo.label}: no commit {change.rev}").at(change.rev, 0)
        base = repo.heads().get(change.branch)
        if base is None:
            raise UnknownRefError(f"{repo.label}: no branch {change.branch!r}").at(change.branch)
        return repo.changed_files(base, source)

    try:
        check_job_id(job.job_id)
        check_change(change)
        files = cache.run(change.connection, change.project, work)
    except MergerError as exc:
        if exc.kind == "unknown-ref" and not exc.ref:
            exc.at(change.rev, 0)
        failure = failure_of(exc, change.connection, change.project, [change])
        return FilesChangesResult(job.job_id, Status.FAILED, failure=failure)
    return FilesChangesResult(job.job_id, Status.OK, files=tuple(files))


def run_config_job(job: ConfigJob, cache: RepoCache) -> ConfigResult:
    """Config files at the heads of ``job.branches`` (every branch if empty)."""

    def work(repo: Repo) -> list[ConfigFiles]:
        repo.fetch()
        heads = repo.heads()
        branches = job.branches or tuple(sorted(heads))
        config = []
        for branch in branches:
            head = heads.get(branch)
            if head is None:
                raise UnknownRefError(f"{repo.label}: no branch {branch!r}").at(branch)
            config.append(
                ConfigFiles(job.connection, job.project, branch, head, repo.read_config(head))
            )
        return config

    try:
        check_job_id(job.job_id)
        for branch in job.branches:
            check_ref_name(branch, "branch")
        config = cache.run(job.connection, job.project, work)
    except MergerError as exc:
        exc.at(exc.ref or ",".join(job.branches) or "refs/heads/*")
        failure = failure_of(exc, job.connection, job.project)
        return ConfigResult(job.job_id, Status.FAILED, failure=failure)
    return ConfigResult(job.job_id, Status.OK, config=tuple(config))


def run_branch_heads_job(job: BranchHeadsJob, cache: RepoCache) -> BranchHeadsResult:
    """The head commit of every branch of the project, freshly fetched."""

    def work(repo: Repo) -> tuple[dict[str, str], str]:
        repo.fetch()
        return repo.heads(), repo.default_branch()

    try:
        check_job_id(job.job_id)
        heads, default = cache.run(job.connection, job.project, work)
    except MergerError as exc:
        failure = failure_of(exc.at(exc.ref or "refs/heads/*"), job.connection, job.project)
        return BranchHeadsResult(job.job_id, Status.FAILED, failure=failure)
    state = ProjectState(job.connection, job.project, heads)
    default = default if default in heads else ""
    return BranchHeadsResult(job.job_id, Status.OK, state=state, default_branch=default)


def delete_job_refs(cache: RepoCache, connection: str, project: str, job_id: str) -> int:
    """Drop a finished job's refs from a cache repo (its commits become garbage)."""
    check_job_id(job_id)
    with cache.open(connection, project) as repo:
        return repo.delete_refs(job_prefix(job_id))


def prune_job_refs(cache: RepoCache, connection: str, project: str, live: set[str]) -> int:
    """Drop the refs of every job not in ``live`` (ids the scheduler still needs).

    The merge memo (``refs/sluice/memo/``) is dropped too: it is only a
    cache, rebuilt by the next merges. Returns how many job refs went.
    Not needed to keep the refs bounded: every merge drops the refs of the
    jobs beyond the repo's window (:mod:`workers.merger.jobrefs`).
    """
    with cache.open(connection, project) as repo:
        jobs = {ref[len(JOBS_NAMESPACE) :].split("/", 1)[0] for ref in repo.refs(JOBS_NAMESPACE)}
        repo.delete_refs(MEMO_NAMESPACE)
        return sum(repo.delete_refs(job_prefix(job)) for job in sorted(jobs - live))
