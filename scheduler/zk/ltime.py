"""ltime: a logical timestamp shared by the cluster (seed 000 ``zuul/ltime``).

:func:`ltime` writes the empty ``/ltime`` node and returns the zxid of that
write (its ``mzxid``). ZooKeeper orders every write by zxid, so any write
made after this call has a larger zxid: a cache stamped with an ltime is
up to date for everything written before it, and a node whose ``mzxid`` is
larger than a cache's ltime has changed since.

On SUSPENDED or LOST the call raises (no timestamp is invented locally).
"""

from __future__ import annotations

from kazoo.exceptions import NoNodeError

from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient


def ltime(client: ZooKeeperClient) -> int:
    """A fresh logical timestamp: the zxid of a write to the ltime node."""
    try:
        stat = client.set(paths.ltime(), b"")
    except NoNodeError:
        client.ensure_path(paths.ltime())
        stat = client.set(paths.ltime(), b"")
    return int(stat.mzxid)
