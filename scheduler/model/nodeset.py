"""The nodes a job's ``nodeset`` names: what its node request asks for.

A frozen job keeps its ``nodeset`` as written: the name of a nodeset
defined in the layout, or an inline mapping ``{nodes: [{name, label}]}``
(Zuul's forms; ``nodes`` may also be a single mapping, and a node's
``name`` a list, of which the first is used). :func:`nodeset_nodes` turns
either into ``(name, label)`` pairs, in order; a node without a label asks
for nothing. :func:`nodeset_groups` gives the groups each node is in
(``groups: [{name, nodes: [...]}]``), which Ansible's inventory shows.

A nodeset with ``alternatives`` (a list of nodeset names or inline
nodesets, Zuul's form) is asked for one alternative at a time, in order:
when no provider can serve one, the next is requested, and the job fails
``NODE_FAILURE`` only when the last one fails. ``choice`` is the index into
:func:`nodeset_alternatives` (0 for a nodeset without them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NodeNames = tuple[tuple[str, str], ...]


def _spec(nodeset: Any, named: Mapping[str, Mapping[str, Any]] | None) -> Mapping[str, Any]:
    if isinstance(nodeset, str):
        nodeset = (named or {}).get(nodeset)
    return nodeset if isinstance(nodeset, Mapping) else {}


# How deep alternatives may name nodesets with alternatives (a loop stops here).
MAX_ALTERNATIVE_DEPTH = 4


def nodeset_alternatives(
    nodeset: Any, named: Mapping[str, Mapping[str, Any]] | None = None
) -> list[Mapping[str, Any]]:
    """The nodesets to ask for, in order: its ``alternatives`` (flattened) or itself."""
    return _alternatives(nodeset, named, 0)


def _alternatives(
    nodeset: Any, named: Mapping[str, Mapping[str, Any]] | None, depth: int
) -> list[Mapping[str, Any]]:
    spec = _spec(nodeset, named)
    alternatives = spec.get("alternatives")
    if not isinstance(alternatives, list | tuple) or not alternatives:
        return [spec]
    if depth >= MAX_ALTERNATIVE_DEPTH:
        return []
    found: list[Mapping[str, Any]] = []
    for alternative in alternatives:
        found += _alternatives(alternative, named, depth + 1)
    return found


def _choice(
    nodeset: Any, named: Mapping[str, Mapping[str, Any]] | None, choice: int
) -> Mapping[str, Any]:
    choices = nodeset_alternatives(nodeset, named)
    return choices[choice] if 0 <= choice < len(choices) else {}


def nodeset_nodes(
    nodeset: Any, named: Mapping[str, Mapping[str, Any]] | None = None, choice: int = 0
) -> NodeNames:
    """``(name, label)`` of every labelled node of ``nodeset`` (a name or a mapping).

    ``choice`` picks one of its alternatives (:func:`nodeset_alternatives`).
    """
    nodes = _choice(nodeset, named, choice).get("nodes") or ()
    if isinstance(nodes, Mapping):
        nodes = [nodes]
    if not isinstance(nodes, list | tuple):
        return ()
    found: list[tuple[str, str]] = []
    for node in nodes:
        if not isinstance(node, Mapping):
            continue
        label = node.get("label")
        if not isinstance(label, str) or not label:
            continue
        name = node.get("name")
        if isinstance(name, list | tuple):
            name = name[0] if name else None
        found.append((name if isinstance(name, str) and name else label, label))
    return tuple(found)


def nodeset_groups(
    nodeset: Any, named: Mapping[str, Mapping[str, Any]] | None = None, choice: int = 0
) -> dict[str, tuple[str, ...]]:
    """Node name -> the names of the groups it is in, in the order the groups are written."""
    groups = _choice(nodeset, named, choice).get("groups") or ()
    found: dict[str, list[str]] = {}
    for group in groups if isinstance(groups, list | tuple) else ():
        if not isinstance(group, Mapping) or not isinstance(group.get("name"), str):
            continue
        members = group.get("nodes") or ()
        for node in [members] if isinstance(members, str) else members:
            if isinstance(node, str) and group["name"] not in found.setdefault(node, []):
                found[node].append(group["name"])
    return {node: tuple(names) for node, names in found.items()}
