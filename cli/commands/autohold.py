"""``sluice autohold``: keep the workspace of the next failing builds of a job (Zuul's autohold)."""

from __future__ import annotations

import datetime
import json

import click

from cli.commands.common import clear_errors, zookeeper
from scheduler.errors import SluiceError


class AutoholdCommandError(SluiceError):
    """An autohold request that cannot be made, or one that does not exist."""


@click.group(invoke_without_command=True)
@click.pass_context
def autohold(ctx: click.Context) -> None:
    """Keep the workspace of the next failing builds of a job; list and delete requests."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_requests)


@autohold.command("add")
@click.option("--tenant", required=True)
@click.option("--project", required=True)
@click.option("--job", required=True)
@click.option("--ref", default="", help="Only refs that match this regex.")
@click.option("--reason", default="", help="Why (shown in the list).")
@click.option("--count", default=1, show_default=True, help="How many failing builds to hold.")
@clear_errors
def add(*, tenant: str, project: str, job: str, ref: str, reason: str, count: int) -> None:
    """Hold the workspace of the next COUNT failing builds of JOB; prints the request id."""
    from scheduler.stores.autoholds import AutoholdError, AutoholdStore

    with zookeeper() as client:
        try:
            request = AutoholdStore(client).add(
                tenant, project, job, ref=ref, reason=reason, count=count
            )
        except AutoholdError as exc:
            raise AutoholdCommandError(str(exc)) from None
    click.echo(request.id)


@autohold.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON form.")
@clear_errors
def list_requests(as_json: bool = False) -> None:
    """Autohold requests with the builds held for them."""
    from scheduler.stores.autoholds import AutoholdStore

    with zookeeper() as client:
        requests = AutoholdStore(client).list()
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in requests], indent=2))
        return
    if not requests:
        click.echo("no autohold requests")
        return
    for r in requests:
        since = datetime.datetime.fromtimestamp(r.created, datetime.UTC).strftime("%Y-%m-%d %H:%M")
        where = f"{r.tenant} {r.project} {r.job}" + (f" ref~{r.ref}" if r.ref else "")
        click.echo(f"{r.id}  {where}  held {len(r.held)}/{r.count}  since {since}  {r.reason}")
        for held in r.held:
            click.echo(f"    build {held.build}: {held.workspace}")


@autohold.command("delete")
@click.argument("request_id")
@clear_errors
def delete(request_id: str) -> None:
    """Delete the autohold request REQUEST_ID (held workspaces stay on disk)."""
    from scheduler.stores.autoholds import AutoholdStore

    with zookeeper() as client:
        if not AutoholdStore(client).delete(request_id):
            raise AutoholdCommandError(f"no autohold request {request_id}")
    click.echo(f"deleted {request_id}")
