"""A tenant's project keys, as the faces ask for them (``sluice encrypt``, the ``.pub`` endpoint).

A project's key pair belongs to the project of a connection, not to a
tenant (:mod:`scheduler.stores.keystore`): the tenant only says which
connection its project ``name`` comes from, read from the tenant's layout
state (no layout is built).
"""

from __future__ import annotations

from scheduler.errors import SluiceError
from scheduler.layouts import NoLayoutError, TenantLayouts
from scheduler.settings.sections import Settings
from scheduler.stores.keystore import KeyStore
from scheduler.zk.client import ZooKeeperClient


class UnknownProjectError(SluiceError):
    """The tenant has no project of that name."""


def project_connection(layouts: TenantLayouts, tenant: str, project: str) -> str:
    """The connection of ``tenant``'s ``project``; a clear error naming what is unknown."""
    state = layouts.state(tenant)
    if state is None:
        raise NoLayoutError(f"no tenant {tenant!r} (or it has no layout yet: not reconfigured)")
    entry = state.tenant.project(project)
    if entry is None:
        raise UnknownProjectError(f"tenant {tenant!r} has no project {project!r}")
    return entry.connection


def open_keystore(client: ZooKeeperClient, settings: Settings) -> KeyStore:
    """The keystore of ``settings``; a SettingsError naming the setting without a password."""
    return KeyStore(client, settings.keystore.require_password())


def public_key(client: ZooKeeperClient, settings: Settings, tenant: str, project: str) -> bytes:
    """The PEM public key of ``tenant``'s ``project`` (its key pair made on first use)."""
    connection = project_connection(TenantLayouts(client), tenant, project)
    return open_keystore(client, settings).public_pem(connection, project)
