"""A job's ``failure-output``: the lines of its run steps searched for its regexes.

Zuul's ``failure-output``: a line of the job's output that matches one of
the job's regexes tells that the build will fail before it ends. The
runner (:mod:`workers.executor.runner`) gives every line its run steps
print, as written to the job log (secrets masked), to
:meth:`FailureOutput.check`. At the first match the build is *pre-failed*:
the callback runs once (the runner marks the log and calls the control's
``on_pre_fail`` hook, which tells the pipeline), and no line is searched
after it. The build runs on to its end; a run phase that succeeds after a
match is a FAILURE (Zuul's rule).

A regex is searched anywhere in a line (``re.search``). Python's engine
cannot be interrupted, so the time one search may take is bounded twice:
the patterns passed a stricter policy when the configuration was loaded
(:func:`scheduler.config.regex.compile_line_matcher`: at most one
repetition), and only the first :data:`MATCHED_LINE` characters of a line
are searched (a line of the log may be up to 64 KiB). Measured, the worst
accepted pattern takes ~60 ms on a line of that length.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

# characters of a line that are searched (the rest of a longer line is not)
MATCHED_LINE = 4096


class FailureOutput:
    """The job's regexes; ``on_match(line)`` is called once, at the first matching line."""

    def __init__(self, patterns: Sequence[str], on_match: Callable[[str], None]) -> None:
        self.regexes: list[re.Pattern[str]] = []
        for pattern in patterns:
            try:
                self.regexes.append(re.compile(pattern))
            except re.error as exc:  # checked at config load: only a hand-made spec
                log.warning("failure-output %r ignored: %s", pattern, exc)
        self.on_match = on_match
        # the (cut) line that matched first; None while none did
        self.matched: str | None = None

    def check(self, line: str) -> None:
        """Search ``line`` (its first :data:`MATCHED_LINE` characters) until one matched."""
        if self.matched is not None:
            return
        piece = line[:MATCHED_LINE]
        for regex in self.regexes:
            if regex.search(piece) is not None:
                self.matched = piece
                self.on_match(piece)
                return
