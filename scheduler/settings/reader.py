"""Reading ``sluice.yaml`` with the line of every key, for errors that name it.

:func:`load_mapping` parses the text with a safe loader that remembers the
line of every mapping key; a :class:`SettingsReader` walks one mapping,
checks each value's type and reports ``file:line: section.key: message``,
and :meth:`SettingsReader.finish` refuses keys nobody asked for, so a typo
never falls back to a default. What the keys mean is
:mod:`scheduler.settings.load`'s business.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from scheduler.errors import SettingsError


class _LineLoader(yaml.SafeLoader):
    """A safe loader that remembers the line of every mapping key."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[str, Any]:
    loader.flatten_mapping(node)
    mapping: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        mapping[key] = loader.construct_object(value_node, deep=True)
        lines[str(key)] = key_node.start_mark.line + 1
    mapping["__lines__"] = lines
    return mapping


_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def load_mapping(text: str, where: str) -> dict[str, Any]:
    """The top-level mapping of ``text`` (empty for an empty file); SettingsError otherwise."""
    try:
        data = yaml.load(text, Loader=_LineLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"{where}:{mark.line + 1}" if mark is not None else where
        raise SettingsError(f"{loc}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{where}: expected a mapping at the top level")
    return data


class SettingsReader:
    """Walks one mapping of the file, reporting errors with file and line."""

    def __init__(self, data: dict[str, Any], where: str, prefix: str = "") -> None:
        self.data = dict(data)
        self.lines: dict[str, int] = self.data.pop("__lines__", {})
        self.where = where
        self.prefix = prefix
        self.used: set[str] = set()

    def error(self, key: str, message: str) -> SettingsError:
        line = self.lines.get(key)
        loc = f"{self.where}:{line}" if line else self.where
        return SettingsError(f"{loc}: {self.prefix}{key}: {message}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.used.add(key)
        if key not in self.data or self.data[key] is None:
            return default
        value = self.data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.error(key, f"expected {_kind_name(names)}, got {type(value).__name__}")
        return value

    def sub(self, key: str) -> SettingsReader | None:
        value = self.get(key, dict, None)
        if value is None:
            return None
        return SettingsReader(value, self.where, f"{self.prefix}{key}.")

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise self.error(unknown[0], "unknown key")


def _kind_name(name: str) -> str:
    return {"str": "a string", "float": "a number", "dict": "a mapping", "bool": "true/false"}.get(
        name, name
    )


def resolve_path(value: str, base: Path) -> Path:
    """``value`` as a path, relative ones against ``base`` (the config file's folder)."""
    path = Path(value).expanduser()
    # normpath, not resolve(): ``..`` goes, symlinks stay as the operator wrote them
    return Path(os.path.normpath(path if path.is_absolute() else base / path))


def read_password_file(path: Path, setting: str = "keystore.password_file") -> str:
    """The password in ``path`` (its first line, stripped); "" when it is missing."""
    try:
        return (path.read_text(encoding="utf-8").splitlines() or [""])[0].strip()
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{setting}: {path}: unreadable: {exc}") from None
