"""``sluice stack up | down | status``."""

from __future__ import annotations

import click

from scheduler.cli.common import clear_errors, settings
from scheduler.stack.local import LocalStack, describe


@click.group()
def stack() -> None:
    """Run the local stack: ZooKeeper, Redis and Celery workers."""


@stack.command()
@click.option("--concurrency", default=2, show_default=True, help="Processes per worker.")
@clear_errors
def up(concurrency: int) -> None:
    """Start every missing component and wait until all answer."""
    local = LocalStack(settings(), worker_concurrency=concurrency)
    local.up()
    click.echo(describe(local.status()))


@stack.command()
@clear_errors
def down() -> None:
    """Stop exactly what `sluice stack up` started."""
    stopped = LocalStack(settings()).down()
    for component in stopped:
        click.echo(f"stopped {component.name} (pid {component.pid})")
    if not stopped:
        click.echo("nothing to stop")


@stack.command()
@clear_errors
def status() -> None:
    """Show each component, its pid, address and health (exit 1 if any is unhealthy)."""
    statuses = LocalStack(settings()).status()
    if not statuses:
        click.echo("the stack is not running (sluice stack up starts it)")
        raise SystemExit(1)
    click.echo(describe(statuses))
    if not all(st.healthy for st in statuses):
        raise SystemExit(1)
