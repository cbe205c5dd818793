"""Process-local values: made on first use, never inherited by a forked child, closed at the end."""

from __future__ import annotations

import os

from scheduler.processlocal import ProcessLocal


def test_a_forked_child_makes_its_own_value() -> None:
    made: list[int] = []
    local: ProcessLocal[str, int] = ProcessLocal("test value")

    def make() -> int:
        made.append(os.getpid())
        return os.getpid()

    assert local.get("k", make) == os.getpid()
    assert local.get("k", make) == os.getpid() and len(made) == 1
    pid = os.fork()
    if pid == 0:  # the child: the parent's value is not there
        os._exit(0 if local.get("k", make) == os.getpid() and len(made) == 2 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert local.get("k", make) == os.getpid()  # the parent keeps its own


def test_close_all_closes_and_forgets() -> None:
    closed: list[str] = []
    local: ProcessLocal[str, str] = ProcessLocal("closable", closed.append)
    local.get("a", lambda: "one")
    local.put("b", "two")

    local.close_all()

    assert sorted(closed) == ["one", "two"] and local.values() == []
