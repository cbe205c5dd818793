"""The merger after a long life: a no-op check merge in a cache repo that many earlier jobs used.

Every merge job writes refs into its cache repo (``refs/sluice/jobs/<job
id>/``, the memo ``refs/sluice/memo/``), and several steps of a merge
(the fetch's connectivity check and negotiation, the ref transaction,
reading refs) grow with the number of refs. This phase of
``bench/merger.py`` (``--history N``) runs ``N`` earlier jobs in one
cache, as gates run them (bursts of ``--gate-depth`` items, the job of
item *n* carrying changes 1..*n*, so item *n* merges one change on the
memo of the items ahead), then times the no-op check merge there and,
as the baseline measured in the same run, in a fresh cache (two earlier
jobs; the caches alternate, trial by trial, on the same remote; each
trial runs on a copy of the cache, so every trial starts from the state
the history left). A third row times it after ``git pack-refs --all`` in
the old cache: what packing the refs would save.

Printed per row: the refs in the cache before the trials (all, and loose
files), CPU per merge (this process and its git children), of which the
fetch, the git processes per merge, wall time; and the CPU per gate job
of the first and of the last burst of the history.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import MergeChange, MergeJob
from workers.merger import RepoCache, run_merge_job

# Merges timed per trial, each trial from a copy of the cache the history
# left: few, so that they do not push the history's refs out themselves.
HISTORY_ROUNDS = 8
# (cache, remote, env, rounds) -> (measured, git processes, fetch CPU ms) per merge
TimeNoop = Callable[[RepoCache, Path, dict[str, str], int], tuple[Any, float, float]]


def gate_changes(remote: Path, env: dict[str, str], depth: int) -> None:
    """Changes ``refs/changes/gate/<n>`` (1..depth), each on ``main``, each its own file."""
    for n in range(1, depth + 1):
        blob = _git(remote, env, "hash-object", "-w", "--stdin", stdin=f"gate {n}\n".encode())
        index = {**env, "GIT_INDEX_FILE": str(remote / "gate-index")}
        _git(remote, index, "read-tree", "refs/heads/main")
        _git(remote, index, "update-index", "--add", "--cacheinfo", f"100644,{blob},gate/{n}")
        tree = _git(remote, index, "write-tree")
        sha = _git(remote, env, "commit-tree", tree, "-p", "refs/heads/main", "-m", f"gate {n}")
        _git(remote, env, "update-ref", f"refs/changes/gate/{n}", sha)


def gate_job(burst: int, item: int) -> MergeJob:
    """The job of gate item ``item`` of burst ``burst``: changes 1..item, named per burst."""
    changes = tuple(
        MergeChange("git", "noop", "main", ref=f"refs/changes/gate/{n}", change_id=f"{n},{burst}")
        for n in range(1, item + 1)
    )
    return MergeJob(f"gate-{burst}-{item}", changes)


def run_history(cache: RepoCache, jobs: int, depth: int, measured: type[Any]) -> tuple[Any, Any]:
    """``jobs`` gate jobs in bursts of ``depth``; the CPU of the first and the last burst."""
    first, last = measured(), measured()
    bursts = max(1, -(-jobs // depth))
    done = 0
    for burst in range(bursts):
        for item in range(1, depth + 1):
            if done == jobs:
                break
            timer = first if burst == 0 else last if burst == bursts - 1 else None
            job = gate_job(burst, item)
            if timer is None:
                result = run_merge_job(job, cache)
            else:
                with timer.block():
                    result = run_merge_job(job, cache)
            if not result.ok:
                raise SystemExit(f"gate job failed: {result.failure}")
            done += 1
    return first, last


def ref_counts(repo: Path, env: dict[str, str]) -> tuple[int, int]:
    """(refs, loose ref files) of a cache repo."""
    refs = _git(repo, env, "for-each-ref", "--format=%(refname)").split()
    loose = sum(len(files) for _dir, _subdirs, files in os.walk(repo / "refs"))
    return len(refs), loose


def history(
    args: argparse.Namespace,
    *,
    connections: dict[str, ConnectionSettings],
    remote: Path,
    env: dict[str, str],
    state: Path,
    time_noop: TimeNoop,
    measured: type[Any],
) -> None:
    """The no-op check merge with 0 and ``args.history`` earlier jobs in its cache."""
    gate_changes(remote, env, args.gate_depth)
    fresh = state / "fresh"
    time_noop(RepoCache(fresh, connections), remote, env, 1)  # cloned, two check merges
    aged = state / "aged"
    first, last = run_history(RepoCache(aged, connections), args.history, args.gate_depth, measured)
    packed = state / "packed"
    shutil.copytree(aged, packed, symlinks=True)
    _git(packed / "git" / "git" / "noop", env, "pack-refs", "--all")
    print(
        f"\nno-op check merge after {args.history} earlier gate jobs"
        f" (bursts of {args.gate_depth}) in its cache, beside a fresh one;"
        f" each trial of {HISTORY_ROUNDS} merges starts from a copy of the cache"
    )
    print(
        f"gate job CPU ms: first burst {first.cpu_ms:.1f}, last burst {last.cpu_ms:.1f}"
        f" (wall {1000 / first.rate:.1f} and {1000 / last.rate:.1f})"
    )
    caches = {
        "2 earlier jobs": fresh,
        f"{args.history} earlier": aged,
        f"{args.history}, refs packed": packed,
    }
    rows: dict[str, tuple[Any, float, float]] = {}
    for trial in range(args.trials):
        for name, template in caches.items():
            copy = state / f"trial-{trial}-{template.name}"
            shutil.copytree(template, copy, symlinks=True)
            timed = time_noop(RepoCache(copy, connections), remote, env, HISTORY_ROUNDS)
            shutil.rmtree(copy)
            if name not in rows or timed[0].cpu < rows[name][0].cpu:
                rows[name] = timed
    header = ("cache", "refs", "loose", "CPU ms/merge", "of which fetch", "git procs", "ms wall")
    print(
        f"{header[0]:<22} {header[1]:>6} {header[2]:>6} {header[3]:>12} {header[4]:>14}"
        f" {header[5]:>9} {header[6]:>8}"
    )
    for name, (timed, processes, fetch) in rows.items():
        refs, loose = ref_counts(caches[name] / "git" / "git" / "noop", env)
        print(
            f"{name:<22} {refs:>6} {loose:>6} {timed.cpu_ms:>12.1f} {fetch:>14.1f}"
            f" {processes:>9.1f} {1000 / timed.rate:>8.1f}"
        )


def _git(cwd: Path, env: dict[str, str], *args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True, check=True
    )
    return proc.stdout.decode().strip()
