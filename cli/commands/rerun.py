"""``sluice rerun``: Zuul's re-enqueue: take an item out and put its ref in again."""

from __future__ import annotations

import click

from cli.commands.common import clear_errors, settings, zookeeper
from cli.commands.manage import management_options
from scheduler.management import NotInPipelineError, dequeue_change, enqueue_change


@click.command()
@management_options
@click.option("--branch", required=True, help="The target branch the change merges into.")
@click.option("--ref", required=True, help="The ref the item was enqueued with.")
@clear_errors
def rerun(
    *, tenant: str, pipeline: str, project: str, branch: str, ref: str, timeout: float
) -> None:
    """Dequeue the item of REF (if any) and enqueue REF again; prints the new item id.

    Its jobs run again from the start, on the ref's current commit.
    """
    conf = settings()
    with zookeeper(conf) as client:
        try:
            gone = dequeue_change(client, conf, tenant, pipeline, project, ref, branch, timeout)
        except NotInPipelineError:
            gone = []  # it already left (reported): enqueue it again all the same
        item = enqueue_change(client, conf, tenant, pipeline, project, branch, ref, timeout)
    for old in gone:
        click.echo(f"dequeued {old}", err=True)
    click.echo(item)
