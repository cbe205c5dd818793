"""The messages kombu's Redis transport carries, written by hand: Celery's format, pure data.

Sluice pushes its nudges and its workers' task events itself when the
broker is a plain Redis (:mod:`scheduler.nudge.fresh_socket`,
:mod:`scheduler.nudge.kept_connection`), so it writes what Celery and kombu
would write: a task message of Celery's protocol 2 (headers, a JSON body
``[args, kwargs, embed]``) or an event, in kombu's Redis envelope (the body
base64-encoded, the properties with their delivery info). Nothing here
does I/O: it says where a plain ``redis://`` broker is
(:func:`redis_target`) and what the bytes are; its callers push them.

The layout is Celery's and kombu's, not ours, and neither promises to
keep it: :data:`MESSAGE_FORMAT_OF` names the releases it was checked
against.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import unquote, urlsplit

MESSAGE_FORMAT_OF: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {"celery": ("5.7", "5.8"), "kombu": ("5.7", "5.8")}
)
"""The releases whose message layout this module writes: ``(lowest, highest excluded)``.

Checked against Celery 5.7's protocol-2 task message (the headers and body
``celery/app/amqp.py``'s ``as_task_v2`` makes for ``send_task``) and kombu
5.7's Redis envelope (``transport/virtual/base.py``: ``prepare_message``;
``basic_publish``, the base64 body) and its queue lists and event fanout channels
(``transport/redis.py``: ``_put``, ``_put_fanout``). A new kombu or Celery
must be checked against that protocol-2 message layout before a range is
widened: compare what it writes with :func:`task_message`,
:func:`event_message` and :func:`envelope`, run the fast-send tests (a
real worker must read what this module writes, and Flower its events),
then move the ``celery`` and ``kombu`` bounds of ``pyproject.toml`` with it.
``tests/foundation/test_message_format_versions.py`` holds the installed
releases and ``pyproject.toml``'s bounds to this range.
"""


@dataclass(frozen=True)
class RedisTarget:
    """Where a plain ``redis://`` broker is, and whom to log in as."""

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
