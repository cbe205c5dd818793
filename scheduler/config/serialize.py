"""Canonical JSON: one byte sequence for one value, in any process.

Keys are sorted, separators fixed, non-ASCII escaped (so lone surrogates
survive), dataclasses become mappings of their fields, tuples and lists
become arrays. Nothing here depends on dict insertion order across
processes, on hash seeds or on set iteration (sets are sorted).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any


def to_plain(value: Any) -> Any:
    """Plain JSON material for ``value`` (dataclasses, mappings, sequences)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name.replace("_", "-"): to_plain(getattr(value, field.name))
            for field in dataclasses.fields(value)
        }
    if isinstance(value, Mapping):
        return {str(key): to_plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted(to_plain(item) for item in value)
    return value


def canonical_json(value: Any) -> str:
    return json.dumps(
        to_plain(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        allow_nan=False,
    )


def content_hash(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value``, hex."""
    return hashlib.sha256(canonical_json(value).encode("ascii")).hexdigest()
