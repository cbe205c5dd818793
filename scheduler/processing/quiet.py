"""A pass that can find nothing is skipped before it reads the pipeline's state.

Nudges for a pipeline often outlive their events: the pass that applied
the event already ran when the nudge's own pass comes (coalescing turns it
into one more pass after the lock's release). Such a *confirming* pass used
to read, decode and advance every item to decide nothing.

A pass ends **at rest** when it returned "no more to do" (nothing landed, no
queue left full: the same judgement that ends the coalescing loop,
:mod:`scheduler.processing.coalesce`) and its state waits on nothing but
events: no job waits for a semaphore slot or for nodes, no item waits to
report again (a timed back-off) or for its merge push. The process then
keeps a *mark*: the pipeline document's version and mzxid as committed (or
as read, when the pass decided nothing) and the layout fence its manager
was built from.

The next pass of the same process skips the state when every event queue
is empty, its manager comes from the same layout (the ledger's fence, the
layout state's version), and the pipeline document's stat still shows the
marked version and mzxid: any commit by any process bumps both (docs/architecture.md
invariant 1, the mark is validated against ZooKeeper before each use). It
then costs the lock, one request for the three queue listings and the
layout's stat (:mod:`scheduler.zk.multiread`) and the document's stat,
whatever the depth.

Nothing is written, and the mark is process-local: a pass that raises, or
does not end at rest, removes it first; another worker simply has none
and reads the state. With ``SLUICE_VERIFY_QUIET`` set (tests), a pass that
would be skipped runs in full and raises if it decides anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from scheduler.manager import settling
from scheduler.model.item import PipelineState
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.multiread import Stat

VERIFY_QUIET = settling.VERIFY


@dataclass(frozen=True)
class QuietMark:
    root_version: int
    root_zxid: int
    layout_fence: tuple[str, int] | None


_lock = threading.Lock()
_marks: dict[tuple[int, str, str], QuietMark] = {}


def at_rest(state: PipelineState) -> bool:
    """Whether nothing but a new event can give a pass on ``state`` work to do.

    A settled item is at rest (``settling.at_rest`` held when it settled).
    """
    settled = state.settled
    return all(uuid in settled or settling.at_rest(item) for uuid, item in state.items.peek_items())


def remember(
    client: ZooKeeperClient,
    tenant: str,
    pipeline: str,
    mark: QuietMark,
    state: PipelineState,
) -> None:
    """After a pass that ended with nothing more to do: keep its mark if at rest."""
    if mark.root_version < 0 or mark.root_zxid < 0 or not at_rest(state):
        forget(client, tenant, pipeline)
        return
    with _lock:
        _marks[(id(client), tenant, pipeline)] = mark


def forget(client: ZooKeeperClient, tenant: str, pipeline: str) -> None:
    with _lock:
        _marks.pop((id(client), tenant, pipeline), None)


def holds(
    client: ZooKeeperClient,
    tenant: str,
    pipeline: str,
    layout_fence: tuple[str, int] | None,
    stat: Stat | None,
) -> bool:
    """Whether the pipeline is as this process left it at rest.

    ``stat`` is the pipeline document's stat as the pass read it under the
    lock, None if it does not exist.
    """
    with _lock:
        mark = _marks.get((id(client), tenant, pipeline))
    if mark is None or mark.layout_fence != layout_fence:
        return False
    return stat is not None and (stat.version, stat.mzxid) == (mark.root_version, mark.root_zxid)


def verifying() -> bool:
    """Tests: run the pass a mark would skip, and check that it decides nothing."""
    return settling.verifying()
