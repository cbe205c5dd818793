"""Reading configuration files from a local checkout (the only I/O here).

A merger or the CLI hands :func:`read_checkout` a repository working tree;
it returns the ``path -> text`` mapping that
:func:`~scheduler.config.loader.build_layout` takes. Only the candidate
paths are read (:data:`~scheduler.config.files.ZUUL_ROOTS`,
``.sluice.yaml`` and the tenant's extra config paths), and nothing outside
the tree: symbolic links are not followed, and a file whose real path
leaves the root is skipped. Files over the YAML size limit are cut one
byte past it so the loader reports them; undecodable bytes become lone
surrogates, which the YAML reader refuses with a clear error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from scheduler.config.files import SLUICE_FILE, ZUUL_ROOTS
from scheduler.config.schema import repo_path_problem
from scheduler.config.yamlload import MAX_BYTES


def candidate_paths(paths: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """The paths of a tree listing that may hold configuration, sorted."""
    roots = (*ZUUL_ROOTS, SLUICE_FILE, *extra)
    return sorted(
        p
        for p in paths
        if not repo_path_problem(p)
        and any(
            p == r or (r.endswith("/") and p.startswith(r) and p.endswith(".yaml")) for r in roots
        )
    )


def _walk(root: Path, top: str) -> list[str]:
    found: list[str] = []
    start = root / top
    if start.is_symlink() or not start.is_dir():
        return found
    for folder, dirs, files in os.walk(start, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not (Path(folder) / d).is_symlink())
        rel = Path(folder).relative_to(root).as_posix()
        found.extend(f"{rel}/{name}" for name in files)
    return found


def _read(root: Path, path: str) -> str | None:
    full = root / path
    if full.is_symlink() or not full.is_file():
        return None
    real = full.resolve()
    if not real.is_relative_to(root.resolve()):
        return None
    with real.open("rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    return data.decode("utf-8", "surrogateescape")


def read_checkout(root: Path, extra: Iterable[str] = ()) -> dict[str, str]:
    """Configuration files of the working tree at ``root``: path -> text."""
    extra = tuple(extra)
    listing: list[str] = []
    for top in (*ZUUL_ROOTS, SLUICE_FILE, *extra):
        if top.endswith("/"):
            listing.extend(_walk(root, top.rstrip("/")))
        else:
            listing.append(top)
    result: dict[str, str] = {}
    for path in candidate_paths(listing, extra):
        text = _read(root, path)
        if text is not None:
            result[path] = text
    return result
