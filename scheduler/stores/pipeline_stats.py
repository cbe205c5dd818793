"""A pipeline's counters for the metrics, written in the transactions of its passes.

``/stats/pipelines/<tenant>/<pipeline>`` holds a
:class:`~scheduler.model.tally.PipelineTotals`: resets and the builds and CI
seconds they threw away per queue, items that left without success per
reason, and the time-in-queue histogram per queue. A pass adds what it
counted (its :class:`~scheduler.model.tally.PassTally`) with
:func:`add_ops`, a compare-and-set in the same fenced transaction that
commits the state it counted: a pass that does not commit (a crash, a lost
lock, a conflict) counts nothing, and the pass that redoes it counts once.
Only the pipeline's lock holder writes the document.
"""

from __future__ import annotations

from kazoo.exceptions import NoNodeError

from scheduler.model.tally import PassTally, PipelineTotals
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import Transaction


def read(client: ZooKeeperClient, tenant: str, pipeline: str) -> tuple[PipelineTotals, int]:
    """The pipeline's totals and the document's version (-1: none yet)."""
    path = paths.pipeline_stats(tenant, pipeline)
    try:
        raw, stat = client.get(path)
    except NoNodeError:
        return PipelineTotals(), -1
    return PipelineTotals.from_dict(stored.decode(raw, path)), stat.version


def add_ops(
    client: ZooKeeperClient, tenant: str, pipeline: str, tally: PassTally, txn: Transaction
) -> None:
    """Add ``tally`` to the pipeline's totals in ``txn`` (nothing if it counted nothing)."""
    if not tally:
        return
    path = paths.pipeline_stats(tenant, pipeline)
    totals, version = read(client, tenant, pipeline)
    data = stored.encode(totals.plus(tally).to_dict())
    if version < 0:
        client.ensure_path(paths.parent(path))
        txn.create(path, data)
    else:
        txn.set(path, data, version=version)


def read_all(client: ZooKeeperClient) -> dict[tuple[str, str], PipelineTotals]:
    """Every pipeline's totals, by (tenant, pipeline)."""
    root = paths.pipeline_stats_root()
    found: dict[tuple[str, str], PipelineTotals] = {}
    try:
        tenants = client.get_children(root)
    except NoNodeError:
        return found
    for tenant_segment in sorted(tenants):
        try:
            pipelines = client.get_children(paths.join(root, tenant_segment))
        except NoNodeError:
            continue
        tenant = paths.unsegment(tenant_segment)
        for pipeline_segment in sorted(pipelines):
            pipeline = paths.unsegment(pipeline_segment)
            found[tenant, pipeline] = read(client, tenant, pipeline)[0]
    return found
