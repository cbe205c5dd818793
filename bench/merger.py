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
alternated, since a shared machine is noisy), their ratio, and the CPU per
job of this process and its git children (``os.times``: user + system,
own + reaped children), where *git* is the baseline.

Then the **no-op check merge** (issue 17), what most merges of a busy
system are: a new change whose parent is the branch tip, no config
change, given by ref and commit as the scheduler gives it, on a warm cache.
It prints the CPU per merge (own + git children) and how much of it the
fetch took (with a local remote, the remote's side too), the git processes
per merge (every ``Git.run`` and ``Git.popen`` counted: the cat-file
process is one), and, as the baseline, the CPU of one trivial git process
spawned the same way, so the figure reads in git processes on any machine.
A second row does the same for a change made on the tip ``main`` had
before it moved on (a real merge, as most changes of a busy branch are).

With ``--history N``, only the **no-op check merge after a long life**
(``bench/merger_history.py``): the same merge in a cache repo that ``N``
earlier gate jobs used, beside a cache that none used, so the cost of the
refs those jobs leave shows.

Not a timed test; run by hand:
``.venv/bin/python bench/merger.py [--rounds N] [--trials N] [--mode MODE]
[--noop-only] [--history N [--gate-depth N]]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from merger_history import history

from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import MergeChange, MergeJob, MergeMode
from workers.merger import RepoCache, run_merge_job
from workers.merger.gitcmd import Git

STACKS = (1, 5, 20)
OLDER_TIP = "older-tip"  # the tag of main's tip before it moved on (build_noop_remote)


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


def cpu_seconds() -> float:
    """CPU of this process and its reaped children (git), user + system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Measured:
    """Wall time and CPU (own + children) summed over measured blocks."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self.count = 0

    @contextmanager
    def block(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), cpu_seconds()
        yield
        self.wall += time.perf_counter() - wall
        self.cpu += cpu_seconds() - cpu
        self.count += 1

    @property
    def rate(self) -> float:
        return self.count / self.wall

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu / self.count


class GitProcesses:
    """The git processes the merger started, and the CPU of its fetches."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.fetch_cpu = 0.0


@contextmanager
def counting_git() -> Iterator[GitProcesses]:
    """Count every git process the merger starts (``Git.run`` and ``Git.popen``)."""
    seen = GitProcesses()
    patched: dict[str, Callable[..., Any]] = {}
    for name in ("run", "popen"):
        real = getattr(Git, name, None)
        if real is None:
            continue
        patched[name] = real

        def counted(self: Git, args: Any, *rest: Any, _real: Any = real, **kw: Any) -> Any:
            seen.started.append(args[0])
            if args[0] != "fetch":
                return _real(self, args, *rest, **kw)
            cpu = cpu_seconds()
            try:
                return _real(self, args, *rest, **kw)
            finally:
                seen.fetch_cpu += cpu_seconds() - cpu

        setattr(Git, name, counted)
    try:
        yield seen
    finally:
        for name, real in patched.items():
            setattr(Git, name, real)


def time_sluice(cache: RepoCache, stack: int, rounds: int, mode: MergeMode) -> Measured:
    """Every merge done afresh: change names differ per round, so the memo never hits."""
    run_merge_job(stack_job("warm", stack, mode, "@warm"), cache)
    measured = Measured()
    for r in range(rounds):
        job = stack_job(f"bench-{stack}-{r}", stack, mode, f"@{time.time_ns()}")
        with measured.block():
            result = run_merge_job(job, cache)
        if not result.ok:
            raise SystemExit(f"merge failed: {result.failure}")
    return measured


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


def time_git(clone: Path, env: dict[str, str], stack: int, rounds: int) -> Measured:
    measured = Measured()
    for _ in range(rounds):
        with measured.block():
            git(clone, env, "checkout", "--quiet", "--force", "--detach", "origin/main")
            for n in range(1, stack + 1):
                git(clone, env, "merge", "--quiet", "--no-edit", f"refs/changes/{n}")
    return measured


def build_noop_remote(base: Path, env: dict[str, str], files: int) -> Path:
    """A project of ``files`` files with config (``zuul.yaml``, ``zuul.d/``) on ``main``."""
    work = base / "noop-work"
    work.mkdir(parents=True)
    git(work, env, "init", "--quiet", "--initial-branch=main")
    for i in range(files):
        sub = work / f"dir{i % 20:02d}"
        sub.mkdir(exist_ok=True)
        (sub / f"file{i:04d}.txt").write_text(f"line one of {i}\n")
    (work / "zuul.yaml").write_text("- project: {check: {jobs: [unit]}}\n")
    (work / "zuul.d").mkdir()
    for name in ("jobs", "pipelines", "nodesets"):
        (work / "zuul.d" / f"{name}.yaml").write_text(f"# {name}\n" + "- job: {name: x}\n" * 50)
    git(work, env, "add", "-A")
    git(work, env, "commit", "--quiet", "-m", "initial")
    git(work, env, "tag", OLDER_TIP)  # where a change made before main moved on sits
    (work / "moved.txt").write_text("main moved on\n")
    git(work, env, "add", "-A")
    git(work, env, "commit", "--quiet", "-m", "main moved on")
    remote = base / "remotes" / "noop"
    git(base, env, "clone", "--quiet", "--bare", str(work), str(remote))
    return remote


def new_noop_change(
    remote: Path, env: dict[str, str], n: int, parent: str = "refs/heads/main"
) -> str:
    """A change ``refs/changes/noop/<n>`` on top of ``parent``: one file edited, no config."""
    blob = (
        subprocess.run(
            ["git", "hash-object", "-w", "--stdin"],
            cwd=remote,
            env=env,
            input=f"edit {n}\n".encode(),
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    index = {**env, "GIT_INDEX_FILE": str(remote / "bench-index")}
    for args in (
        ("read-tree", parent),
        ("update-index", "--add", "--cacheinfo", f"100644,{blob},dir03/file0003.txt"),
    ):
        subprocess.run(["git", *args], cwd=remote, env=index, check=True)
    tree = git(remote, index, "write-tree")
    sha = git(remote, env, "commit-tree", tree, "-p", parent, "-m", f"noop {n}")
    git(remote, env, "update-ref", f"refs/changes/noop/{n}", sha)
    return sha


def time_noop(
    cache: RepoCache, remote: Path, env: dict[str, str], rounds: int, *, older: bool = False
) -> tuple[Measured, float, float]:
    """No-op check merges on a warm cache: them, git processes and fetch CPU ms per merge.

    ``older``: each change is made on the tip ``main`` had before it moved on
    (a real merge), not on ``main`` (a fast-forward).
    """
    measured = Measured()
    processes = 0
    fetch_cpu = 0.0
    parent = f"refs/tags/{OLDER_TIP}" if older else "refs/heads/main"
    for r in range(-1, rounds):  # round -1 warms the cache (clone, first check)
        sha = new_noop_change(remote, env, time.time_ns(), parent)
        ref = git(remote, env, "for-each-ref", "--format=%(refname)", "--points-at", sha)
        change = MergeChange("git", "noop", "main", ref=ref, commit=sha, change_id=f"c{r}")
        job = MergeJob(f"noop-{time.time_ns()}", (change,))
        with counting_git() as seen:
            if r < 0:
                result = run_merge_job(job, cache)
            else:
                with measured.block():
                    result = run_merge_job(job, cache)
                processes += len(seen.started)
                fetch_cpu += seen.fetch_cpu
        fast_forward = result.ok and result.changes[0].merged_commit == sha
        if not result.ok or not result.config or fast_forward == older:
            raise SystemExit(f"no-op merge failed: {result.failure or result}")
    return measured, processes / rounds, 1000 * fetch_cpu / rounds


def time_one_git_process(env: Mapping[str, str], cwd: Path, rounds: int) -> float:
    """CPU ms of one trivial git process (``git rev-parse HEAD``) spawned like the merger's."""
    runner = Git(env)
    measured = Measured()
    for _ in range(rounds):
        with measured.block():
            runner.run(["rev-parse", "HEAD"], cwd)
    return measured.cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="merge jobs per stack size")
    parser.add_argument("--trials", type=int, default=3, help="best of this many runs")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--mode", default="merge", choices=[m.value for m in MergeMode])
    parser.add_argument("--noop-only", action="store_true", help="only the no-op check merge")
    parser.add_argument(
        "--history", type=int, default=0, help="only the no-op merge after this many gate jobs"
    )
    parser.add_argument("--gate-depth", type=int, default=20, help="items per gate burst")
    args = parser.parse_args()
    mode = MergeMode(args.mode)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        base = Path(tmp)
        env = git_env(base / "home")
        (base / "home").mkdir()
        if args.history:
            remote = build_noop_remote(base, env, args.files)
            connections = {"git": ConnectionSettings("git", "git", str(remote.parent))}
            history(
                args,
                connections=connections,
                remote=remote,
                env=env,
                state=base / "state",
                time_noop=time_noop,
                measured=Measured,
            )
            return
        remote = build_remote(base, env, args.files, max(STACKS))
        connections = {"git": ConnectionSettings("git", "git", str(remote.parent))}
        cache = RepoCache(base / "state", connections)
        if not args.noop_only:
            stacks(args, mode, cache=cache, remote=remote, base=base, env=env)
        noop(args, cache=cache, remote=build_noop_remote(base, env, args.files), env=env)


