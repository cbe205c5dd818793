"""A channel whose broker connection is gone raises a connection error, never AttributeError."""

from __future__ import annotations

import pytest
import redis
from kombu import Connection

import tasks  # noqa: F401  (installs the guard, as in every worker)


def test_a_closed_channel_raises_a_connection_error(redis_url: str) -> None:
    connection = Connection(redis_url)
    channel = connection.default_channel
    channel.client.ping()
    transport = channel.connection
    transport.client = None  # what a lost connection leaves behind
    with pytest.raises(redis.exceptions.ConnectionError, match="connection is closed"):
        channel._connparams()
