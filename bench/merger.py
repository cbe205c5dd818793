"""Merger throughput: speculative merges per second against plain ``git merge``.

For stacks of 1, 5 and 20 changes on a repository of 1,000 files (``main``
moved on after the changes were written, so every merge is a real
three-way merge), time:

* **sluice**: ``run_merge_job`` on a warm repo cache (fetch, worktree reset,
  merges, refs, files per change, config files);
* **git**: the same merges run directly with ``git merge`` in a clone
  (reset to ``main``, then one ``git merge`` per change), nothing else;
* **gate**: ``run_merge_job`` as a gate calls it, for the item that has
  ``stack - 1`` items ahead, just merged: the memo of merges supplies the
  states ahead and only the last change is merged.

In the first two every merge is done afresh (new change names each round,
so the memo never hits).

Prints jobs per second for both (the best of ``--trials`` runs of each,
alternated, since a shared machine is noisy) and their ratio. Not a timed
test; run by hand:
``.venv/bin/python bench/merger.py [--rounds N] [--trials N] [--mode MODE]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.settings import ConnectionSettings
from scheduler.wire.merger import MergeChange, MergeJob, MergeMode
from workers.merger import RepoCache, run_merge_job

STACKS = (1, 5, 20)


def git_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "Bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }


def git(cwd: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=True)
    return proc.stdout.decode().strip()


def build_remote(base: Path, env: dict[str, str], files: int, changes: int) -> Path:
    """A project with ``files`` files, a stack of changes, and ``main`` moved on."""
    work = base / "work"
    work.mkdir(parents=True)
    git(work, env, "init", "--quiet", "--initial-branch=main")
    for i in range(files):
        sub = work / f"dir{i % 20:02d}"
        sub.mkdir(exist_ok=True)
        (sub / f"file{i:04d}.txt").write_text(f"line one of {i}\nline two\nline three\n")
    (work / "zuul.yaml").write_text("- job: {name: base}\n")
    git(work, env, "add", "-A")
    git(work, env, "commit", "--quiet", "-m", "initial")
    for n in range(1, changes + 1):
        path = work / f"dir{n % 20:02d}" / f"file{n:04d}.txt"
        path.write_text(path.read_text() + f"change {n}\n")
        git(work, env, "commit", "--quiet", "-am", f"change {n}")
        git(work, env, "update-ref", f"refs/changes/{n}", "HEAD")
    git(work, env, "checkout", "--quiet", "-B", "main", "HEAD~" + str(changes))
    upstream = work / "dir19" / "file0999.txt"
    upstream.write_text("upstream moved\n")
    git(work, env, "commit", "--quiet", "-am", "upstream")
    remote = base / "remotes" / "bench"
    remote.parent.mkdir(parents=True)
    git(base, env, "clone", "--quiet", "--bare", str(work), str(remote))
    git(work, env, "push", "--quiet", str(remote), "refs/changes/*:refs/changes/*")
    return remote


def stack_job(job_id: str, stack: int, mode: MergeMode, tag: str) -> MergeJob:
    """Changes 1..stack; ``tag`` makes the change names (and so the memo keys) new."""
    changes = tuple(
        MergeChange(
            "git", "bench", "main", ref=f"refs/changes/{n}", merge_mode=mode, change_id=f"{n}{tag}"
        )
        for n in range(1, stack + 1)
    )
    return MergeJob(job_id, changes)


def time_sluice(cache: RepoCache, stack: int, rounds: int, mode: MergeMode) -> float:
    """Every merge done afresh: change names differ per round, so the memo never hits."""
    run_merge_job(stack_job("warm", stack, mode, "@warm"), cache)
    elapsed = 0.0
    for r in range(rounds):
        job = stack_job(f"bench-{stack}-{r}", stack, mode, f"@{time.time_ns()}")
        started = time.perf_counter()
        result = run_merge_job(job, cache)
        elapsed += time.perf_counter() - started
        if not result.ok:
            raise SystemExit(f"merge failed: {result.failure}")
    return rounds / elapsed


def time_sluice_gate(cache: RepoCache, stack: int, rounds: int, mode: MergeMode) -> float:
    """A gate's item ``stack``: the items ahead were merged (the memo has them) just before."""
    elapsed = 0.0
    for r in range(rounds):
        tag = f"@{time.time_ns()}"
        if stack > 1:
            run_merge_job(stack_job(f"ahead-{stack}-{r}", stack - 1, mode, tag), cache)
        started = time.perf_counter()
        result = run_merge_job(stack_job(f"gate-{stack}-{r}", stack, mode, tag), cache)
        elapsed += time.perf_counter() - started
        if not result.ok:
            raise SystemExit(f"merge failed: {result.failure}")
    return rounds / elapsed


def time_git(clone: Path, env: dict[str, str], stack: int, rounds: int) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        git(clone, env, "checkout", "--quiet", "--force", "--detach", "origin/main")
        for n in range(1, stack + 1):
            git(clone, env, "merge", "--quiet", "--no-edit", f"refs/changes/{n}")
    return rounds / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="merge jobs per stack size")
    parser.add_argument("--trials", type=int, default=3, help="best of this many runs")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--mode", default="merge", choices=[m.value for m in MergeMode])
    args = parser.parse_args()
    mode = MergeMode(args.mode)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        base = Path(tmp)
        env = git_env(base / "home")
        (base / "home").mkdir()
        remote = build_remote(base, env, args.files, max(STACKS))
        connections = {"git": ConnectionSettings("git", "git", str(remote.parent))}
        cache = RepoCache(base / "state", connections)
        clone = base / "clone"
        git(base, env, "clone", "--quiet", str(remote), str(clone))
        git(clone, env, "fetch", "--quiet", "origin", "refs/changes/*:refs/changes/*")
        print(f"{args.files} files, mode {mode}, {args.rounds} rounds per stack")
        header = ("stack", "sluice jobs/s", "git jobs/s", "ratio", "gate jobs/s")
        print(f"{header[0]:>5} {header[1]:>14} {header[2]:>11} {header[3]:>6} {header[4]:>12}")
        for stack in STACKS:
            sluice = plain = gate = 0.0
            for _ in range(args.trials):
                sluice = max(sluice, time_sluice(cache, stack, args.rounds, mode))
                plain = max(plain, time_git(clone, env, stack, args.rounds))
                gate = max(gate, time_sluice_gate(cache, stack, args.rounds, mode))
            print(f"{stack:>5} {sluice:>14.1f} {plain:>11.1f} {sluice / plain:>6.2f} {gate:>12.1f}")


if __name__ == "__main__":
    main()
