"""Typed reading of one configuration object, with errors that say where.

:class:`Fields` wraps the mapping of one object (a job, a pipeline, a
tenant) and reads typed values from it. The first problem raises a
:class:`~scheduler.config.errors.ConfigError` naming the file, the line of
the offending key, the object and the key; the caller skips that object
and goes on with the next one.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.config.errors import ConfigError
from scheduler.config.model import Encrypted
from scheduler.config.regex import RegexPolicyError, compile_line_matcher, compile_matcher
from scheduler.config.yamlload import MarkedDict, MarkedList
from scheduler.crypto import ENCRYPTED

MAX_NAME = 255

# Keys that Zuul understands but Sluice does not (yet): a clearer message
# than "unknown key" for someone bringing a Zuul configuration.
# Keys only a job definition may set (a project pipeline's job entry may not).
DEFINITION_ONLY_KEYS = frozenset({"secrets", "allowed-projects", "post-review"})
ZUUL_ONLY_KEYS = frozenset(
    {
        "roles",
        "override-checkout",
        "ansible-version",
        "host-vars",
        "group-vars",
        "extra-vars",
        "include-vars",
        "attribute-control",
        "cleanup-run",
        "deduplicate",
        "workspace-scheme",
        "hold-following-changes",
        "intermediate",
        "match-on-config-updates",
        "image-build-name",
        "run-on-config-updates",
    }
)


@dataclass(frozen=True)
class Where:
    """The file an object comes from."""

    path: str
    project: str = ""
    branch: str = ""

    def error(self, line: int | None, subject: str, message: str) -> ConfigError:
        return ConfigError(
            message,
            path=self.path,
            line=line,
            subject=subject,
            project=self.project,
            branch=self.branch,
        )


_TYPE_NAMES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (Mapping, "mapping"),
    (list, "list"),
)


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


class Fields:
    """Reads the keys of one object's mapping."""

    def __init__(
        self,
        data: MarkedDict,
        where: Where,
        subject: str,
        allowed: Collection[str],
        prefix: str = "",
    ) -> None:
        self.data = data
        self.where = where
        self.subject = subject
        self.allowed = allowed
        self.prefix = prefix

    def error(self, key: str | None, message: str) -> ConfigError:
        line = self.data.line_of(key) if key is not None else self.data.line
        text = f"{self.prefix}{key}: {message}" if key is not None else message
        return self.where.error(line, self.subject, text)

    def error_at(self, line: int, message: str) -> ConfigError:
        return self.where.error(line, self.subject, message)

    def check_keys(self) -> None:
        for key in self.data:
            if not isinstance(key, str):
                raise self.error(None, f"key {key!r} is not a string")
            if key not in self.allowed:
                if key in ZUUL_ONLY_KEYS:
                    raise self.error(key, "is not supported by Sluice yet")
                if key in DEFINITION_ONLY_KEYS:
                    raise self.error(key, "may only be set in a job definition")
                raise self.error(key, "unknown key")

    def has(self, key: str) -> bool:
        """Whether ``key`` is present with a value (null counts as unset)."""
        return self.data.get(key) is not None

    def raw(self, key: str) -> Any:
        return self.data.get(key)

    def line(self, key: str) -> int:
        return self.data.line_of(key)

    def expect(self, key: str, value: Any, kinds: tuple[type, ...], what: str) -> Any:
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(key, f"expected {what}, got boolean")
        if not isinstance(value, kinds):
            raise self.error(key, f"expected {what}, got {type_name(value)}")
        return value

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key)
        if value is None:
            return default
        result: str = self.expect(key, value, (str,), "a string")
        return result

    def required_string(self, key: str) -> str:
        value = self.string(key)
        if value is None:
            raise self.error(None, f"'{self.prefix}{key}' is required")
        return value

    def name(self, key: str = "name") -> str:
        value = self.required_string(key)
        check_name(self, key, value)
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        result: bool = self.expect(key, value, (bool,), "true/false")
        return result

    def optional_boolean(self, key: str) -> bool | None:
        if self.data.get(key) is None:
            return None
        return self.boolean(key, False)

    def integer(self, key: str, minimum: int = 0) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        result: int = self.expect(key, value, (int,), "an integer")
        if result < minimum:
            raise self.error(key, f"must be at least {minimum}, got {result}")
        return result

    def number(self, key: str, minimum: float = 0) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        result = float(self.expect(key, value, (int, float), "a number"))
        if not math.isfinite(result) or result < minimum:
            raise self.error(key, f"must be a finite number of at least {minimum}")
        return result

    def choice(self, key: str, choices: Collection[str], default: str | None) -> str | None:
        value = self.string(key, default)
        if value is not None and value not in choices:
            names = ", ".join(sorted(choices))
            raise self.error(key, f"{value!r} is not one of: {names}")
        return value

    def string_list(self, key: str) -> tuple[str, ...] | None:
        """A string or a list of strings (Zuul accepts both); None if absent."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            return (value,)
        items = self.expect(key, value, (list,), "a string or a list of strings")
        for item in items:
            if not isinstance(item, str):
                raise self.error(key, f"expected a list of strings, found {type_name(item)}")
        return tuple(items)

    def mapping(self, key: str) -> MarkedDict | None:
        value = self.data.get(key)
        if value is None:
            return None
        result: MarkedDict = self.expect(key, value, (MarkedDict,), "a mapping")
        return result

    def sub(self, key: str, allowed: Collection[str]) -> Fields | None:
        value = self.mapping(key)
        if value is None:
            return None
        sub = Fields(value, self.where, self.subject, allowed, f"{self.prefix}{key}.")
        sub.check_keys()
        return sub

    def regexes(self, key: str, *, in_lines: bool = False) -> tuple[str, ...] | None:
        """A regex or a list of them, each checked by the policy (``scheduler/config/regex.py``).

        ``in_lines``: patterns searched anywhere in a line of output
        (:func:`~scheduler.config.regex.compile_line_matcher`).
        """
        patterns = self.string_list(key)
        if patterns is None:
            return None
        check = compile_line_matcher if in_lines else compile_matcher
        for pattern in patterns:
            try:
                check(pattern)
            except RegexPolicyError as exc:
                raise self.error(key, f"regex {pattern!r} refused: {exc}") from None
        return patterns

    def json_mapping(self) -> dict[str, Any]:
        """The whole mapping as plain JSON material."""
        result: dict[str, Any] = plain_json(self, self.prefix.rstrip(".") or "value", self.data)
        return result

    def json(self, key: str) -> Any:
        """A value that must be plain JSON material (vars, nodesets)."""
        return plain_json(self, key, self.data.get(key))


def check_name(fields: Fields, key: str, value: str) -> None:
    if not value.strip():
        raise fields.error(key, "must not be empty")
    if len(value) > MAX_NAME:
        raise fields.error(key, f"longer than {MAX_NAME} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise fields.error(key, "must not contain control characters")


def plain_json(
    fields: Fields, key: str, value: Any, depth: int = 0, *, encrypted: bool = False
) -> Any:
    """Copy ``value`` into plain dicts/lists, refusing what JSON cannot hold.

    With ``encrypted`` (a secret's data), ``!encrypted/pkcs1-oaep`` values
    become ``{ENCRYPTED: [chunks]}``; anywhere else they are refused.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise fields.error(key, "numbers must be finite")
        return value
    if isinstance(value, Encrypted):
        if not encrypted:
            raise fields.error(key, f"{ENCRYPTED} values are only allowed in a secret's data")
        return value.to_json()
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for name, item in value.items():
            if not isinstance(name, str):
                raise fields.error(key, f"mapping key {name!r} is not a string")
            if encrypted and name == ENCRYPTED:
                raise fields.error(key, f"mapping key {name!r} is reserved")
            result[name] = plain_json(fields, key, item, depth + 1, encrypted=encrypted)
        return result
    if isinstance(value, list | MarkedList):
        return [plain_json(fields, key, item, depth + 1, encrypted=encrypted) for item in value]
    raise fields.error(key, f"values of type {type_name(value)} are not allowed")


def safe_repo_path(fields: Fields, key: str, value: str) -> str:
    """A path inside the repository: relative, no '..', no empty segment."""
    problem = repo_path_problem(value)
    if problem:
        raise fields.error(key, f"path {value!r} {problem}")
    return value


def repo_path_problem(value: str) -> str:
    if not value or len(value) > 1024:
        return "must be 1 to 1024 characters"
    if "\x00" in value or "\\" in value:
        return "must not contain NUL or backslash"
    if value.startswith("/") or value.startswith("~"):
        return "must be relative to the repository root"
    parts = value.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "must not contain '.', '..' or empty segments"
    return ""


def matcher_path_problem(pattern: str) -> str:
    """A files matcher must not name paths outside the repository."""
    body = pattern[1:] if pattern.startswith("^") else pattern
    if body.startswith("/") or body.startswith("../") or body in ("..", "\\.\\."):
        return "may not match paths outside the repository"
    if "/../" in body or body.endswith("/..") or "\\.\\./" in body:
        return "may not match paths outside the repository"
    return ""
