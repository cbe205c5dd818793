"""Which files of a repository branch hold its configuration, in what order.

The input is a mapping ``path -> text`` (from a merger, the ZooKeeper
config cache or a local checkout); only the paths below are looked at.

Zuul's rule, kept: the first of ``zuul.yaml``, ``zuul.d/``, ``.zuul.yaml``,
``.zuul.d/`` that exists is the project's configuration; the others are
ignored with a warning. Files of a ``*.d/`` directory (``.yaml`` files, in
sub-directories too) load in sorted path order.

Then, always and in this order: the tenant's ``extra-config-paths`` for the
project (a file, or a directory when it ends with ``/``), and last Sluice's
own ``.sluice.yaml``. ``.sluice.yaml`` therefore *adds* to the Zuul
configuration rather than replacing it: a repository tested by both Zuul
and Sluice keeps its Zuul files and puts what only Sluice should see in
``.sluice.yaml``. Objects from all files are combined in load order (a
job defined twice is two variants, the later applied after the earlier).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.config.schema import repo_path_problem

ZUUL_ROOTS = ("zuul.yaml", "zuul.d/", ".zuul.yaml", ".zuul.d/")
SLUICE_FILE = ".sluice.yaml"


@dataclass(frozen=True)
class FileSelection:
    paths: tuple[str, ...]
    ignored: tuple[str, ...]
    refused: tuple[tuple[str, str], ...]  # (path, why)


def _under(root: str, paths: Sequence[str]) -> list[str]:
    if root.endswith("/"):
        return sorted(p for p in paths if p.startswith(root) and p.endswith(".yaml"))
    return [root] if root in paths else []


def select_config_files(files: Mapping[str, str], extra: Sequence[str] = ()) -> FileSelection:
    """The paths of ``files`` to parse, in load order."""
    refused = tuple(sorted((p, why) for p in files if (why := repo_path_problem(p))))
    paths = sorted(p for p in files if not repo_path_problem(p))
    chosen: list[str] = []
    ignored: list[str] = []
    for root in ZUUL_ROOTS:
        found = _under(root, paths)
        if found and not chosen:
            chosen = found
        elif found:
            ignored.extend(found)
    for root in (*extra, SLUICE_FILE):
        chosen.extend(p for p in _under(root, paths) if p not in chosen)
    return FileSelection(tuple(chosen), tuple(p for p in ignored if p not in chosen), refused)
