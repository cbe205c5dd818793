"""``sluice status`` and ``sluice wait --idle``: what ZooKeeper says right now."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from cli.commands.common import clear_errors, settings
from scheduler.state.store import PipelineStore
from scheduler.stores import inventory
from scheduler.views import status as status_view
from scheduler.views.idle import pending_work
from scheduler.zk.client import ZooKeeperClient, connect


@contextmanager
def zookeeper() -> Iterator[ZooKeeperClient]:
    client = connect(settings().zookeeper)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@click.command()
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON form.")
@clear_errors
def status(tenant: str | None, as_json: bool) -> None:
    """Pipelines, queues, items and their jobs with state, result and elapsed time."""
    with zookeeper() as client:
        document = status_document(client, tenant)
    click.echo(json.dumps(document, indent=2) if as_json else status_view.render_text(document))


def status_document(client: ZooKeeperClient, tenant: str | None = None) -> dict[str, Any]:
    """The ``sluice status --json`` document, read from ZooKeeper."""
    store = PipelineStore(client)
    tenants = [tenant] if tenant else inventory.tenants(client)
    return {
        "tenants": [
            status_view.tenant_status(
                name,
                [
                    store.state(name, p, store.read(name, p))
                    for p in inventory.pipelines(client, name)
                ],
            )
            for name in tenants
        ]
    }


@click.command()
@click.option("--idle", is_flag=True, required=True, help="Wait until nothing is pending.")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds before giving up.")
@click.option("--quiet", is_flag=True, help="Do not print what is still pending.")
@clear_errors
def wait(idle: bool, timeout: float, quiet: bool) -> None:
    """Exit 0 once no events, items or requests are pending; 1 on timeout."""
    deadline = time.monotonic() + timeout
    with zookeeper() as client:
        while True:
            pending = pending_work(client)
            if not pending:
                click.echo("idle")
                return
            if time.monotonic() >= deadline:
                if not quiet:
                    click.echo("still pending:\n  " + "\n  ".join(pending), err=True)
                raise SystemExit(1)
            time.sleep(0.2)
