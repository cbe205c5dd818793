"""For executors: a working copy at a commit that a merge produced on this host.

:func:`checkout_workspace` makes ``dest`` an ordinary, independent clone of
the cache repo (a local clone with copied objects: a job that writes into
its ``.git`` can never damage the cache, and the copy survives a later
``gc`` or re-clone of the cache) with ``commit`` checked
out, on ``branch`` if one is given. ``origin`` of the copy points at the
project's real remote, so a job sees the URL it expects.

The commit must be in this host's cache: a merge job on this host created
it (kept under ``refs/sluice/jobs/<job id>/`` while the job is among the
repo's last, and by ``gc`` for two weeks after), or it is on a branch or
ref the cache can fetch. An executor on another host re-runs the merge
job: merges are deterministic (same input, same commit shas).
"""

from __future__ import annotations

from pathlib import Path

from workers.merger.cache import RepoCache
from workers.merger.errors import GitCommandError, InvalidJobError, UnknownRefError
from workers.merger.gitcmd import classify
from workers.merger.names import check_commit, check_ref_name


def checkout_workspace(
    cache: RepoCache,
    connection: str,
    project: str,
    commit: str,
    dest: Path,
    *,
    branch: str | None = None,
) -> Path:
    """Clone the cached ``project`` into ``dest`` (must not exist) at ``commit``."""
    check_commit(commit)
    if branch is not None:
        check_ref_name(branch, "branch")
    if dest.exists():
        raise InvalidJobError(f"workspace {dest} already exists")
    label = f"{connection}/{project}"
    url = cache.remote_url(connection, project)
    with cache.open(connection, project) as repo:
        if repo.commit_of(commit) is None:
            repo.fetch()
        full = repo.commit_of(commit)
        if full is None:
            raise UnknownRefError(f"{label}: commit {commit} is not in the repo cache").at(commit)
        try:
            cache.git.run(
                ["clone", "--quiet", "--no-hardlinks", "--no-checkout", str(repo.path), str(dest)]
            )
        except GitCommandError as exc:
            raise classify(exc, f"{label}: workspace clone") from None
    git = cache.git
    try:
        if branch is None:
            git.run(["checkout", "--quiet", "--detach", full], dest)
        else:
            git.run(["checkout", "--quiet", "-B", branch, full], dest)
        git.run(["remote", "set-url", "origin", url], dest)
    except GitCommandError as exc:
        raise classify(exc, f"{label}: workspace checkout of {commit}").at(commit) from None
    return dest
