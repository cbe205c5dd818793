"""``sluice``: the entry point and its command groups.

``--config`` (or ``SLUICE_CONFIG``) names the ``sluice.yaml``; the option
is exported to the environment so Celery's ``celeryconfig`` and every
process started from here read the same file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from scheduler.cli.demo import demo
from scheduler.cli.history import builds, buildsets
from scheduler.cli.manage import dequeue, enqueue, promote, reconfigure_command
from scheduler.cli.stack import stack
from scheduler.cli.state import status, wait
from scheduler.cli.system import roundtrip
from scheduler.errors import SluiceError


@click.group()
@click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SLUICE_CONFIG",
    help="Path of sluice.yaml (default: $SLUICE_CONFIG, then ./sluice.yaml).",
)
def cli(config: Path | None) -> None:
    """Sluice: project gating with Celery tasks and ZooKeeper state."""
    if config is not None:
        if not config.is_file():
            raise click.ClickException(f"{config}: config file not found")
        os.environ["SLUICE_CONFIG"] = str(config.resolve())


for command in (
    stack,
    demo,
    roundtrip,
    status,
    wait,
    builds,
    buildsets,
    enqueue,
    dequeue,
    promote,
    reconfigure_command,
):
    cli.add_command(command)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except SluiceError as exc:  # a known failure: say what and where, no traceback
        click.echo(f"sluice: error: {exc}", err=True)
        sys.exit(1)
