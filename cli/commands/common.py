"""Helpers shared by the CLI commands."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import click

from scheduler.errors import SluiceError
from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings

if TYPE_CHECKING:
    from scheduler.zk.client import ZooKeeperClient

P = ParamSpec("P")
R = TypeVar("R")


def settings() -> Settings:
    return load_settings()


@contextmanager
def zookeeper(conf: Settings | None = None) -> Iterator[ZooKeeperClient]:
    """A ZooKeeper client for one command, closed after it."""
    from scheduler.zk.client import connect

    client = connect((conf or settings()).zookeeper)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def clear_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a :class:`SluiceError` into a one-line message and exit status 1."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except SluiceError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper
