"""kazoo's threading handler, waiting on its sockets with one ``poll`` call.

kazoo's connection thread waits before every read and write of a request
and for every turn of its loop (``handler.select``): five or so waits per
ZooKeeper request. Its own ``select`` (``kazoo.handlers.utils.selector_select``)
builds an epoll selector each time: ``epoll_create``, one ``epoll_ctl`` per
socket, the wait, ``close``, about 20 µs of CPU a wait on the benchmark's
host, in every process that talks to ZooKeeper. :func:`poll_select` does
the same wait with one ``poll`` system call (a ``select.poll`` object is
made and filled without any), about 4 µs, and like kazoo's has no limit on
file descriptor numbers.

It answers as kazoo's does: the objects of ``rlist`` and ``wlist`` that are
ready, in their order (``xlist`` is never used by kazoo and stays empty); a
socket in error or hung up is ready for reading and for writing, so the
caller's ``recv`` or ``send`` reports it; a file descriptor that is not open
raises :class:`ValueError`, as kazoo's registering it does; a timeout that
is not a number, or negative, raises as kazoo's does.
"""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT
# reported whatever was asked: the next recv or send says what it is
_TROUBLE = select.POLLERR | select.POLLHUP


def _fd(fileobj: Any) -> int:
    if isinstance(fileobj, int):
        return fileobj
    return int(fileobj.fileno())


def poll_select(
    rlist: Sequence[Any],
    wlist: Sequence[Any],
    xlist: Sequence[Any],
    timeout: float | None = None,
) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select``'s answer for ``rlist`` and ``wlist`` from one ``poll``."""
    del xlist  # kazoo passes none; select's exceptional conditions are POLLPRI here
    if timeout is not None:
        if not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    wanted: dict[int, int] = {}
    for fileobj in rlist:
        fd = _fd(fileobj)
        wanted[fd] = wanted.get(fd, 0) | _READ
    for fileobj in wlist:
        fd = _fd(fileobj)
        wanted[fd] = wanted.get(fd, 0) | _WRITE
    poller = select.poll()
    for fd, events in wanted.items():
        poller.register(fd, events)
    waited = None if timeout is None else math.ceil(timeout * 1000)
    ready = dict(poller.poll(waited))
    if any(events & select.POLLNVAL for events in ready.values()):
        raise ValueError("Invalid event mask or fd")
    readable = [f for f in rlist if ready.get(_fd(f), 0) & (_READ | _TROUBLE)]
    writable = [f for f in wlist if ready.get(_fd(f), 0) & (_WRITE | _TROUBLE)]
    return readable, writable, []


class PollHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's :class:`SequentialThreadingHandler` with :func:`poll_select` for its waits."""

    def select(
        self,
        rlist: Sequence[Any],
        wlist: Sequence[Any],
        xlist: Sequence[Any],
        timeout: float | None = None,
    ) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(rlist, wlist, xlist, timeout)
