"""``sluice deliveries``: webhook deliveries that did not become events, and what to do with them.

A delivery the connection hop could not turn into events is set aside with
its reason (a body of the wrong shape, a forge's refusal, a forge
unavailable for too many attempts); one whose forge is unavailable for now
is deferred and tried again. ``list`` shows both; ``retry`` puts a
set-aside delivery back into its connection's queue (and nudges the hop);
``discard`` forgets it.
"""

from __future__ import annotations

import datetime
import json

import click

from cli.commands.common import clear_errors, settings, zookeeper


@click.group(invoke_without_command=True)
@click.pass_context
def deliveries(ctx: click.Context) -> None:
    """Webhook deliveries set aside or deferred; retry or discard them."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_deliveries)


def _time(moment: float) -> str:
    if moment <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(moment, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _printable(text: str, width: int = 0) -> str:
    """One line of visible text (a delivery id or reason may hold anything)."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if not width or len(shown) <= width else shown[: width - 1] + "…"


@deliveries.command("list")
@click.option("--connection", default=None, help="Only this connection's deliveries.")
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON form.")
@clear_errors
def list_deliveries(connection: str | None = None, as_json: bool = False) -> None:
    """Set-aside and deferred deliveries: connection, delivery id, event, received, reason."""
    from scheduler.views.deliveries import DEFERRED, delivery_rows

    with zookeeper() as client:
        rows = delivery_rows(client, connection)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no deliveries set aside or deferred")
        return
    table = [("CONNECTION", "DELIVERY", "EVENT", "RECEIVED", "REASON")]
    for row in rows:
        reason = row["reason"]
        if row["state"] == DEFERRED:
            again = _time(row["not_before"])
            reason = f"deferred (attempt {row['attempts']}, next {again}): {reason}"
        event = f"{row['driver']} {row['event']}".strip()
        table.append(
            (
                _printable(row["connection"]),
                _printable(row["delivery"], 40),
                _printable(event),
                _time(row["received"]),
                _printable(reason, 120),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    for line in table:
        cells = [cell.ljust(w) for cell, w in zip(line, widths, strict=False)]
        click.echo("  ".join([*cells, line[-1]]).rstrip())


@deliveries.command("retry")
@click.argument("connection")
@click.argument("delivery")
@clear_errors
def retry(connection: str, delivery: str) -> None:
    """Put the set-aside DELIVERY back into CONNECTION's queue, to be translated again."""
    from scheduler.errors import SluiceError
    from scheduler.nudge import dispatch, task_names
    from scheduler.stores.deliveries import SetAsideStore

    conf = settings()
    with zookeeper(conf) as client:
        SetAsideStore(client, connection).retry(delivery)
    try:
        dispatch.send(task_names.FORWARD_CONNECTION_EVENTS, connection, settings=conf)
    except SluiceError as exc:  # queued in ZooKeeper: the sweep nudges the hop
        click.echo(f"queued; the hop was not nudged ({exc}): the next sweep will")
        return
    click.echo(f"queued {delivery} again on {connection}")


@deliveries.command("discard")
@click.argument("connection")
@click.argument("delivery")
@clear_errors
def discard(connection: str, delivery: str) -> None:
    """Forget the set-aside DELIVERY of CONNECTION."""
    from scheduler.stores.deliveries import SetAsideStore

    with zookeeper() as client:
        SetAsideStore(client, connection).discard(delivery)
    click.echo(f"discarded {delivery} of {connection}")
