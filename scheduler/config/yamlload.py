"""Safe YAML loading that remembers lines and refuses hostile documents.

Every mapping becomes a :class:`MarkedDict` and every sequence a
:class:`MarkedList`; both know the line where they start and the line of
each key or item, so later stages can say ``zuul.yaml:12``.

What is refused, with a :class:`~scheduler.config.errors.YamlError`:

* syntax errors, more than one document, unknown tags (the one tag
  known besides YAML's own is Zuul's ``!encrypted/pkcs1-oaep``: a base64
  string or a list of them, read as :class:`~scheduler.config.model.Encrypted`);
* a key given twice in one mapping (YAML merge keys ``<<`` may be
  overridden, as YAML intends);
* a text over :data:`MAX_BYTES`;
* alias bombs: the document is measured on its composed node graph, with
  every alias counted as a full copy of its anchor, *before* any Python
  object is built. Over :data:`MAX_NODES` expanded nodes, nesting deeper
  than :data:`MAX_DEPTH` or an alias that contains itself is an error.
  Measuring is linear in the size of the text (sizes are memoised per
  node), so a billion-laughs document is refused in milliseconds.

Timestamps are not resolved: ``2026-01-01`` stays a string, so every value
that comes out is plain JSON material (or bytes/sets from explicit ``!!``
tags, which the schema refuses where it expects something else).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from scheduler.config.errors import YamlError
from scheduler.config.model import Encrypted
from scheduler.crypto import ENCRYPTED

MAX_BYTES = 1_000_000
MAX_NODES = 100_000
MAX_DEPTH = 64

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"


class MarkedDict(dict[Any, Any]):
    """A mapping that knows its line and the line of each key (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]

    def __init__(self, line: int = 0) -> None:
        super().__init__()
        self.line = line
        self.key_lines = {}

    def line_of(self, key: Any) -> int:
        return self.key_lines.get(key, self.line)


class MarkedList(list[Any]):
    """A sequence that knows its line and the line of each item (1-based)."""

    line: int = 0
    item_lines: list[int]

    def __init__(self, line: int = 0) -> None:
        super().__init__()
        self.line = line
        self.item_lines = []

    def line_of(self, index: int) -> int:
        if 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


def line_of(value: Any, default: int) -> int:
    """The line where ``value`` starts if it is marked, else ``default``."""
    if isinstance(value, MarkedDict | MarkedList) and value.line:
        return value.line
    return default


class _Loader(yaml.SafeLoader):
    """SafeLoader with marked containers and strict keys."""

    def __init__(self, stream: str, path: str) -> None:
        super().__init__(stream)
        self.path = path

    def construct_marked_mapping(self, node: MappingNode) -> MarkedDict:
        own: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self._key(key_node)
            if key in own:
                raise YamlError(
                    f"duplicate key {key!r} (first at line {own[key]})",
                    path=self.path,
                    line=key_node.start_mark.line + 1,
                )
            own[key] = key_node.start_mark.line + 1
        self.flatten_mapping(node)
        result = MarkedDict(node.start_mark.line + 1)
        for key_node, value_node in node.value:
            key = self._key(key_node)
            result[key] = self.construct_object(value_node, deep=True)
            result.key_lines[key] = key_node.start_mark.line + 1
        return result

    def construct_marked_sequence(self, node: SequenceNode) -> MarkedList:
        result = MarkedList(node.start_mark.line + 1)
        for child in node.value:
            result.append(self.construct_object(child, deep=True))
            result.item_lines.append(child.start_mark.line + 1)
        return result

    def construct_encrypted(self, node: Node) -> Encrypted:
        line = node.start_mark.line + 1
        if isinstance(node, ScalarNode):
            chunks = [node.value]
        elif isinstance(node, SequenceNode) and all(
            isinstance(child, ScalarNode) for child in node.value
        ):
            chunks = [child.value for child in node.value]
        else:
            chunks = []
        chunks = ["".join(str(chunk).split()) for chunk in chunks]
        if not chunks or not all(chunks):
            raise YamlError(
                f"{ENCRYPTED}: expected a base64 string or a list of them",
                path=self.path,
                line=line,
            )
        return Encrypted(tuple(chunks))

    def _key(self, key_node: Node) -> Any:
        if not isinstance(key_node, ScalarNode):
            raise YamlError(
                "a mapping key must be a scalar",
                path=self.path,
                line=key_node.start_mark.line + 1,
            )
        return self.construct_object(key_node, deep=True)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _Loader.construct_marked_mapping,
)
_Loader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG,
    _Loader.construct_marked_sequence,
)
_Loader.add_constructor(ENCRYPTED, _Loader.construct_encrypted)


class _Measure:
    """Expanded size and height of a node graph, aliases counted in full."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.done: dict[int, tuple[int, int]] = {}
        self.active: set[int] = set()

    def check(self, root: Node) -> None:
        size, _ = self.measure(root, 1)
        if size > MAX_NODES:  # pragma: no cover - measure raises first
            raise self.error(root, f"document expands to more than {MAX_NODES} nodes")

    def error(self, node: Node, message: str) -> YamlError:
        return YamlError(message, path=self.path, line=node.start_mark.line + 1)

    def measure(self, node: Node, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in self.done:
            size, height = self.done[key]
        else:
            if key in self.active:
                raise self.error(node, "an alias refers to a node that contains it")
            self.active.add(key)
            size, height = self.measure_children(node, depth)
            self.active.discard(key)
            self.done[key] = (size, height)
        if depth + height - 1 > MAX_DEPTH:
            raise self.error(node, f"nesting deeper than {MAX_DEPTH} levels")
        return size, height

    def measure_children(self, node: Node, depth: int) -> tuple[int, int]:
        if isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, SequenceNode):
            children = list(node.value)
        else:
            return 1, 1
        total, height = 1, 1
        for child in children:
            size, child_height = self.measure(child, depth + 1)
            total += size
            height = max(height, child_height + 1)
            if total > MAX_NODES:
                raise self.error(
                    node, f"document expands to more than {MAX_NODES} nodes (alias bomb?)"
                )
        return total, height


def _yaml_error(exc: yaml.YAMLError, path: str) -> YamlError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {context}, {problem}" if context else f"invalid YAML: {problem}"
    return YamlError(message, path=path, line=line)


def _reader_error(exc: yaml.reader.ReaderError, text: str, path: str) -> YamlError:
    position = exc.position if isinstance(exc.position, int) else 0
    line = text.count("\n", 0, position) + 1
    character = exc.character if isinstance(exc.character, int) else 0
    return YamlError(
        f"invalid YAML: unacceptable character #x{character:04x}: {exc.reason}",
        path=path,
        line=line,
    )


def load_yaml(text: str, path: str) -> Any:
    """Parse one YAML document; ``path`` names it in errors.

    Returns ``None`` for an empty document. Raises :class:`YamlError`.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlError(f"file is larger than {MAX_BYTES} bytes", path=path)
    try:
        loader = _Loader(text, path)
    except yaml.reader.ReaderError as exc:  # the reader refuses some characters up front
        raise _reader_error(exc, text, path) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _Measure(path).check(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, path) from None
    except RecursionError:
        raise YamlError(
            f"invalid YAML: nesting deeper than {MAX_DEPTH} levels", path=path
        ) from None
    finally:
        loader.dispose()