def noop(args: argparse.Namespace, *, cache: RepoCache, remote: Path, env: dict[str, str]) -> None:
    """The no-op check merge: CPU per merge (of which the fetch), git processes, baseline."""
    print(f"\nno-op check merge ({args.files} files, config in zuul.yaml and zuul.d/)")
    one = min(time_one_git_process(cache.git.env, remote, args.rounds) for _ in range(args.trials))
    header = ("change made on", "CPU ms/merge", "of which fetch", "git processes", "ms wall")
    print(f"{header[0]:<16} {header[1]:>12} {header[2]:>15} {header[3]:>14} {header[4]:>8}")
    for older, where in ((False, "the tip"), (True, "an older tip")):
        best: tuple[Measured, float, float] | None = None
        for _ in range(args.trials):
            trial = time_noop(cache, remote, env, args.rounds, older=older)
            best = trial if best is None or trial[0].cpu < best[0].cpu else best
        assert best is not None
        measured, processes, fetch = best
        print(
            f"{where:<16} {measured.cpu_ms:>12.1f} {fetch:>15.1f} {processes:>14.1f}"
            f" {1000 / measured.rate:>8.1f}"
        )
    print(f"baseline: one git process that does nothing, {one:.1f} ms of CPU")


def stacks(
    args: argparse.Namespace,
    mode: MergeMode,
    *,
    cache: RepoCache,
    remote: Path,
    base: Path,
    env: dict[str, str],
) -> None:
    """The stack table: jobs/s and CPU ms per job, sluice against plain ``git merge``."""
    clone = base / "clone"
    git(base, env, "clone", "--quiet", str(remote), str(clone))
    git(clone, env, "fetch", "--quiet", "origin", "refs/changes/*:refs/changes/*")
    print(f"{args.files} files, mode {mode}, {args.rounds} rounds per stack")
    header = (
        "stack",
        "sluice jobs/s",
        "git jobs/s",
        "ratio",
        "gate jobs/s",
        "CPU ms sluice",
        "git",
    )
    print(
        f"{header[0]:>5} {header[1]:>14} {header[2]:>11} {header[3]:>6} {header[4]:>12}"
        f" {header[5]:>14} {header[6]:>6}"
    )
    for stack in STACKS:
        sluice = plain = gate = 0.0
        sluice_cpu = plain_cpu = float("inf")
        for _ in range(args.trials):
            ours = time_sluice(cache, stack, args.rounds, mode)
            theirs = time_git(clone, env, stack, args.rounds)
            sluice, sluice_cpu = max(sluice, ours.rate), min(sluice_cpu, ours.cpu_ms)
            plain, plain_cpu = max(plain, theirs.rate), min(plain_cpu, theirs.cpu_ms)
            gate = max(gate, time_sluice_gate(cache, stack, args.rounds, mode))
        print(
            f"{stack:>5} {sluice:>14.1f} {plain:>11.1f} {sluice / plain:>6.2f} {gate:>12.1f}"
            f" {sluice_cpu:>14.1f} {plain_cpu:>6.1f}"
        )


if __name__ == "__main__":
    main()
