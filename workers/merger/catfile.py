"""``git cat-file --batch-command`` asked interactively, one process per repo and worker process.

A merge asks its cache repo many small questions: is this commit here, when
was it committed, what are its parents, which trees and blobs hold the
config files. Every git process costs the worker a fork and an exec, and
git its start-up; :class:`CatFile` answers all of them from one process,
which :class:`~workers.merger.repo.Repo` starts on the first question (or
takes back from :mod:`.parking`) and parks when the repo's lock is
released, so the next merges of the same repo in this worker process ask
the same process (:mod:`.gitproc`: the checks that it still serves the
repo at the path).

Protocol: ``--batch-command --buffer`` reads ``info <object>`` and
``contents <object>`` lines and answers them when it reads ``flush``. The
questions go in chunks of at most 16 KiB, a quarter of a pipe: git has
read everything before when a chunk is written, so the write never blocks
while git waits for its answers to be read.

What it sees: the object store as it is when asked, also long after its
start and across fetches. git reads loose objects afresh, looks for new
packs when an object seems missing, and reads refs afresh (the packed
refs again when their file changed), so objects and refs a fetch or a
merge wrote later are found. Two things are read once per process: the
replace refs (the merger never fetches nor writes any) and, for an
abbreviated object name, the listing of loose objects and packs that
tells whether it is ambiguous (an object written later with the same
prefix is not seen to make it so; a name not found is looked up afresh).

Errors: a missing or ambiguous object is an answer (None). Anything else
(git cannot start or exits, an answer that does not parse, no answer within
the git time limit) ends the process and raises :class:`CatFileError`; the
caller then asks git the old way, one command per question, which succeeds
or fails (corrupt, unknown ref, ...) exactly as it did before.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from workers.merger.gitcmd import Git
from workers.merger.gitproc import GitProcess, GitProcessError

# Bytes of questions written at once: well below a pipe's 64 KiB.
_CHUNK_BYTES = 16 * 1024
_HEADER = re.compile(rb"([0-9a-f]{40}|[0-9a-f]{64}) (blob|tree|commit|tag) ([0-9]+)")
_NOT_FOUND = (b"missing", b"ambiguous")


class CatFileError(GitProcessError):
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
        self.process = GitProcess(
            git, repo, ["cat-file", "--batch-command", "--buffer"], CatFileError
        )

    def info(self, names: Sequence[str]) -> list[ObjectInfo | None]:
        """Type and size of each object (None: missing or ambiguous)."""
        answers: list[ObjectInfo | None] = []
        for chunk in self._chunks("info", names):
            answers += [self._header() for _name in chunk]
        self.process.done()
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
                body = self.process.read_exact(header.size + 1)
                if body[-1:] != b"\n":
                    raise self.process.failed("an object's contents end without a newline")
                answers.append((header, body[:-1]))
        self.process.done()
        return answers

    def close(self) -> None:
        """End the process (it exits when its input ends) and reap it."""
        self.process.close()

    # ------------------------------------------------------------------

    def _chunks(self, command: str, names: Sequence[str]) -> Iterator[Sequence[str]]:
        """Write the questions chunk by chunk, yielding each chunk once it is sent."""
        start = size = 0
        for end, name in enumerate(names):
            if "\n" in name or not name:
                raise self.process.failed(f"cannot ask for {name!r}")
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
        self.process.send(lines.encode())

    def _header(self) -> ObjectInfo | None:
        line = self.process.read_line()
        found = _HEADER.fullmatch(line)
        if found is not None:
            sha, kind, size = found.groups()
            return ObjectInfo(sha.decode(), kind.decode(), int(size))
        if line.rpartition(b" ")[2] in _NOT_FOUND:
            return None
        raise self.process.failed(f"unexpected answer {line[:200]!r}")
