"""``sluice reconfigure | enqueue | dequeue``: management through ZooKeeper events.

``enqueue`` and ``dequeue`` check what they can at once (tenant, pipeline,
project, ref: a typo is an error with exit status 1, and nothing is queued),
then put a management event in the tenant's queue, nudge the scheduler,
and wait for the outcome the pipeline records when it applies the event.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click

from cli.commands.common import clear_errors, settings
from cli.gitrefs import list_refs, resolve
from scheduler import dispatch, tasknames
from scheduler.errors import SluiceError
from scheduler.layouts import TenantLayouts
from scheduler.model.change import Change
from scheduler.reconfiguration import merger_fetch, reconfigure
from scheduler.settings import Settings
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.management import wait_for_result


class ManagementError(SluiceError):
    """A management request names something that does not exist, or went unanswered."""


@contextmanager
def _zookeeper(conf: Settings) -> Iterator[ZooKeeperClient]:
    client = connect(conf.zookeeper)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@dataclass(frozen=True)
class Target:
    tenant: str
    pipeline: str
    connection: str


def _target(client: ZooKeeperClient, tenant: str, pipeline: str, project: str) -> Target:
    layout = TenantLayouts(client).get(tenant)
    if pipeline not in layout.layout.pipelines:
        known = ", ".join(sorted(layout.layout.pipelines)) or "none"
        raise ManagementError(f"tenant {tenant!r} has no pipeline {pipeline!r} (it has: {known})")
    for entry in layout.tenant.projects:
        if entry.name == project:
            return Target(tenant, pipeline, entry.connection)
    raise ManagementError(f"tenant {tenant!r} has no project {project!r}")


def _send(
    client: ZooKeeperClient, conf: Settings, target: Target, event: dict[str, Any], timeout: float
) -> dict[str, Any]:
    result_id = uuid.uuid4().hex
    payload = {**event, "pipeline": target.pipeline, "result_id": result_id}
    EventQueue(client, paths.tenant_management_queue(target.tenant)).put(payload)
    dispatch.send(tasknames.PROCESS_TENANT, target.tenant, settings=conf)
    outcome = wait_for_result(client, result_id, timeout)
    if outcome is None:
        raise ManagementError(
            f"no answer within {timeout:.0f}s: the event is queued and will be applied when "
            "a scheduler worker runs (see `sluice stack status`)"
        )
    if "error" in outcome:
        raise ManagementError(str(outcome["error"]))
    return outcome


def _options(f: Any) -> Any:
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
@_options
@click.option("--branch", required=True, help="The target branch the change merges into.")
@click.option("--ref", required=True, help="A branch, tag, full ref or commit to test.")
@clear_errors
def enqueue(
    *, tenant: str, pipeline: str, project: str, branch: str, ref: str, timeout: float
) -> None:
    """Enqueue REF of PROJECT into PIPELINE; prints the item id."""
    conf = settings()
    with _zookeeper(conf) as client:
        item = enqueue_change(client, conf, tenant, pipeline, project, branch, ref, timeout)
    click.echo(item)


def enqueue_change(  # noqa: PLR0917 (the CLI's arguments, in its order)
    client: ZooKeeperClient,
    conf: Settings,
    tenant: str,
    pipeline: str,
    project: str,
    branch: str,
    ref: str,
    timeout: float = 60.0,
) -> str:
    """Check the names and the ref, enqueue, and return the item id once it is in."""
    target = _target(client, tenant, pipeline, project)
    connection = conf.connections[target.connection]
    refs = list_refs(connection, project)
    if f"refs/heads/{branch}" not in refs:
        raise ManagementError(f"project {project!r} has no branch {branch!r}")
    commit = resolve(refs, ref, connection, project)
    if commit is None:
        raise ManagementError(f"project {project!r} has no ref {ref!r}")
    change = Change(target.connection, project, branch, ref, commit)
    outcome = _send(client, conf, target, {"type": "enqueue", "change": change.to_dict()}, timeout)
    return str(outcome["item"])


@click.command()
@_options
@click.option("--ref", required=True, help="The ref the item was enqueued with.")
@click.option("--branch", default=None, help="Target branch (default: any).")
@clear_errors
def dequeue(
    *, tenant: str, pipeline: str, project: str, ref: str, branch: str | None, timeout: float
) -> None:
    """Take the item of REF out of PIPELINE (its builds are aborted)."""
    conf = settings()
    with _zookeeper(conf) as client:
        target = _target(client, tenant, pipeline, project)
        change = Change(target.connection, project, branch or "", ref)
        event = {"type": "dequeue", "change": change.to_dict()}
        outcome = _send(client, conf, target, event, timeout)
    for item in outcome["dequeued"]:
        click.echo(item)


@click.command()
@_options
@click.option("--ref", "refs", required=True, multiple=True, help="Repeat: the new head order.")
@clear_errors
def promote(
    *, tenant: str, pipeline: str, project: str, refs: tuple[str, ...], timeout: float
) -> None:
    """Move the items of REF... to the head of their queue, in the order given."""
    conf = settings()
    with _zookeeper(conf) as client:
        target = _target(client, tenant, pipeline, project)
        changes = [Change(target.connection, project, "", ref).to_dict() for ref in refs]
        outcome = _send(client, conf, target, {"type": "promote", "changes": changes}, timeout)
    for item in outcome["promoted"]:
        click.echo(item)


@click.command("reconfigure")
@click.option("--tenant", default=None, help="Only this tenant (default: all of main.yaml).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds per merger job.")
@clear_errors
def reconfigure_command(tenant: str | None, timeout: float) -> None:
    """Read every project's config through the mergers and rebuild tenant layouts."""
    conf = settings()
    with _zookeeper(conf) as client:
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
