"""``sluice components``: the processes registered in ZooKeeper's component registry."""

from __future__ import annotations

import json
import time

import click

from cli.commands.common import clear_errors, zookeeper


def _age(since: object) -> str:
    """How long ago ``since`` was: 42s, 5m, 3h, 2d."""
    if not isinstance(since, int | float) or since <= 0:
        return "-"
    seconds = max(0, int(time.time() - since))
    for unit, size, below in (("s", 1, 120), ("m", 60, 7200), ("h", 3600, 172800)):
        if seconds < below:
            return f"{seconds // size}{unit}"
    return f"{seconds // 86400}d"


@click.command()
@click.option("--kind", default=None, help="Only this kind (scheduler, merger, executor, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON form.")
@clear_errors
def components(kind: str | None, as_json: bool) -> None:
    """Registered processes: kind, host, pid, queues, state, version and age."""
    from scheduler.stores.components import all_components, list_components

    with zookeeper() as client:
        found = list_components(client, kind) if kind else all_components(client)
    if as_json:
        rows = [
            {
                "kind": c.kind,
                "hostname": c.hostname,
                "pid": c.pid,
                "state": c.state,
                "version": c.version,
                "queues": list(c.handles),
                **dict(c.extra),
            }
            for c in found
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    if not found:
        click.echo("no components registered")
        return
    table = [("KIND", "HOST", "PID", "QUEUES", "STATE", "VERSION", "SINCE")]
    for c in found:
        queues = ",".join(c.handles) or "-"
        since = _age(c.extra.get("since"))
        table.append((c.kind, c.hostname, str(c.pid), queues, c.state, c.version, since))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
