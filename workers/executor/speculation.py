"""The speculative state on an executor that does not share a merger's repo cache.

A build's ``sources`` name the merger's repo cache, which holds the
speculative merge commits of its ``repo_state``. An executor on the same
host (or on a shared disk) borrows those objects. One on another host
finds the path missing, or a cache of its own there without those commits:
it merges the item's changes again in its own cache
(``<state_dir>/git``, fetched from each connection's ``baseurl``), as
Zuul's executors do.

What to merge comes from ZooKeeper, not from the spec: the item's merge
request (the build context's ``merge_request``), merged again by
:mod:`workers.merger.replay`, which refuses to make other commits than the
merger did (``WorkspaceError``: the build is retried) rather than test
something else.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from scheduler.wire.build_spec import BuildSpec
from scheduler.zk.client import ZooKeeperClient
from workers.executor.errors import WorkspaceError
from workers.executor.workspace import local_git_dir, stored_commits
from workers.merger.cache import RepoCache
from workers.merger.jobs import delete_job_refs
from workers.merger.replay import ReplayError, merge_again

log = logging.getLogger(__name__)


def missing_sources(spec: BuildSpec, *, everything: bool = False) -> list[str]:
    """Projects whose local source lacks a commit of the repo state (sorted).

    ``everything`` (``executor.merge_here``): every project whose state the
    item's merge made, as if no merger's cache were readable here.
    """
    context = spec.context
    if everything and context.merge_request:
        return sorted(context.repo_state)
    missing = []
    for project, branches in sorted(context.repo_state.items()):
        source = context.sources.get(project, "")
        try:
            git_dir = local_git_dir(source)
        except WorkspaceError:
            missing.append(project)  # not a repository here
            continue
        if git_dir is None:
            continue  # a URL: fetched as it is
        if not _has_commits(git_dir, set(branches.values())):
            missing.append(project)
    return missing


def _has_commits(git_dir: Path, commits: set[str]) -> bool:
    if not git_dir.is_dir():
        return False
    if stored_commits(git_dir, git_dir / "objects", commits):
        return True  # loose or whole in a pack: the usual case, without a git process
    answer = subprocess.run(
        ["git", "--git-dir", str(git_dir), "cat-file", "--batch-check"],
        input="".join(f"{c}\n" for c in sorted(commits)),
        capture_output=True,
        text=True,
        check=False,
    )
    kinds = [line.split()[1:2] for line in answer.stdout.splitlines()]
    return (
        answer.returncode == 0
        and len(kinds) == len(commits)
        and all(k == ["commit"] for k in kinds)
    )


def rebuild(
    spec: BuildSpec, projects: list[str], client: ZooKeeperClient, cache: RepoCache
) -> BuildSpec:
    """Merge the item's changes for ``projects`` again in ``cache``; the spec pointing there."""
    context = spec.context
    connections: Mapping[str, str] = context.connections
    try:
        merge_again(
            client,
            cache,
            request=context.merge_request,
            job_id=_job_id(spec),
            connections=connections,
            wanted={p: context.repo_state[p] for p in projects},
        )
    except ReplayError as exc:
        raise WorkspaceError(str(exc)) from None
    here = {p: str(cache.repo_path(connections[p], p)) for p in projects}
    return replace(spec, context=replace(context, sources={**context.sources, **here}))


def forget(spec: BuildSpec, projects: list[str], cache: RepoCache) -> None:
    """Drop the refs :func:`rebuild` made (once the build's checkouts no longer need them)."""
    connections = spec.context.connections
    for project in projects:
        try:
            delete_job_refs(cache, connections[project], project, _job_id(spec))
        except Exception as exc:  # cleanup only: the refs go with the next prune
            log.warning(
                "build %s: refs of %s not dropped: %s", spec.context.build_uuid, project, exc
            )


def _job_id(spec: BuildSpec) -> str:
    return f"build-{spec.context.build_uuid}"
