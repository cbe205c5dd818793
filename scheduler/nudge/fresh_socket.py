"""A nudge pushed over a fresh socket, without importing Celery: for short-lived commands.

``sluice enqueue`` spends most of its life importing Celery, kombu and
redis-py (about 0.3 s) to send one message of a few hundred bytes. This
module pushes that message itself: the task message Celery would write
(:func:`scheduler.nudge.envelope.task_message`), onto the queue's list with
one ``LPUSH`` spoken over a plain socket, exactly where kombu's own
producer puts it (priority 0 uses the bare queue name). A worker cannot
tell the difference.

Only the simple case is handled: a ``redis://`` URL without TLS or options
(:func:`scheduler.nudge.envelope.redis_target`). Anything else (RabbitMQ,
``rediss://``, Sentinel, options in the URL), and any failure to connect
or write, returns None, and the caller sends the nudge through Celery
instead (:func:`scheduler.nudge.dispatch.send_quickly`), so this path can
only make a nudge faster, never lose one. A broker that refuses the
password is the exception: Celery would be refused alike, so a
:class:`~scheduler.settings.exposure.BrokerError` says so at once. What it
leaves out is Celery's ``task-sent`` event: Flower shows the task from the
moment a worker receives it.

Long-lived processes push the same message over a connection they keep:
:mod:`scheduler.nudge.kept_connection`.
"""

from __future__ import annotations

import socket
import uuid
from typing import Any

from scheduler.nudge import envelope
from scheduler.settings import exposure

CONNECT_TIMEOUT = 5.0


def _command(*words: bytes) -> bytes:
    parts = [b"*%d\r\n" % len(words)]
    for word in words:
        parts.append(b"$%d\r\n%s\r\n" % (len(word), word))
    return b"".join(parts)


def _replies(stream: Any, count: int) -> list[bytes]:
    """``count`` simple replies (status, error or integer lines)."""
    replies = []
    for _ in range(count):
        line = stream.readline()
        if not line.endswith(b"\r\n"):
            raise OSError("redis closed the connection")
        if line.startswith(b"-"):
            raise OSError(f"redis: {line[1:].strip().decode(errors='replace')}")
        replies.append(line.strip())
    return replies


def lpush(
    target: envelope.RedisTarget, key: str, value: bytes, timeout: float = CONNECT_TIMEOUT
) -> None:
    """``LPUSH key value`` (after AUTH and SELECT as the URL asks); raises OSError."""
    commands = []
    if target.password is not None:
        auth = [target.username.encode()] if target.username else []
        commands.append(_command(b"AUTH", *auth, target.password.encode()))
    if target.db:
        commands.append(_command(b"SELECT", str(target.db).encode()))
    commands.append(_command(b"LPUSH", key.encode(), value))
    with socket.create_connection((target.host, target.port), timeout=timeout) as sock:
        sock.sendall(b"".join(commands))
        with sock.makefile("rb") as stream:
            _replies(stream, len(commands))


def send(broker_url: str, name: str, args: list[Any], queue: str, label: str = "") -> str | None:
    """Push task ``name`` onto ``queue``; its task id, or None when Celery must send it."""
    target = envelope.redis_target(broker_url)
    if target is None:
        return None
    task_id = str(uuid.uuid4())
    try:
        message = envelope.task_message(name, args, {}, queue, task_id=task_id, label=label)
        lpush(target, queue, message)
    except OSError as exc:
        if exposure.broker_failure(exc).startswith("authentication failed"):
            # Celery would be refused alike, after seconds of retries: say so now
            raise exposure.broker_error(broker_url, exc) from None
        return None
    return task_id
