"""Names from outside (job ids, branches, refs, commits): checks and ref names.

Everything a job names reaches a git command line, so each name is checked
before use: no leading ``-`` (never an option), nothing git refuses in a
ref name. The merger's own refs live under ``refs/sluice/jobs/<job id>/``
and ``refs/sluice/memo/`` in the cache repos, kept for the repo's last
jobs (:mod:`workers.merger.jobrefs`).
"""

from __future__ import annotations

import re

from scheduler.wire.merger import MergeChange
from workers.merger.errors import InvalidJobError

JOBS_NAMESPACE = "refs/sluice/jobs/"
MEMO_NAMESPACE = "refs/sluice/memo/"

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA = re.compile(r"^[0-9a-f]{7,64}$")
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def check_job_id(job_id: str) -> None:
    if not _JOB_ID.match(job_id) or job_id.endswith(".lock"):
        raise InvalidJobError(f"invalid job id {job_id!r}")


def check_ref_name(name: str, what: str) -> None:
    """Raise unless ``name`` is usable as a branch or ref name (``what`` names it)."""
    bad = (
        not name
        or name.startswith(("-", "/", "."))
        or name.endswith(("/", ".", ".lock"))
        or ".." in name
        or "//" in name
        or "@{" in name
        or "/." in name
        or _BAD_REF_CHARS.search(name) is not None
    )
    if bad:
        raise InvalidJobError(f"invalid {what} {name!r}")


def check_commit(sha: str) -> None:
    if not _SHA.match(sha):
        raise InvalidJobError(f"invalid commit {sha!r} (expected a hex sha)")


def check_change(change: MergeChange) -> None:
    check_ref_name(change.branch, "branch")
    if not change.ref and not change.commit:
        raise InvalidJobError(f"change {change.change_id!r} names neither a ref nor a commit")
    if change.ref:
        check_ref_name(change.ref, "ref")
    if change.commit:
        check_commit(change.commit)


def job_prefix(job_id: str) -> str:
    return f"{JOBS_NAMESPACE}{job_id}/"


# A job's refs sit side by side in its one folder (``source-0``, not
# ``source/0``): git makes a folder for every level of a loose ref's name
# and removes it with the last ref in it, and on a disk each new folder is
# a new inode, the dearest step of writing a ref (docs/merger.md).


def source_ref(job_id: str, index: int) -> str:
    """Where the commit of change ``index`` is kept."""
    return f"{job_prefix(job_id)}source-{index}"


def memo_ref(key: str) -> str:
    """Where the merged commit memoized under ``key`` (a hex digest) is kept."""
    return f"{MEMO_NAMESPACE}{key}"
