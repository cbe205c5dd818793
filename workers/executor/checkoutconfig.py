"""Whether the worker's own git configuration could change what a checkout writes.

The fallback ``git checkout`` runs in the worker's environment, so it reads
the system and global git configuration, which may convert files (``core.
autocrlf``, attributes naming ``eol``, ``text`` or a filter), write symlinks
as plain files (``core.symlinks``) or run a ``post-checkout`` hook
(``core.hooksPath``). The in-process checkout does none of that, so it runs
only when :func:`neutral` says the configuration cannot matter. Then both
ways write the same files; otherwise git checks out, converting as told.

Neutral means: no ``GIT_CONFIG_PARAMETERS``/``GIT_CONFIG_COUNT`` (``git
-c``), ``GIT_ATTR_SOURCE``, ``GIT_DIR``, ``GIT_WORK_TREE`` or
``GIT_INDEX_FILE`` in the environment; no global or system attributes file
(``$XDG_CONFIG_HOME/git/attributes``, ``/etc/gitattributes``); and in the
global and system config files (``GIT_CONFIG_GLOBAL``, else
``$XDG_CONFIG_HOME/git/config`` and ``~/.gitconfig``; ``GIT_CONFIG_SYSTEM``,
else ``/etc/gitconfig`` and ``<git's prefix>/etc/gitconfig``, unless
``GIT_CONFIG_NOSYSTEM``) no ``include``/``includeIf`` (not followed: not
neutral) and no ``[core]`` setting of :data:`CORE_NEUTRAL_VALUES` outside
its neutral values. A ``filter.*`` section alone is neutral: a filter
applies only through attributes, and any attributes (a ``.gitattributes``
in the tree, ``core.attributesFile``, the files above) send the checkout
to git. Anything the reader does not understand is not neutral.

The answer is kept per process, keyed by the environment and the files'
stat data: a checkout costs a few ``stat`` calls.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Mapping

# Settings that change what git checks out, and the values that change nothing.
_FALSE = frozenset({"false", "no", "off", "0"})
_TRUE = frozenset({"true", "yes", "on", "1"})
CORE_NEUTRAL_VALUES: dict[str, frozenset[str]] = {
    "autocrlf": _FALSE | {"input"},  # input converts when committing only
    "eol": frozenset({"lf", "native"}),
    "symlinks": _TRUE,
    "ignorecase": _FALSE,
    "protecthfs": _FALSE,  # true refuses more paths than the in-process checkout does
    "sparsecheckout": _FALSE,
    "attributesfile": frozenset(),
    "hookspath": frozenset(),
    "worktree": frozenset(),
}
CHANGING_ENV = (
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_ATTR_SOURCE",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
)
READ_ENV = (
    "HOME",
    "XDG_CONFIG_HOME",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_ATTR_NOSYSTEM",
    "PATH",
)
_SECTION = re.compile(r"\[\s*([A-Za-z0-9.-]*)\s*(\"(?:[^\"\\]|\\.)*\")?\s*\](.*)")
_SETTING = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?")

_lock = threading.Lock()
_answers: dict[tuple[object, ...], bool] = {}
_prefixes: dict[str, str | None] = {}


def neutral(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether git, run in ``environ``, would check out exactly the tree's files."""
    if any(environ.get(name) for name in CHANGING_ENV):
        return False
    configs, attributes = _files(environ)
    key = (tuple(environ.get(name) for name in READ_ENV), *map(_signature, configs + attributes))
    with _lock:
        known = _answers.get(key)
    if known is not None:
        return known
    answer = not any(map(_exists, attributes)) and all(map(_neutral_file, configs))
    with _lock:
        if len(_answers) > 16:
            _answers.clear()
        _answers[key] = answer
    return answer


def _files(environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The config files and attribute files git reads besides the repository's."""
    home = environ.get("HOME", "")
    xdg = environ.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else "")
    configs = [] if not xdg else [os.path.join(xdg, "git", "config")]
    if home:
        configs.append(os.path.join(home, ".gitconfig"))
    if environ.get("GIT_CONFIG_GLOBAL"):
        configs = [environ["GIT_CONFIG_GLOBAL"]]
    attributes = [os.path.join(xdg, "git", "attributes")] if xdg else []
    prefix = _git_prefix(environ.get("PATH", os.defpath))
    etc = ["/etc"] + ([os.path.join(prefix, "etc")] if prefix else [])
    if not _true(environ.get("GIT_CONFIG_NOSYSTEM")):
        system = environ.get("GIT_CONFIG_SYSTEM")
        configs += [system] if system else [os.path.join(folder, "gitconfig") for folder in etc]
    if not _true(environ.get("GIT_ATTR_NOSYSTEM")):
        attributes += [os.path.join(folder, "gitattributes") for folder in etc]
    return configs, attributes


def _git_prefix(path: str) -> str | None:
    """The prefix git was installed under (``/usr`` for ``/usr/bin/git``), per ``PATH``."""
    if path not in _prefixes:
        found = shutil.which("git", path=path)
        _prefixes[path] = os.path.dirname(os.path.dirname(found)) if found else None
    return _prefixes[path]


def _true(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE


def _signature(path: str) -> tuple[str, int, int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (path, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size)


def _exists(path: str) -> bool:
    signature = _signature(path)
    return signature is not None and signature[-1] > 0


def _neutral_file(path: str) -> bool:
    """Whether the config file at ``path`` (absent: yes) sets nothing that changes a checkout."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except FileNotFoundError:
        return True
    except OSError:
        return False  # unreadable here: git might read it
    return neutral_text(text)


def neutral_text(text: str) -> bool:
    """Whether a config file's text sets nothing that changes a checkout (see the docstring)."""
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            found = _SECTION.fullmatch(line)
            if found is None:
                return False
            name = found.group(1).lower()
            if name in ("include", "includeif"):
                return False
            section = name if found.group(2) is None else f"{name} (subsection)"
            line = found.group(3).strip()  # a setting may follow on the same line
        if not line or line[0] in "#;" or section != "core":
            continue
        setting = _SETTING.fullmatch(line)
        if setting is None:
            return False
        key, value = setting.group(1).lower(), setting.group(2)
        if key in CORE_NEUTRAL_VALUES and not _neutral_value(key, value):
            return False
    return True


def _neutral_value(key: str, value: str | None) -> bool:
    if value is None:  # a bare key: true
        value = "true"
    value = re.split("[#;]", value, maxsplit=1)[0].strip().lower()
    if '"' in value or "\\" in value:
        return False  # quoted or continued: not read here
    return value in CORE_NEUTRAL_VALUES[key]
