"""The result vocabulary of build history: the scheduler's :class:`~scheduler.model.results.Result`.

One vocabulary for the whole system (``BuildResult`` is its name in the
reporting API).
"""

from __future__ import annotations

from scheduler.model.results import Result as BuildResult

# Longest value, with room to grow; the width of the result columns.
RESULT_LENGTH = 32

__all__ = ["RESULT_LENGTH", "BuildResult"]
