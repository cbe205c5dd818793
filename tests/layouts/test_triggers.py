"""The git trigger filter, driven directly (no services)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.layouts import filter_matches

EVENT = {
    "type": "ref-updated",
    "connection": "git",
    "project": "app",
    "branch": "main",
    "ref": "refs/heads/main",
    "oldrev": "1" * 40,
    "newrev": "2" * 40,
}
DELETED = {**EVENT, "newrev": "0" * 40}


@pytest.mark.parametrize(
    ("spec", "event", "expected"),
    [
        ({"event": "ref-updated"}, EVENT, True),
        ({"event": ["other", "ref-updated"]}, EVENT, True),
        ({"event": "other"}, EVENT, False),
        ({}, EVENT, False),  # no event named: nothing matches
        ({"event": "ref-updated", "ref": "^refs/heads/main$"}, EVENT, True),
        ({"event": "ref-updated", "ref": ["^refs/tags/", "^refs/heads/ma"]}, EVENT, True),
        ({"event": "ref-updated", "ref": "main"}, EVENT, False),  # anchored at the start
        ({"event": "ref-updated", "ref": "^refs/heads/main$"}, {**EVENT, "ref": "main"}, True),
        ({"event": "ref-updated", "branch": "^main$"}, EVENT, True),
        ({"event": "ref-updated", "branch": "^stable/"}, EVENT, False),
        ({"event": "ref-updated"}, DELETED, False),
        ({"event": "ref-updated", "ignore-deletes": False}, DELETED, True),
        ({"event": "ref-updated"}, {**EVENT, "deleted": True}, False),
        ({"event": "ref-updated", "ref": "(a*)*b"}, EVENT, False),  # refused by the policy
        ({"event": "ref-updated"}, {**EVENT, "type": "", "event": "ref-updated"}, True),
    ],
)
def test_git_trigger_filters(spec: dict[str, Any], event: dict[str, Any], expected: bool) -> None:
    assert filter_matches(spec, event) is expected
