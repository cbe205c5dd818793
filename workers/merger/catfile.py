"""One ``git cat-file --batch-command`` process per locked repo, asked interactively.

A merge asks its cache repo many small questions: is this commit here, when
was it committed, what are its parents, which trees and blobs hold the
config files. Every git process costs the worker a fork and an exec, and
git its start-up; :class:`CatFile` answers all of them from one process,
which :class:`~workers.merger.repo.Repo` starts on the first question and
ends when the repo's lock is released or a fetch changes the repo.

Protocol: ``--batch-command --buffer`` reads ``info <object>`` and
``contents <object>`` lines and answers them when it reads ``flush``. The
questions go in chunks of at most 16 KiB, a quarter of a pipe: git has
read everything before when a chunk is written, so the write never blocks
while git waits for its answers to be read.

What it sees: the object store as it is when asked (git looks for new packs
when an object seems missing, and loose objects are looked up afresh, so
objects written after the start are found; refs are read afresh).

Errors: a missing or ambiguous object is an answer (None). Anything else
(git cannot start or exits, an answer that does not parse, no answer within
the git time limit) ends the process and raises :class:`CatFileError`; the
caller then asks git the old way, one command per question, which succeeds
or fails (corrupt, unknown ref, ...) exactly as it did before.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from workers.merger.errors import MergerError
from workers.merger.gitcmd import Git

# Bytes of questions written at once: well below a pipe's 64 KiB.
_CHUNK_BYTES = 16 * 1024
_READ_BYTES = 64 * 1024
# How long a closing git may take to exit before it is killed (it only reads).
_CLOSE_GRACE = 5.0
_HEADER = re.compile(rb"([0-9a-f]{40}|[0-9a-f]{64}) (blob|tree|commit|tag) ([0-9]+)")
_NOT_FOUND = (b"missing", b"ambiguous")


class CatFileError(MergerError):
    """The cat-file process failed or gave an answer that does not parse."""


@dataclass(frozen=True)
class ObjectInfo:
    """What ``info`` says of an object: its full sha, type and size."""

    sha: str
    kind: str
    size: int


class CatFile:
    """A running ``git cat-file --batch-command --buffer`` in ``repo``."""

    def __init__(self, git: Git, repo: Path) -> None:
        self._timeout = git.timeout
        try:
            self._proc = git.popen(["cat-file", "--batch-command", "--buffer"], repo)
        except OSError as exc:
            raise CatFileError(f"cannot start git cat-file: {exc}") from None
        stdin, stdout = self._proc.stdin, self._proc.stdout
        if stdin is None or stdout is None:  # pragma: no cover - Popen was given pipes
            raise CatFileError("git cat-file has no pipes")
        self._stdin: IO[bytes] = stdin
        self._fd = stdout.fileno()
        self._poll = select.poll()  # not select(): no limit on descriptor numbers
        self._poll.register(self._fd, select.POLLIN)
        self._buffer = bytearray()  # read from git, not yet parsed
        self._deadline = 0.0

    def info(self, names: Sequence[str]) -> list[ObjectInfo | None]:
        """Type and size of each object (None: missing or ambiguous)."""
        answers: list[ObjectInfo | None] = []
        for chunk in self._chunks("info", names):
            answers += [self._header() for _name in chunk]
        return answers

    def contents(self, names: Sequence[str]) -> list[tuple[ObjectInfo, bytes] | None]:
        """Each object with its raw contents (None: missing or ambiguous)."""
        answers: list[tuple[ObjectInfo, bytes] | None] = []
        for chunk in self._chunks("contents", names):
            for _name in chunk:
                header = self._header()
                if header is None:
                    answers.append(None)
                    continue
                body = self._read_exact(header.size + 1)
                if body[-1:] != b"\n":
                    raise self._failed("an object's contents end without a newline")
                answers.append((header, body[:-1]))
        return answers

    def close(self) -> None:
        """End the process (it exits when its input ends) and reap it."""
        if self._proc.returncode is not None:
            return
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self._proc.wait(timeout=_CLOSE_GRACE)
        except subprocess.TimeoutExpired:
            self._kill()
        self._close_stdout()

    # ------------------------------------------------------------------

    def _chunks(self, command: str, names: Sequence[str]) -> Iterator[Sequence[str]]:
        """Write the questions chunk by chunk, yielding each chunk once it is sent."""
        start = size = 0
        for end, name in enumerate(names):
            if "\n" in name or not name:
                raise self._failed(f"cannot ask for {name!r}")
            size += len(command) + len(name) + 2
            if size > _CHUNK_BYTES and end > start:
                self._send(command, names[start:end])
                yield names[start:end]
                start, size = end, len(command) + len(name) + 2
        if start < len(names):
            self._send(command, names[start:])
            yield names[start:]

    def _send(self, command: str, names: Sequence[str]) -> None:
        lines = "".join(f"{command} {name}\n" for name in names) + "flush\n"
        try:
            self._stdin.write(lines.encode())
            self._stdin.flush()
        except (OSError, ValueError) as exc:
            raise self._failed(f"git cat-file does not read: {exc}") from None
        self._deadline = time.monotonic() + self._timeout

    def _header(self) -> ObjectInfo | None:
        line = self._read_line()
        found = _HEADER.fullmatch(line)
        if found is not None:
            sha, kind, size = found.groups()
            return ObjectInfo(sha.decode(), kind.decode(), int(size))
        if line.rpartition(b" ")[2] in _NOT_FOUND:
            return None
        raise self._failed(f"unexpected answer {bytes(line[:200])!r}")

    def _read_line(self) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            self._fill()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def _read_exact(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _fill(self) -> None:
        remaining = self._deadline - time.monotonic()
        ready = remaining > 0 and self._poll.poll(remaining * 1000)
        if not ready:
            raise self._failed(f"no answer within {self._timeout}s")
        try:
            data = os.read(self._fd, _READ_BYTES)
        except OSError as exc:
            raise self._failed(f"cannot read: {exc}") from None
        if not data:
            raise self._failed("git cat-file exited")
        self._buffer += data

    def _failed(self, message: str) -> CatFileError:
        """End the process; the error to raise."""
        self._kill()
        return CatFileError(f"git cat-file: {message}")

    def _kill(self) -> None:
        if self._proc.returncode is None:
            self._proc.kill()
            self._proc.wait()
        with contextlib.suppress(OSError):
            self._stdin.close()
        self._close_stdout()

    def _close_stdout(self) -> None:
        if self._proc.stdout is not None:
            self._proc.stdout.close()
