"""The house's import rules (docs/architecture.md, "The layers"), checked on the source.

The floors of the brain and what the hands may use are read from the
tables of docs/architecture.md itself, so the document and the check
cannot drift apart.

Every import counts: those inside functions (a lazy import that only dodges
a circle is still a circle) and those under ``if TYPE_CHECKING:`` (a type
that needs its user's module is a circle of roles too).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler", "workers", "tasks", "web", "cli")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules and third-party top-level names it imports."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                # "from package import module" imports the module; else the package
                named = [f"{base}.{alias.name}" for alias in node.names]
                targets = [t for t in named if t in modules] or [base]
            else:
                continue
            for target in targets:
                if target in modules:
                    edges[name].add(target)
                elif target.split(".")[0] not in PACKAGES:
                    edges[name].add(target.split(".")[0])
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


# The kazoo layer imports nothing of the project but the floor's leaves
# (the error tree, process-local values).
ZK_MAY_IMPORT = (
    "scheduler.zk",
    "scheduler.errors",
    "scheduler.processlocal",
)

MODULES = _modules()
EDGES = _imports(MODULES)

# The settings package is a leaf whose modules may use one another: the
# settings' dataclasses, the reader of sluice.yaml, the environment's
# overrides, the credentials that complete them, the images and nodes sections.
SETTINGS_LEAVES = {name for name in MODULES if name.startswith("scheduler.settings.")}


def _project_edges(group: int | None) -> dict[str, set[str]]:
    """Edges between project modules, or between their first ``group`` name parts."""

    def key(name: str) -> str:
        return name if group is None else ".".join(name.split(".")[:group])

    collapsed: dict[str, set[str]] = defaultdict(set)
    for source, targets in EDGES.items():
        for target in targets:
            if target in MODULES and key(source) != key(target):
                collapsed[key(source)].add(key(target))
    return collapsed


def test_no_module_imports_itself_in_a_circle() -> None:
    assert _cycles(_project_edges(None)) == []


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_no_package_imports_itself_in_a_circle(depth: int) -> None:
    # scheduler.layouts -> scheduler.processing -> scheduler.layouts is a circle too
    assert _cycles(_project_edges(depth)) == []


FACE_ENTRIES = {("cli.commands.web", "web.app")}


def _offenders(rule: str) -> list[str]:
    bad = []
    for source, targets in sorted(EDGES.items()):
        for target in sorted(targets):
            if _breaks(rule, source, target):
                bad.append(f"{source} imports {target}")
    return bad


def _breaks(rule: str, source: str, target: str) -> bool:
    top_source, top_target = source.split(".", maxsplit=1)[0], target.split(".", maxsplit=1)[0]
    if rule == "zk-leaf":
        inside = source.startswith("scheduler.zk")
        return inside and target in MODULES and not target.startswith(ZK_MAY_IMPORT)
    if rule == "kazoo":
        return top_target == "kazoo" and not source.startswith(("scheduler.zk", "scheduler.stores"))
    if rule == "faces":
        # nothing imports the faces (tasks/, web/, cli/) but the face itself,
        # and the command that serves a face (`sluice web` runs web.app)
        if (source, target) in FACE_ENTRIES:
            return False
        return top_target in ("tasks", "web", "cli") and top_source != top_target
    if rule == "brain":
        return top_source == "scheduler" and top_target == "workers"
    raise AssertionError(rule)


def test_zookeeper_layer_is_a_leaf() -> None:
    assert _offenders("zk-leaf") == []


def test_what_the_zookeeper_layer_may_import_are_leaves() -> None:
    for leaf in ZK_MAY_IMPORT[1:]:
        assert {t for t in EDGES[leaf] if t in MODULES} == set(), leaf


def test_only_the_zookeeper_layer_imports_kazoo() -> None:
    assert _offenders("kazoo") == []


def test_nothing_imports_the_faces() -> None:
    assert _offenders("faces") == []


def test_the_scheduler_never_imports_the_workers() -> None:
    assert _offenders("brain") == []


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _table(first_header: str) -> list[list[str]]:
    """The rows of the table of docs/architecture.md whose first column is ``first_header``."""
    lines = ARCHITECTURE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


FLOORS = {room: int(row[0]) for row in _table("floor") for room in _names(row[1])}
HANDS_MAY_USE = {row[0].strip("`/"): set(_names(row[1])) for row in _table("package")}


def _room(module: str) -> str | None:
    """``scheduler.zk.client`` -> ``zk``; None outside the brain."""
    parts = module.split(".")
    return parts[1] if parts[0] == "scheduler" and len(parts) > 1 else None


def test_every_room_of_the_brain_stands_on_a_floor() -> None:
    rooms = {_room(m) for m in MODULES} - {None}
    assert rooms == set(FLOORS), "docs/architecture.md's floors and scheduler/ differ"


def _below_floor(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in sorted(edges.items()):
        room = _room(source)
        if room is None:
            continue
        for target in sorted(targets):
            other = _room(target)
            if other is not None and other != room and FLOORS[other] >= FLOORS[room]:
                bad.append(
                    f"{source} (floor {FLOORS[room]}) imports {target} (floor {FLOORS[other]})"
                )
    return bad


def _beyond_hands(edges: dict[str, set[str]]) -> list[str]:
    return [
        f"{source} imports {target}"
        for source, targets in sorted(edges.items())
        if source.split(".")[0] in HANDS_MAY_USE
        for target in sorted(targets)
        if (room := _room(target)) is not None and room not in HANDS_MAY_USE[source.split(".")[0]]
    ]


def test_a_room_imports_only_rooms_on_lower_floors() -> None:
    assert _below_floor({s: {t for t in ts if t in MODULES} for s, ts in EDGES.items()}) == []


def test_the_hands_use_only_what_the_architecture_lets_them() -> None:
    assert set(HANDS_MAY_USE) == {"workers"}
    for rooms in HANDS_MAY_USE.values():
        assert rooms <= set(FLOORS)
    assert _beyond_hands(EDGES) == []


def test_the_rules_catch_a_wrong_import() -> None:
    # a store that imports a manager; two rooms of one floor; a worker that imports a layout
    assert _below_floor({"scheduler.stores.parked": {"scheduler.manager.base"}})
    assert _below_floor({"scheduler.layouts.cache": {"scheduler.views.idle"}})
    assert not _below_floor({"scheduler.manager.base": {"scheduler.stores.parked"}})
    assert _beyond_hands({"workers.gatherers": {"scheduler.layouts.cache"}})
    assert not _beyond_hands({"workers.merger.push": {"scheduler.wire.merger"}})
