"""What a new file costs in each folder that Sluice writes to, beside a tmpfs.

On a file system without a journal, ext4 passes over every free inode
deleted in the last 30 s, reading each one's on-disk record to find out;
a folder whose block group has seen much churn (``/tmp``, where tests and
benchmarks make and remove everything) pays for it on every create. Git
writes a file or folder per ref and per loose object, the executor a log
folder per build, so this cost shows in their CPU (docs/performance.md,
"The host").

For each ``--folder`` (default: ``$TMPDIR`` or ``/tmp``, and ``.sluice``,
the default state dir, in the current folder), a scratch folder is made
in it, ``--files`` files are created (written, closed) and then removed;
the figure is the CPU per create, beside the same on ``/dev/shm``, and the
ratio. Smoke mode in CI (``tests/bench/test_smoke.py``):
``.venv/bin/python bench/inodes.py --files 20``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

BASELINE = Path("/dev/shm")


def create_cost(folder: Path, files: int) -> float:
    """CPU ms per file created in a new scratch folder under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="sluice-inodes-", dir=folder))
    try:
        started = time.process_time()
        for n in range(files):
            with open(scratch / f"f{n}", "w") as out:
                out.write("x")
        spent = time.process_time() - started
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1000 * spent / files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--folder", type=Path, action="append", help="repeatable")
    args = parser.parse_args()
    folders = args.folder or [
        Path(os.environ.get("TMPDIR", "/tmp")),
        Path(".sluice").resolve(),
    ]
    baseline = create_cost(BASELINE, args.files)
    print(f"{'folder':40} {'CPU ms per create':>18} {'/ tmpfs':>8}")
    print(f"{'baseline: ' + str(BASELINE):40} {baseline:18.3f} {1.0:8.1f}")
    for folder in folders:
        cost = create_cost(folder, args.files)
        print(f"{folder!s:40} {cost:18.3f} {cost / max(baseline, 1e-6):8.1f}")


if __name__ == "__main__":
    main()
