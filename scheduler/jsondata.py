"""Plain JSON data helpers shared by the scheduler and the workers (no I/O, no imports)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge of two JSON objects: ``update`` wins where either value is not an object.

    Zuul's rule for job ``vars`` across variants, and for a job's vars over
    its parent data.
    """
    result = dict(base)
    for key, value in update.items():
        old = result.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            result[key] = deep_merge(old, value)
        else:
            result[key] = value
    return result
