"""``zuul_return``: a task merges data into the build's result data, as in Zuul.

Loaded by Ansible from this folder (``action_plugins`` in the build's
``ansible.cfg``; the module documentation is ``library/zuul_return.py``).
An action plugin runs inside ``ansible-playbook`` on the executor, so the
task never reaches a node whatever host it targets: it needs no
connection, ``delegate_to`` changes nothing, and an unreachable node does
not stop it. It runs once for each host the task targets (``run_once: true``
makes it once), each run a merge of the same kind.

Each run, under an exclusive lock (hosts run in parallel forks and must
not lose each other's data):

1. reads the result file (``SLUICE_RESULT_FILE``) with the runner's rules
   (:func:`workers.executor.environment.read_result_data`): a regular file,
   never a symlink, empty or a JSON object, at most
   ``SLUICE_RESULT_DATA_LIMIT`` bytes;
2. deep-merges into it the JSON object of ``file`` (a path on the
   executor, relative to the project checkout), then ``data``: a later
   value wins, nested objects are merged (:func:`scheduler.jsondata.deep_merge`,
   Zuul's rule);
3. writes the result to a new file in the same folder and renames it over
   the old one, so a reader sees the old data or the new, never half.

Anything refused (a broken result file, a ``file`` that is not a JSON
object, data that is not JSON, a result over the limit) fails the task
with the reason and leaves the result file as it was. The runner reads the
file when the phase ends, as for an executable: ``zuul.pause`` and
``zuul.retry`` work from here as from a script.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from ansible.plugins.action import ActionBase  # type: ignore[import-untyped]

from scheduler.jsondata import deep_merge

ARGUMENT_SPEC = {"data": {"type": "dict"}, "file": {"type": "str"}}
# the runner's default (environment.DEFAULT_RESULT_DATA_LIMIT) when the
# environment does not say
DEFAULT_LIMIT = 1024 * 1024


class ReturnError(Exception):
    """Why a ``zuul_return`` call was refused (the task's failure message)."""


class ActionModule(ActionBase):  # type: ignore[misc]
    """The class name Ansible looks for in an action plugin."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _requires_connection = False  # nothing of it runs on the host

    def run(self, tmp: Any = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            merge_into_result_file(args.get("file"), args.get("data"))
        except ReturnError as exc:
            result.update(failed=True, msg=f"zuul_return: {exc}")
            return result
        result["changed"] = True
        return result


def merge_into_result_file(source: str | None, data: Mapping[str, Any] | None) -> None:
    """Merge ``source``'s object, then ``data``, into the result file (see the module docstring)."""
    path = os.environ.get("SLUICE_RESULT_FILE")
    if not path:
        raise ReturnError("SLUICE_RESULT_FILE is not set: not a Sluice build")
    limit = int(os.environ.get("SLUICE_RESULT_DATA_LIMIT") or DEFAULT_LIMIT)
    updates = [] if source is None else [_object(_read(source, limit, follow=True), source)]
    if data is not None:
        updates.append(_plain(data))
    with _locked(os.path.dirname(path) or "."):
        merged = _object(_read(path, limit, follow=False), "the result data file")
        for update in updates:
            merged = deep_merge(merged, update)
        try:
            text = json.dumps(merged, indent=2, sort_keys=True) + "\n"
        except (TypeError, ValueError) as exc:
            raise ReturnError(f"data is not JSON: {exc}") from None
        if len(text.encode()) > limit:
            raise ReturnError(f"result data would be larger than the limit of {limit} bytes")
        _replace(path, text)


def _plain(value: Any) -> Any:
    """``value`` as plain JSON types (Ansible hands templated values in its own subclasses)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ReturnError(f"data is not JSON: {exc}") from None


def _read(path: str, limit: int, *, follow: bool) -> bytes:
    """At most ``limit`` bytes of a regular file (``b""`` when there is none)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if follow:
            raise ReturnError(f"{path}: no such file") from None
        return b""
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ReturnError(f"{path} is a symlink; write a regular file") from None
        raise ReturnError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ReturnError(f"{path} is not a regular file")
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise ReturnError(f"{path} is larger than the limit of {limit} bytes")
    return raw


def _object(raw: bytes, what: str) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        found = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReturnError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(found, dict):
        raise ReturnError(f"{what} must hold a JSON object, not {type(found).__name__}")
    return found


@contextlib.contextmanager
def _locked(folder: str) -> Iterator[None]:
    """An exclusive lock on the result file's folder (no extra file to leave behind)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _replace(path: str, text: str) -> None:
    """Write ``text`` to a new file beside ``path`` and rename it over ``path``."""
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".zuul_return-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
