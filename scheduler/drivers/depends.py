"""``Depends-On``: the changes a forge change says it needs, followed through the chain.

A pull or merge request's description names what it depends on, one
``Depends-On: <url>`` line each. :func:`needs_of` follows those through the
dependencies' own descriptions (at most :data:`MAX_DEPTH` deep), skips the
merged ones, and returns the rest deepest first, each as a change mapping
with its state (what pipeline requirements look at). A chain that comes
back to the change itself is a cycle, recorded by the change needing itself;
the changes of the cycle are marked (``"cycle": true``): the pipeline
refuses the cycle, or, where its queue allows circular dependencies,
tests, reports and merges them together (``scheduler/manager/cycles.py``).
A URL the forge answers 404 for names no change: as in Zuul, it is no
dependency.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.drivers import ForgeError

log = logging.getLogger(__name__)

MAX_DEPTH = 10
NOT_FOUND = 404


@dataclass(frozen=True)
class Found:
    """One change as its forge describes it: merged or not, its description, its mapping."""

    merged: bool
    description: str
    change: dict[str, Any]


def depends_on(pattern: re.Pattern[str], text: str) -> list[tuple[str, int]]:
    """The changes ``text`` names with ``Depends-On:`` lines (``project``, ``number`` groups)."""
    return [(m["project"], int(m["number"])) for m in pattern.finditer(text or "")]


def needs_of(
    pattern: re.Pattern[str],
    fetch: Callable[[str, int], Found],
    project: str,
    number: int,
    description: str,
) -> list[dict[str, Any]]:
    """The unmerged changes ``project``'s change ``number`` depends on, deepest first.

    The changes of its dependency cycle (those that need it back, directly or
    through others) are marked ``"cycle": true``, the change itself included.
    """
    me = (project, number)
    found: list[tuple[tuple[str, int], dict[str, Any]]] = []
    seen = {me}
    edges: dict[tuple[str, int], list[tuple[str, int]]] = {}

    def visit(node: tuple[str, int], text: str, depth: int) -> None:
        for dep in depends_on(pattern, text):
            edges.setdefault(node, []).append(dep)
            if dep == me:
                if all(key != me for key, _ in found):
                    found.append((me, fetch(project, number).change))
                continue
            if dep in seen or depth >= MAX_DEPTH:
                continue
            seen.add(dep)
            try:
                dependency = fetch(*dep)
            except ForgeError as exc:
                if exc.status != NOT_FOUND:
                    raise
                log.info("Depends-On %s %d of %s %d names nothing: %s", *dep, project, number, exc)
                continue
            if dependency.merged:
                continue
            visit(dep, dependency.description, depth + 1)
            found.append((dep, dependency.change))

    visit(me, description, 0)
    cycle = in_cycle_with(me, edges)
    return [{**change, "cycle": True} if key in cycle else change for key, change in found]


def in_cycle_with(
    node: tuple[str, int], edges: Mapping[tuple[str, int], list[tuple[str, int]]]
) -> set[tuple[str, int]]:
    """The changes that reach ``node`` back through the ``Depends-On`` edges (its cycle)."""
    reach = {node}
    grew = True
    while grew:
        grew = False
        for source, targets in edges.items():
            if source not in reach and any(t in reach for t in targets):
                reach.add(source)
                grew = True
    return reach if len(reach) > 1 else set()


def url_pattern(path: str) -> re.Pattern[str]:
    """A ``Depends-On: <url>`` line whose URL path ends in ``path`` (a regex naming
    ``project`` and ``number``)."""
    return re.compile(
        rf"^\s*Depends-On:\s*(?:https?://)?[^/\s]+/{path}\s*$", re.IGNORECASE | re.MULTILINE
    )


def parents(
    number: int,
    commits: set[str],
    open_changes: Iterable[tuple[int, str, Mapping[str, Any]]],
    dependency: Callable[[int, Mapping[str, Any]], dict[str, Any]],
) -> list[dict[str, Any]]:
    """Open changes (number, head sha, the forge's record) whose head is among ``commits``.

    A change whose branch was made from another's depends on it: git parents.
    """
    return [dependency(n, c) for n, sha, c in open_changes if n != number and sha in commits]


def combined(
    parent_needs: list[dict[str, Any]], named: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Git parents first, then ``Depends-On`` ones not among them."""
    refs = {n["ref"] for n in parent_needs}
    return parent_needs + [n for n in named if n["ref"] not in refs]
