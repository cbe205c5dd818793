"""``sluice nodes``: the node key to install on static hosts, and the node requests and nodes.

``sluice nodes pubkey`` prints the public half of ``nodes.ssh_key`` (made
when missing, as an executor or launcher would): the line an operator puts
in ``~/.ssh/authorized_keys`` of the user of every static host.
``sluice nodes list`` shows what ``/nodepool`` holds (docs/nodes.md).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from cli.commands.common import clear_errors, settings, zookeeper


@click.group()
def nodes() -> None:
    """The node key for static hosts; node requests and nodes."""


@nodes.command("pubkey")
@clear_errors
def pubkey() -> None:
    """Print the node key's public half (made when missing): for static hosts' authorized_keys."""
    from workers.nodekey import ensure_node_key, node_key_path, public_key

    click.echo(public_key(ensure_node_key(node_key_path(settings()))))


def _listing() -> dict[str, list[dict[str, Any]]]:
    from scheduler.stores.nodes import NodeStore

    with zookeeper() as client:
        store = NodeStore(client)
        return {
            "requests": [{"id": r.id, **r.to_dict()} for r in store.requests()],
            "nodes": [{"id": n.id, **n.to_dict()} for n in store.nodes()],
        }


def _age(state_time: float) -> str:
    return f"{max(0, int(time.time() - state_time))}s"


@nodes.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON form.")
@clear_errors
def list_nodes(as_json: bool = False) -> None:
    """Node requests and nodes with their states, addresses and users."""
    found = _listing()
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    click.echo("requests:" if found["requests"] else "no node requests")
    for r in found["requests"]:
        click.echo(
            f"  {r['id']}  {r['state']:<9}  {_age(r['state_time']):>6}  "
            f"{','.join(r['labels'])}  {r['requestor']}  nodes: {','.join(r['nodes']) or '-'}"
            + (f"  ({r['reason']})" if r["reason"] else "")
        )
    click.echo("nodes:" if found["nodes"] else "no nodes")
    for n in found["nodes"]:
        c = n["connection"]
        address = f"{c.get('username', '?')}@{c.get('host', '?')}:{c.get('port', '?')}"
        click.echo(
            f"  {n['id']}  {n['state']:<8}  {_age(n['state_time']):>6}  {n['provider']}/"
            f"{n['label']}  on {n['host']}  {address}  {n['allocated_to'] or '-'}"
        )
