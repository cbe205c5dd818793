"""Helpers shared by the CLI commands."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import click

from scheduler.errors import SluiceError
from scheduler.settings import Settings, load_settings

P = ParamSpec("P")
R = TypeVar("R")


def settings() -> Settings:
    return load_settings()


def clear_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a :class:`SluiceError` into a one-line message and exit status 1."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except SluiceError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper
