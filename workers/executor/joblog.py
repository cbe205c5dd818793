"""The build's ``job-output.txt``: every line stamped, written as it comes.

Format, one line per line of output (UTC, microseconds, then the phase)::

    2026-11-22 13:38:11.123456 | run | the job's own text
    2026-11-22 13:38:11.123456 | RUN START: ci/test.sh
    2026-11-22 13:38:12.456789 | RUN END: ci/test.sh exit 0 (1.33s)

Lines are written and flushed one by one, so a reader (``tail -f``, the web
status page) can follow the build while it runs. The last lines are kept
in memory for the build result. Output is decoded as UTF-8 with invalid
bytes replaced; a "line" longer than ``MAX_LINE`` bytes without a newline is
cut into several. Job output beyond a limit (``RunnerOptions.log_limit``)
is dropped so a runaway job cannot fill the disk.
"""

from __future__ import annotations

import collections
import datetime
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

MAX_LINE = 64 * 1024


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


class JobLog:
    """Appends stamped lines to ``job-output.txt``; keeps the last ``tail_lines``.

    Job output beyond ``limit`` characters is dropped (one line says so);
    the runner's own markers are always written.
    """

    def __init__(
        self,
        path: Path,
        tail_lines: int = 50,
        limit: int | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._redact = redact
        self.path = path
        self._file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._limit = limit
        self._written = 0
        self.truncated = False

    def line(self, text: str, label: str | None = None) -> str:
        """Write one line of job output: ``stamp | label | text`` (secrets masked).

        Returns the text as masked (also when the log limit dropped it).
        """
        if self._redact is not None:
            text = self._redact(text)
        if self._limit is not None and self._written + len(text) > self._limit:
            if not self.truncated:
                self.truncated = True
                self.marker(f"LOG LIMIT: job output beyond {self._limit} characters dropped")
            return text
        self._written += len(text)
        self._write(f"{_now()} | {label} | {text}" if label else f"{_now()} | {text}")
        return text

    def marker(self, text: str) -> None:
        """A line of the runner's own (phase start and end, results)."""
        self._write(f"{_now()} | {text}")

    def tail(self) -> tuple[str, ...]:
        return tuple(self._tail)

    def close(self) -> None:
        self._file.close()

    def _write(self, stamped: str) -> None:
        self._file.write(stamped + "\n")
        self._file.flush()
        self._tail.append(stamped)


class LineSplitter:
    """Turns chunks of bytes into lines for a :class:`JobLog`, one label each.

    ``watch`` sees each line as written (secrets masked): a job's
    ``failure-output`` (:mod:`workers.executor.failureoutput`).
    """

    def __init__(self, log: JobLog, label: str, watch: Callable[[str], None] | None = None) -> None:
        self._log = log
        self._label = label
        self._watch = watch
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        for raw in lines:
            self._emit(raw)
        while len(self._pending) > MAX_LINE:
            self._emit(self._pending[:MAX_LINE])
            self._pending = self._pending[MAX_LINE:]

    def flush(self) -> None:
        """Write what is left without a final newline."""
        if self._pending:
            self._emit(self._pending)
            self._pending = b""

    def _emit(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        written = self._log.line(text, self._label)
        if self._watch is not None:
            self._watch(written)
