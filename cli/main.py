"""``sluice``: the entry point and its command groups.

``--config`` (or ``SLUICE_CONFIG``) names the ``sluice.yaml``; the option
is exported to the environment so Celery's ``celeryconfig`` and every
process started from here read the same file.

Commands load lazily: each lives in its own module, imported only when it
runs, so ``sluice --help`` imports neither SQLAlchemy nor Celery nor the
demo. Their one-line help is kept here (``COMMANDS``); a test checks it
against each command's own docstring.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import click

from scheduler.errors import SluiceError

# name -> (module, attribute, the command's one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "autohold": (
        "cli.commands.autohold",
        "autohold",
        "Keep the workspace of the next failing builds of a job; list and delete requests.",
    ),
    "builds": ("cli.commands.history", "builds", "Build attempts, newest first."),
    "buildsets": (
        "cli.commands.history",
        "buildsets",
        "Buildsets (one per tested item), newest first.",
    ),
    "components": (
        "cli.commands.components",
        "components",
        "Registered processes: kind, host, pid, queues, state, version and age.",
    ),
    "deliveries": (
        "cli.commands.deliveries",
        "deliveries",
        "Webhook deliveries set aside or deferred; retry or discard them.",
    ),
    "demo": (
        "cli.commands.demo",
        "demo",
        "Run the sample tenant through check and gate, live, on the local stack.",
    ),
    "dequeue": (
        "cli.commands.manage",
        "dequeue",
        "Take the item of REF out of PIPELINE (its builds are aborted).",
    ),
    "enqueue": (
        "cli.commands.manage",
        "enqueue",
        "Enqueue REF of PROJECT into PIPELINE; prints the item id.",
    ),
    "encrypt": (
        "cli.commands.encrypt",
        "encrypt",
        "Encrypt a secret with PROJECT's public key; prints the secret stanza (as zuul-client).",
    ),
    "image": (
        "cli.commands.images",
        "image",
        "Build images now, list builds and uploads, delete builds.",
    ),
    "metrics": (
        "cli.commands.metrics",
        "metrics",
        "Serve Prometheus metrics read from ZooKeeper and SQL at /metrics.",
    ),
    "nodes": (
        "cli.commands.nodes",
        "nodes",
        "The node key for static hosts; node requests and nodes.",
    ),
    "promote": (
        "cli.commands.manage",
        "promote",
        "Move the items of REF... to the head of their queue, in the order given.",
    ),
    "reconfigure": (
        "cli.commands.manage",
        "reconfigure_command",
        "Read every project's config through the mergers and rebuild tenant layouts.",
    ),
    "retry": (
        "cli.commands.ops",
        "retry",
        "Send the Sluice task TASK_ID again (same task and arguments, a new id).",
    ),
    "rerun": (
        "cli.commands.rerun",
        "rerun",
        "Dequeue the item of REF (if any) and enqueue REF again; prints the new item id.",
    ),
    "roundtrip": (
        "cli.commands.system",
        "roundtrip",
        "Send a round-trip task through the broker to a worker and print what it did.",
    ),
    "stack": (
        "cli.commands.stack",
        "stack",
        "Run the local stack: ZooKeeper, Redis, Celery workers and the web.",
    ),
    "status": (
        "cli.commands.state",
        "status",
        "Pipelines, queues, items and their jobs with state, result and elapsed time.",
    ),
    "wait": (
        "cli.commands.state",
        "wait",
        "Exit 0 once no events, items or requests are pending; 1 on timeout.",
    ),
    "web": (
        "cli.commands.web",
        "web",
        "Serve the REST API, the status pages, /health and /metrics over HTTP.",
    ),
    "zookeeper": (
        "cli.commands.zookeeper",
        "zookeeper",
        "Close a ZooKeeper to clients without Sluice's password; print a superuser's digest.",
    ),
}


class LazyGroup(click.Group):
    """A group whose commands are imported when one runs, not to list them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attribute, _ = entry
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup)
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


def main() -> None:
    try:
        cli(standalone_mode=True)
    except SluiceError as exc:  # a known failure: say what and where, no traceback
        click.echo(f"sluice: error: {exc}", err=True)
        sys.exit(1)
