"""``sluice roundtrip``: a task through the broker to a worker that reads and writes ZooKeeper.

The quickest end-to-end health check of a stack: broker, a worker process,
ZooKeeper. ``sluice demo`` runs it first.
"""

from __future__ import annotations

import json
import uuid

import click

from cli.commands.common import clear_errors, settings
from scheduler.nudge import dispatch, task_names
from scheduler.settings.exposure import redact


@click.command("roundtrip")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for the task.")
@clear_errors
def roundtrip(timeout: float) -> None:
    """Send a round-trip task through the broker to a worker and print what it did."""
    conf = settings()
    token = uuid.uuid4().hex
    click.echo(f"sending sluice.system.roundtrip({token}) via {redact(conf.broker_url)}")
    # a broker that refuses us is named at once, with what failed (authentication, ...)
    dispatch.check_broker(conf)
    result = dispatch.send(task_names.ROUNDTRIP, token, settings=conf)
    try:
        reply = result.get(timeout=timeout)
    except Exception as exc:  # the broker or worker failed: name it
        raise click.ClickException(
            f"no reply from a worker within {timeout:.0f}s ({exc!r}); "
            "check `sluice stack status` and the worker logs"
        ) from None
    click.echo(
        f"worker {reply['read']['hostname']} pid {reply['read']['pid']} wrote "
        f"{reply['path']} in ZooKeeper {conf.zookeeper.hosts}{conf.zookeeper.root} "
        f"(zxid {reply['zxid']:#x}) and read it back:"
    )
    click.echo(json.dumps(reply["read"], indent=2, sort_keys=True))
    ok = reply["read"] == reply["written"] and reply["read"]["token"] == token
    click.echo("round trip OK" if ok else "round trip MISMATCH")
    if not ok:
        raise SystemExit(1)
