"""Print where the workers' pool processes spent their CPU (``SLUICE_PROFILE_DIR``'s files).

Run a benchmark with ``SLUICE_PROFILE_DIR=DIR`` in its environment (its
workers inherit it; tasks/profiling.py), then
``.venv/bin/python bench/profiles.py DIR [--top 25]``. The processes are
grouped by the Sluice task that took most of their time (the build, merge
or pipeline task), their profiles merged, and each group's functions
printed by their own time and then by cumulative time.
"""

from __future__ import annotations

import argparse
import io
import pstats
from collections import defaultdict
from pathlib import Path

TASK_FILES = ("tasks/executor.py", "tasks/merger.py", "tasks/scheduler.py", "tasks/launcher.py")


def _kind(stats: pstats.Stats) -> str:
    """The task function (in tasks/) with the most cumulative time in ``stats``."""
    best, kind = 0.0, "other"
    table = stats.stats  # type: ignore[attr-defined]
    for (filename, _, name), (_, _, _, cumulative, _) in table.items():
        if filename.endswith(TASK_FILES) and cumulative > best:
            best, kind = cumulative, f"{Path(filename).stem}.{name}"
    return kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    groups: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(args.folder.glob("*.prof")):
        groups[_kind(pstats.Stats(str(path)))].append(path)
    for kind, files in sorted(groups.items()):
        merged = pstats.Stats(*(str(f) for f in files), stream=io.StringIO())
        out = io.StringIO()
        merged.stream = out  # type: ignore[attr-defined]
        merged.sort_stats("tottime").print_stats(args.top)
        merged.sort_stats("cumulative").print_stats(args.top)
        print(f"==== {kind}: {len(files)} process(es)")
        print(out.getvalue())


if __name__ == "__main__":
    main()
