"""``sluice reconfigure | enqueue | dequeue | promote``: management through ZooKeeper events.

The verbs are :mod:`scheduler.management`'s: they check what they can at once (tenant, pipeline,
project, ref: a typo is an error with exit status 1, and nothing is queued),
then put a management event in the tenant's queue, nudge the scheduler,
and wait for the outcome the pipeline records when it applies the event.
"""

from __future__ import annotations

from typing import Any

import click

from cli.commands.common import clear_errors, settings, zookeeper
from scheduler.management import dequeue_change, enqueue_change, promote_changes
from scheduler.reconfiguration import merger_fetch, reconfigure


def management_options(f: Any) -> Any:
    for option in reversed(
        [
            click.option("--tenant", required=True),
            click.option("--pipeline", required=True),
            click.option("--project", required=True),
            click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait."),
        ]
    ):
        f = option(f)
    return f


@click.command()
@management_options
@click.option("--branch", required=True, help="The target branch the change merges into.")
@click.option("--ref", required=True, help="A branch, tag, full ref or commit to test.")
@clear_errors
def enqueue(
    *, tenant: str, pipeline: str, project: str, branch: str, ref: str, timeout: float
) -> None:
    """Enqueue REF of PROJECT into PIPELINE; prints the item id."""
    conf = settings()
    with zookeeper(conf) as client:
        item = enqueue_change(client, conf, tenant, pipeline, project, branch, ref, timeout)
    click.echo(item)


@click.command()
@management_options
@click.option("--ref", required=True, help="The ref the item was enqueued with.")
@click.option("--branch", default=None, help="Target branch (default: any).")
@clear_errors
def dequeue(
    *, tenant: str, pipeline: str, project: str, ref: str, branch: str | None, timeout: float
) -> None:
    """Take the item of REF out of PIPELINE (its builds are aborted)."""
    conf = settings()
    with zookeeper(conf) as client:
        gone = dequeue_change(client, conf, tenant, pipeline, project, ref, branch, timeout)
    for item in gone:
        click.echo(item)


@click.command()
@management_options
@click.option("--ref", "refs", required=True, multiple=True, help="Repeat: the new head order.")
@clear_errors
def promote(
    *, tenant: str, pipeline: str, project: str, refs: tuple[str, ...], timeout: float
) -> None:
    """Move the items of REF... to the head of their queue, in the order given."""
    conf = settings()
    with zookeeper(conf) as client:
        promoted = promote_changes(client, conf, tenant, pipeline, project, refs, timeout)
    for item in promoted:
        click.echo(item)


@click.command("reconfigure")
@click.option("--tenant", default=None, help="Only this tenant (default: all of main.yaml).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds per merger job.")
@clear_errors
def reconfigure_command(tenant: str | None, timeout: float) -> None:
    """Read every project's config through the mergers and rebuild tenant layouts."""
    conf = settings()
    with zookeeper(conf) as client:
        results = reconfigure(client, conf, merger_fetch(client, conf, timeout), tenant)
    failed = False
    for name, result in results.items():
        state = "changed" if result.changed else "unchanged"
        click.echo(f"tenant {name}: layout {result.state.uuid} ({state})")
        for message in result.messages:
            click.echo(f"  {message}", err=True)
            failed = True
    if failed:
        raise SystemExit(1)
