"""A nudge to a Redis broker without importing Celery: for short-lived commands.

``sluice enqueue`` spends most of its life importing Celery, kombu and
redis-py (about 0.3 s) to send one message of a few hundred bytes. This
module writes that message itself: a Celery task message (protocol 2, JSON
body) in kombu's Redis envelope, pushed onto the queue's list with one
``LPUSH`` over a plain socket, exactly where kombu's own producer puts it
(priority 0 uses the bare queue name). A worker cannot tell the difference.

Only the simple case is handled: a ``redis://`` URL without TLS or options.
Anything else (RabbitMQ, ``rediss://``, Sentinel, options in the URL), and
any failure to connect or write, returns None, and the caller sends the
nudge through Celery instead (:func:`scheduler.dispatch.send_quickly`), so
this path can only make a nudge faster, never lose one. A broker that
refuses the password is the exception: Celery would be refused alike, so a
:class:`~scheduler.settings.exposure.BrokerError` says so at once. What it leaves out
is Celery's ``task-sent`` event: Flower shows the task from the moment a
worker receives it.

Long-lived processes push the same message (:func:`task_message`) over a
connection they keep: :mod:`scheduler.fastsend`.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from scheduler.settings import exposure

CONNECT_TIMEOUT = 5.0


@dataclass(frozen=True)
class RedisTarget:
    host: str
    port: int
    db: int
    username: str | None
    password: str | None


def redis_target(url: str) -> RedisTarget | None:
    """Where a plain ``redis://`` broker URL points; None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port or 6379
    except ValueError:
        return None
    if parts.scheme != "redis" or parts.query or parts.fragment or not parts.hostname:
        return None
    path = parts.path.strip("/")
    if path and not path.isdigit():
        return None
    return RedisTarget(
        host=parts.hostname,
        port=port,
        db=int(path or 0),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


def task_message(
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    queue: str,
    *,
    task_id: str,
    label: str = "",
    parent_id: str | None = None,
    root_id: str | None = None,
    reply_to: str = "",
) -> bytes:
    """A Celery protocol-2 task message in kombu's Redis envelope, as JSON bytes.

    The headers are those Celery 5's ``send_task`` writes. A task sent from
    inside another names it as ``parent_id`` and that one's root as
    ``root_id``; a task sent from outside any task is its own root.
    """
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    body = json.dumps([args, kwargs, embed])
    headers: dict[str, Any] = {
        "lang": "py",
        "task": name,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": root_id or task_id,
        "parent_id": parent_id,
        "argsrepr": label or repr(args),
        "kwargsrepr": repr(kwargs),
        # Celery's own name for a sender that is not a worker node (anon_nodename)
        "origin": f"gen{os.getpid()}@{socket.gethostname()}",
        # None: the worker applies the task's own ignore_result
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    properties = {"correlation_id": task_id, "reply_to": reply_to, "delivery_mode": 2}
    return envelope(body, headers, properties, exchange="", routing_key=queue)


def event_message(
    event: Any, *, exchange: str, routing_key: str, headers: dict[str, Any], delivery_mode: int
) -> bytes:
    """A Celery event (or a list of them: ``task.multi``) in kombu's Redis envelope.

    What kombu's producer publishes for an event dispatcher: the JSON body,
    the dispatcher's headers (its hostname), its delivery mode.
    """
    return envelope(
        json.dumps(event),
        headers,
        {"delivery_mode": delivery_mode},
        exchange=exchange,
        routing_key=routing_key,
    )


def envelope(
    body: str,
    headers: dict[str, Any],
    properties: dict[str, Any],
    *,
    exchange: str,
    routing_key: str,
) -> bytes:
    """A JSON ``body`` in kombu's Redis envelope (base64 body, as kombu encodes it)."""
    return json.dumps(
        {
            "body": base64.b64encode(body.encode()).decode("ascii"),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                **properties,
                "delivery_info": {"exchange": exchange, "routing_key": routing_key},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
            },
        }
    ).encode()


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


def lpush(target: RedisTarget, key: str, value: bytes, timeout: float = CONNECT_TIMEOUT) -> None:
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
    target = redis_target(broker_url)
    if target is None:
        return None
    task_id = str(uuid.uuid4())
    try:
        lpush(target, queue, task_message(name, args, {}, queue, task_id=task_id, label=label))
    except OSError as exc:
        if exposure.broker_failure(exc).startswith("authentication failed"):
            # Celery would be refused alike, after seconds of retries: say so now
            raise exposure.broker_error(broker_url, exc) from None
        return None
    return task_id
