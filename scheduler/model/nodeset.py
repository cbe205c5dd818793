"""The nodes a job's ``nodeset`` names: what its node request asks for.

A frozen job keeps its ``nodeset`` as written: the name of a nodeset
defined in the layout, or an inline mapping ``{nodes: [{name, label}]}``
(Zuul's forms; ``nodes`` may also be a single mapping, and a node's
``name`` a list, of which the first is used). :func:`nodeset_nodes` turns
either into ``(name, label)`` pairs, in order; a node without a label asks
for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NodeNames = tuple[tuple[str, str], ...]


def nodeset_nodes(nodeset: Any, named: Mapping[str, Mapping[str, Any]] | None = None) -> NodeNames:
    """``(name, label)`` of every labelled node of ``nodeset`` (a name or a mapping)."""
    if isinstance(nodeset, str):
        spec: Any = (named or {}).get(nodeset) or {}
    else:
        spec = nodeset
    if not isinstance(spec, Mapping):
        return ()
    nodes = spec.get("nodes") or ()
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
