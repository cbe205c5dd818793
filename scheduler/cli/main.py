"""``sluice``: the entry point and its command groups."""

from __future__ import annotations

import click


@click.group()
def cli() -> None:
    """Sluice: project gating with Celery tasks and ZooKeeper state."""


def main() -> None:
    cli()
