"""The ``nodes:`` section of ``sluice.yaml``: the providers launchers make nodes from.

Issue 19, part 1 (seed 000's node requests). A launcher worker (one that
consumes the ``launcher`` queue) serves node requests from these providers::

    nodes:
      check_interval: 5          # seconds between two looks of each launcher
      node_dir: nodes            # local nodes' roots (default <state_dir>/nodes)
      ssh_key: keys/nodes        # the private key executors log in to nodes with
                                 # (default <state_dir>/ssh/nodes_ed25519, made when
                                 # missing); a local node trusts its .pub
      local_network: 10.213.0.0/16   # local nodes' addresses: a /30 each
      providers:
        - name: hosts
          driver: static         # existing hosts reached over SSH
          labels: {ubuntu: 4}    # label: most nodes of it at once (the quota)
          hosts:
            - name: 192.0.2.10
              labels: [ubuntu]
              max_parallel_jobs: 2
              username: zuul     # default: zuul
              port: 22
        - name: sandbox
          driver: local          # a fresh root on the launcher's host
          image: base            # booted from this image's newest ready upload
          image_provider: local  # ... to this images.providers entry (default local)
          labels: {sandbox: 2}

Every error names the file, line and key (:class:`SettingsReader`).
docs/nodes.md describes the launcher.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.errors import SettingsError
from scheduler.settings.reader import SettingsReader, resolve_path

NODE_DRIVERS = ("static", "local")


@dataclass(frozen=True)
class StaticHostSettings:
    """One existing host of a static provider."""

    name: str
    labels: tuple[str, ...]
    max_parallel_jobs: int = 1
    username: str = "zuul"
    port: int = 22


@dataclass(frozen=True)
class NodeProviderSettings:
    """A provider: its driver, the labels it serves with their quotas, and driver details."""

    name: str
    driver: str
    # label -> the most nodes of it this provider has at once
    labels: Mapping[str, int] = field(default_factory=dict)
    hosts: tuple[StaticHostSettings, ...] = ()
    image: str = ""
    image_provider: str = "local"


@dataclass(frozen=True)
class NodeSettings:
    check_interval: float = 5.0
    # None: ``<state_dir>/nodes``
    node_dir: Path | None = None
    # None: ``<state_dir>/ssh/nodes_ed25519`` (workers/nodekey.py makes it)
    ssh_key: Path | None = None
    # local nodes' /30s are taken from this IPv4 network (workers/launcher/addresses.py)
    local_network: str = "10.213.0.0/16"
    providers: tuple[NodeProviderSettings, ...] = ()

    def provider(self, name: str) -> NodeProviderSettings | None:
        return next((p for p in self.providers if p.name == name), None)


def _missing(reader: SettingsReader, key: str, message: str) -> SettingsError:
    """An error for a key that is absent: at the line of the mapping that lacks it."""
    error = reader.error(key, message)
    if key not in reader.lines and reader.lines:
        line = min(reader.lines.values())
        return SettingsError(f"{reader.where}:{line}: {reader.prefix}{key}: {message}")
    return error


def _name(reader: SettingsReader, key: str = "name") -> str:
    name = reader.get(key, str, "")
    if not name or "/" in name:
        raise _missing(reader, key, "required: a non-empty name without '/'")
    return str(name)


def _labels(reader: SettingsReader) -> dict[str, int]:
    section = reader.sub("labels")
    if section is None or not section.data:
        raise _missing(
            reader, "labels", "required: a mapping of label to its quota (nodes at once)"
        )
    labels = {}
    for label in list(section.data):
        quota = section.get(label, int, None)
        if quota is None or quota < 1:
            raise section.error(label, "the quota must be a whole number of at least 1")
        labels[label] = quota
    section.finish()
    return labels


def _read_host(reader: SettingsReader, labels: Mapping[str, int]) -> StaticHostSettings:
    name = _name(reader)
    listed = reader.get("labels", list, [])
    if not listed:
        raise _missing(reader, "labels", "required: the labels this host serves")
    for label in listed:
        if not isinstance(label, str) or label not in labels:
            raise reader.error("labels", f"label {label!r} is not in the provider's labels")
    most = reader.get("max_parallel_jobs", int, 1)
    if most < 1:
        raise reader.error("max_parallel_jobs", "must be at least 1")
    port = reader.get("port", int, 22)
    if not 0 < port < 65536:
        raise reader.error("port", "expected a TCP port")
    username = reader.get("username", str, "zuul")
    reader.finish()
    return StaticHostSettings(name, tuple(listed), most, username, port)


def _read_provider(reader: SettingsReader) -> NodeProviderSettings:
    name = _name(reader)
    driver = reader.get("driver", str, "")
    if driver not in NODE_DRIVERS:
        raise _missing(
            reader, "driver", f"expected one of {', '.join(NODE_DRIVERS)}, got {driver!r}"
        )
    labels = _labels(reader)
    hosts: list[StaticHostSettings] = []
    image = ""
    image_provider = "local"
    if driver == "static":
        listed: list[Any] = reader.get("hosts", list, [])
        if not listed:
            raise _missing(reader, "hosts", "required: a static provider's hosts")
        for index, entry in enumerate(listed):
            if not isinstance(entry, dict):
                raise reader.error("hosts", f"entry {index}: expected a mapping")
            sub = SettingsReader(entry, reader.where, f"{reader.prefix}hosts[{index}].")
            hosts.append(_read_host(sub, labels))
    else:
        image = _name(reader, "image")
        image_provider = (
            _name(reader, "image_provider") if "image_provider" in reader.data else "local"
        )
    reader.finish()
    return NodeProviderSettings(name, driver, labels, tuple(hosts), image, image_provider)


def read_nodes(reader: SettingsReader | None, base: Path) -> NodeSettings:
    """The ``nodes:`` section (``NodeSettings()`` when absent)."""
    if reader is None:
        return NodeSettings()
    check_interval = float(reader.get("check_interval", float, 5.0))
    if check_interval <= 0:
        raise reader.error("check_interval", "must be positive")
    node_dir = reader.get("node_dir", str, None)
    ssh_key = reader.get("ssh_key", str, None)
    local_network = reader.get("local_network", str, "10.213.0.0/16")
    try:
        network = ipaddress.IPv4Network(local_network)
    except ValueError as exc:
        raise reader.error("local_network", f"expected an IPv4 network: {exc}") from exc
    if network.prefixlen > 30:
        raise reader.error("local_network", "too small: a local node takes a /30")
    providers: list[NodeProviderSettings] = []
    listed: list[Any] = reader.get("providers", list, [])
    for index, entry in enumerate(listed):
        if not isinstance(entry, dict):
            raise reader.error("providers", f"entry {index}: expected a mapping")
        sub = SettingsReader(entry, reader.where, f"{reader.prefix}providers[{index}].")
        provider = _read_provider(sub)
        if any(p.name == provider.name for p in providers):
            raise reader.error("providers", f"provider {provider.name!r} is named twice")
        providers.append(provider)
    reader.finish()
    return NodeSettings(
        check_interval=check_interval,
        node_dir=resolve_path(node_dir, base) if node_dir else None,
        ssh_key=resolve_path(ssh_key, base) if ssh_key else None,
        local_network=str(network),
        providers=tuple(providers),
    )
