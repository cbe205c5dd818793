"""Providers' plans without services: quotas per label, capacity per static host.

Local nodes are booted for real in test_boot.py.
"""

from __future__ import annotations

from scheduler.settings.nodes import NodeProviderSettings, StaticHostSettings
from scheduler.stores.node_records import Node
from workers.launcher.providers import StaticProvider

HOSTS = NodeProviderSettings(
    "hosts",
    "static",
    {"ubuntu": 3, "debian": 1},
    (
        StaticHostSettings("h1", ("ubuntu", "debian"), max_parallel_jobs=1),
        StaticHostSettings("h2", ("ubuntu",), max_parallel_jobs=2, username="ci", port=2222),
    ),
)


def _node(label: str, host: str, provider: str = "hosts") -> Node:
    return Node("0000000001", provider, label, host=host)


def test_static_nodes_go_to_the_least_used_hosts_that_serve_the_label() -> None:
    provider = StaticProvider(HOSTS)
    plan = provider.plan(["ubuntu", "ubuntu"], [])
    assert isinstance(plan, list)
    assert sorted(n.host for n in plan) == ["h1", "h2"]
    h2 = next(n for n in plan if n.host == "h2")
    assert dict(h2.connection) == {"host": "h2", "port": 2222, "username": "ci"}
    # h1 is full (one job): debian has no other host
    reason = provider.plan(["debian"], [_node("ubuntu", "h1")])
    assert reason == "provider hosts: every host of debian runs its most jobs"
    assert provider.plan(["ubuntu"], [_node("ubuntu", "h1")]) == [
        Node(
            "",
            "hosts",
            "ubuntu",
            host="h2",
            connection={"host": "h2", "port": 2222, "username": "ci"},
        )
    ]


def test_quotas_count_every_node_of_the_provider_and_label() -> None:
    provider = StaticProvider(HOSTS)
    existing = [_node("ubuntu", "h2"), _node("ubuntu", "h2")]
    assert provider.plan(["ubuntu", "ubuntu"], existing) == (
        "provider hosts: quota of ubuntu reached (3 nodes)"
    )
    others = [_node("ubuntu", "h2", provider="elsewhere")] * 5
    assert isinstance(provider.plan(["ubuntu"], others), list), "other providers' nodes"
    assert not provider.serves("gpu") and provider.serves("debian")
