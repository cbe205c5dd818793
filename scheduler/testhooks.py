"""Test hooks: points where a test can hold a worker to inject a fault.

Set ``SLUICE_TEST_HOLD_BEFORE_COMMIT`` to a file path in a worker's
environment; while that file exists, a pipeline pass that is about to
commit writes ``<file>.held-<pid>`` and waits. A test then kills the worker
in the middle of processing (after it consumed events and decided, before
anything is committed) and checks that another worker resumes from
ZooKeeper. Unset (always, outside tests) it costs one environment lookup.

``SLUICE_TEST_HOLD_BOOT`` does the same in a launcher booting a local node,
once the node's address is leased and its network made, before its sshd
starts (``workers/launcher/boot.py``): a launcher killed there leaves a
half-booted node for another launcher to clean up.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HOLD_BEFORE_COMMIT = "SLUICE_TEST_HOLD_BEFORE_COMMIT"


HOLD_BOOT = "SLUICE_TEST_HOLD_BOOT"


def hold_before_commit() -> None:
    hold(HOLD_BEFORE_COMMIT)


def hold_boot() -> None:
    hold(HOLD_BOOT)


def hold(variable: str) -> None:
    """Wait while the file that ``variable`` names exists (after saying so beside it)."""
    value = os.environ.get(variable)
    if not value:
        return
    flag = Path(value)
    if not flag.exists():
        return
    Path(f"{flag}.held-{os.getpid()}").write_text(str(os.getpid()))
    while flag.exists():
        time.sleep(0.05)
