"""Several reads in one request: ZooKeeper's ``multiRead`` (3.6 and later).

A pipeline pass starts by looking at five nodes (its three event queues,
the tenant's layout state and the pipeline document) and then reads the
events it found. Sent one by one, that is five requests and one per event,
every pass; :func:`read_many` sends them as one ``multiRead`` request
(opcode 22), which the server answers with every result at once.

Guarantees:

* Results come back in the order of ``reads``: a :class:`Children` gives
  the child names, a :class:`Data` gives ``(data, stat)``; a node that
  does not exist gives ``None`` (never an exception), so a caller can use
  ``Data`` where it would have called ``exists``. Any other error of one
  read (no access, say) is raised.
* Unlike a write ``multi``, a ``multiRead`` is not atomic: each read sees
  the tree as it was when the server reached it (the same as separate
  pipelined reads on one session, which ZooKeeper answers in order).
* kazoo (2.11) has no ``multiRead``; :class:`MultiReadRequest` is the
  request's wire format, sent through kazoo's connection like its own
  requests (so the chroot, the session, timeouts and tracing all apply).
  A server older than 3.6 answers ``UNIMPLEMENTED``: the client then falls
  back to pipelined single reads for the rest of its life (logged once).
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import EXCEPTIONS, NoNodeError, UnimplementedError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.states import ZnodeStat

from scheduler.zk.client import ZooKeeperClient

log = logging.getLogger(__name__)

_MULTI_READ = 22
_GET_DATA = 4
_GET_CHILDREN = 8
_ERROR = -1

_int = struct.Struct("!i")
_header = struct.Struct("!iBi")  # type, done, err
_stat = struct.Struct("!qqqqiiiqiiq")


@dataclass(frozen=True)
class Children:
    """List the children of ``path`` (``None`` if it does not exist)."""

    path: str


@dataclass(frozen=True)
class Data:
    """Read ``path``'s data and stat (``None`` if it does not exist)."""

    path: str


Read = Children | Data
# What a Data read gives with the data (kazoo's, for callers outside this layer).
Stat = ZnodeStat

# Clients whose server answered UNIMPLEMENTED (by id; a client lives as long as its process).
_unsupported: set[int] = set()
_unsupported_lock = threading.Lock()


def _string(value: str) -> bytes:
    raw = value.encode()
    return _int.pack(len(raw)) + raw


class MultiReadRequest:
    """The wire format of ``multiRead``: kazoo sends it like one of its own requests."""

    type = _MULTI_READ

    def __init__(self, reads: Sequence[Read], chroot: str | None) -> None:
        self.reads = list(reads)
        self.paths = [_prefix_root(chroot, read.path) for read in self.reads]

    @property
    def path(self) -> str:
        """The first path (what a request trace shows for the whole request)."""
        return self.paths[0] if self.paths else ""

    def serialize(self) -> bytes:
        body = bytearray()
        for read, path in zip(self.reads, self.paths, strict=True):
            kind = _GET_CHILDREN if isinstance(read, Children) else _GET_DATA
            body += _header.pack(kind, 0, -1) + _string(path) + b"\0"  # no watch
        return bytes(body + _header.pack(-1, 1, -1))

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        while True:
            kind, done, _ = _header.unpack_from(buffer, offset)
            offset += _header.size
            if done:
                return results
            if kind == _GET_CHILDREN:
                count = _int.unpack_from(buffer, offset)[0]
                offset += _int.size
                names = []
                for _ in range(max(count, 0)):
                    size = _int.unpack_from(buffer, offset)[0]
                    offset += _int.size
                    names.append(buffer[offset : offset + size].decode())
                    offset += size
                results.append(names)
            elif kind == _GET_DATA:
                size = _int.unpack_from(buffer, offset)[0]
                offset += _int.size
                data = b"" if size < 0 else bytes(buffer[offset : offset + size])
                offset += max(size, 0)
                stat = ZnodeStat._make(_stat.unpack_from(buffer, offset))
                offset += _stat.size
                results.append((data, stat))
            elif kind == _ERROR:
                code = _int.unpack_from(buffer, offset)[0]
                offset += _int.size
                results.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"multiRead: unexpected result type {kind}")


def read_many(client: ZooKeeperClient, reads: Sequence[Read]) -> list[Any]:
    """The results of ``reads`` in order, in one request; see the module docstring."""
    if not reads:
        return []
    if id(client) not in _unsupported:
        request = MultiReadRequest(reads, client.kazoo.chroot)
        async_result = client.kazoo.handler.async_result()
        client.kazoo._call(request, async_result)
        try:
            answers = client.wait(async_result)
        except UnimplementedError:
            with _unsupported_lock:
                _unsupported.add(id(client))
            log.warning("ZooKeeper has no multiRead (older than 3.6): reading one by one")
        else:
            return [_result(answer) for answer in answers]
    return _one_by_one(client, reads)


def _result(answer: Any) -> Any:
    if isinstance(answer, NoNodeError):
        return None
    if isinstance(answer, Exception):
        raise answer
    return answer


def _one_by_one(client: ZooKeeperClient, reads: Sequence[Read]) -> list[Any]:
    kazoo = client.kazoo
    pending = [
        kazoo.get_children_async(read.path)
        if isinstance(read, Children)
        else kazoo.get_async(read.path)
        for read in reads
    ]
    return client.wait_each(pending)
