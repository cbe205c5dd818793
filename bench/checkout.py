"""CPU per workspace checkout: in-process (treecheckout) beside ``git checkout``.

For trees of a few sizes (text files of about 5 KiB in folders of 20, with
a history where two thirds of them changed a little, packed by ``git gc``:
many blobs are deltas; the commit checked out is loose on top, as a
merger's merge is), measures :func:`workers.executor.workspace.checkout`
of the same commit with the in-process checkout and with it turned off
(``git checkout``, the baseline), in alternating slices of the same run.
Prints per checkout: wall time, CPU of this process and of its children
(git), git processes. ``--tree old`` checks out the first commit instead;
``--loose`` leaves every object loose (no ``gc``). Both sides write the
same files, so the file system's share of the CPU is the same on both
(``--tmp /dev/shm`` makes it small). ``--max-files`` lifts
``treecheckout.MAX_FILES`` to see where git gets cheaper. Not run in CI:
``.venv/bin/python bench/checkout.py [--seconds 2] [--sizes 10 100]``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _slices import Side as Slices

from workers.executor import treecheckout, workspace

SIZES = (10, 50, 100, 300, 1000, 3000)
SLICE = 0.25
WORDS = ("alpha", "beta", "gamma", "delta", "build", "merge", "queue", "change", "tree")


@dataclass
class Side(Slices):
    git: int = 0  # git processes started


def make_repo(base: Path, files: int, tree: str, loose: bool = False) -> tuple[Path, str]:
    """A packed repository of ``files`` files with some history; path, commit to check out."""
    repo = base / f"repo-{files}"
    repo.mkdir(parents=True)

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True)
        return done.stdout.decode().strip()

    git("init", "-q", "--initial-branch=main")
    rng = random.Random(files)
    bodies = [  # unlike each other, as source files are: deltas only of their own versions
        [f"{n}.{line} " + " ".join(rng.choices(WORDS, k=8)) + "\n" for line in range(90)]
        for n in range(files)
    ]
    for version in range(3):
        for n, body in enumerate(bodies):
            if version and n % 3 == version - 1:
                body[rng.randrange(len(body))] = f"changed in version {version}\n"
            path = repo / f"dir{n // 20}" / f"file{n}.txt"
            path.parent.mkdir(exist_ok=True)
            path.write_text("".join(body))
        git("add", "-A")
        git("commit", "-q", "-m", f"version {version}")
    if not loose:
        git("gc", "-q", "--prune=now")
    start = "HEAD" if tree == "head" else "HEAD~2"
    return repo, git("commit-tree", "-p", "HEAD", "-m", "a merge", f"{start}^{{tree}}")


def lifecycle(repo: Path, commit: str, work: Path, calls: list[str]) -> Callable[[], None]:
    def op() -> None:
        workspace.checkout(str(repo), work / "project", {"main": commit}, "main")
        shutil.rmtree(work)

    return op


def compare(seconds: float, ops: list[Callable[[], None]], calls: list[str]) -> list[Side]:
    """Runs of each op in alternating slices (the second one with git only)."""
    sides = [Side() for _ in ops]
    never = mock.patch.object(workspace, "checkout_commit", lambda *args, **kwargs: False)
    while sum(side.wall for side in sides) < len(ops) * seconds:
        for number, (side, op) in enumerate(zip(sides, ops, strict=True)):
            if number:
                never.start()
            op()  # warm-up of this side
            calls.clear()
            before, started = os.times(), time.perf_counter()
            while time.perf_counter() - started < SLICE:
                op()
                side.count += 1
            after = os.times()
            side.wall += time.perf_counter() - started
            side.git += len(calls)
            side.cpu_self += after.user + after.system - before.user - before.system
            side.cpu_children += sum(after[2:4]) - sum(before[2:4])
            if number:
                never.stop()
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per size and side")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--tree", choices=("head", "old"), default="head")
    parser.add_argument("--loose", action="store_true", help="no gc: every object loose")
    parser.add_argument("--tmp", help="folder for the repositories and checkouts")
    parser.add_argument("--max-files", type=int, help="treecheckout.MAX_FILES for this run")
    args = parser.parse_args()
    if args.max_files is not None:
        treecheckout.MAX_FILES = args.max_files
    os.environ.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="Bench",
        GIT_AUTHOR_EMAIL="bench@example.invalid",
        GIT_COMMITTER_NAME="Bench",
        GIT_COMMITTER_EMAIL="bench@example.invalid",
    )
    calls: list[str] = []
    real_git = workspace._git

    def counting(cmd: list[str], *rest: object, **kw: object) -> str:
        calls.append(cmd[0])
        return real_git(cmd, *rest, **kw)  # type: ignore[arg-type]

    print(f"{'files':>6} {'side':11} {'ms each':>8} {'CPU ms':>7} {'children':>8} {'git':>4}")
    with tempfile.TemporaryDirectory(prefix="sluice-bench-", dir=args.tmp) as tmp:
        base = Path(tmp)
        with mock.patch.object(workspace, "_git", counting):
            for files in args.sizes:
                repo, commit = make_repo(base / "repos", files, args.tree, args.loose)
                op = lifecycle(repo, commit, base / "work", calls)
                sides = compare(args.seconds, [op, op], calls)
                for name, side in zip(("in-process", "git"), sides, strict=True):
                    print(
                        f"{files:6} {name:11} {side.ms(side.wall):8.2f}"
                        f" {side.ms(side.cpu_self):7.2f} {side.ms(side.cpu_children):8.2f}"
                        f" {side.git / side.count:4.1f}"
                    )


if __name__ == "__main__":
    main()
