"""Reconfiguration as events: requested in ZooKeeper, applied by the tenant task.

Zuul reconfigures a tenant when a change that edits configuration merges,
and loads every tenant when it starts. Sluice keeps those requests where it
keeps all work, in ZooKeeper: one event queue per tenant,
``/events/tenant/<tenant>/reconfigure`` (DESIGN.md invariant 2: a lost
nudge delays a request by one sweep, never loses it).

* A pipeline pass that applies the successful push of an item whose change
  touched configuration puts a request in the same transaction that
  records the push (:func:`request_ops`), then nudges the tenant task.
* The sweep compares the tenant file's digest with the one recorded at
  ``/config/tenant-file`` (:func:`check_tenant_file`); a new or changed file
  (a fresh deployment included) requests a reconfiguration of every tenant
  it names. ``sluice stack up`` runs the same check at once.
* ``sluice.merger.reconfigure`` applies them on a merger worker, which
  reads the config from its own repo cache (:mod:`workers.merger.reconfigure`,
  :func:`apply_requests`): one reconfiguration under the tenant write lock
  for every request read, acknowledged only after it succeeded; a failure
  leaves them for the next nudge or the sweep (``tenants_to_reconfigure``).

``sluice reconfigure`` stays the manual, synchronous trigger.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from scheduler import tasknames
from scheduler.config import parse_tenant_config
from scheduler.config.checkout import candidate_paths
from scheduler.layouts import reconfigure_tenant
from scheduler.layouts.errors import TenantNotFoundError
from scheduler.layouts.reconfigure import Fetch, retire_tenant
from scheduler.reconfiguration import (
    ReconfigurationError,
    retire_removed_pipelines,
    tenant_names,
)
from scheduler.settings import Settings
from scheduler.zk import config_cache as cc
from scheduler.zk import flags, paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext, OpFailedError, Transaction
from scheduler.zk.errors import NoDataError
from scheduler.zk.event_queue import EventQueue

log = logging.getLogger(__name__)

# nudge(task name, arguments)
Nudge = Callable[[str, tuple[str, ...]], None]
# Seconds a reconfiguration task waits for the tenant's write lock before it
# gives way (LockTimeoutError: the task is retried later, the requests stay).
LOCK_WAIT = 2.0


def touches_config(files: Iterable[str], extra: Iterable[str] = ()) -> bool:
    """Whether a change with these files edits Zuul or Sluice configuration."""
    return bool(candidate_paths(files, extra))


def request_ops(client: ZooKeeperClient, tenant: str, why: str, txn: Transaction) -> None:
    """Add a reconfiguration request for ``tenant`` to ``txn``."""
    queue = EventQueue(client, paths.tenant_reconfigure_queue(tenant))
    queue.ensure()
    queue.put_ops({"type": "reconfigure", "why": why, "time": time.time()}, txn)


def apply_requests(client: ZooKeeperClient, settings: Settings, tenant: str, fetch: Fetch) -> bool:
    """Reconfigure ``tenant`` with ``fetch`` if it has requests; True if it did."""
    queue = EventQueue(client, paths.tenant_reconfigure_queue(tenant))
    events = queue.read()
    if not events:
        return False
    why = sorted({str(e.payload.get("why", "")) for e in events})
    log.info("tenant %s: reconfiguring (%s)", tenant, "; ".join(why))
    try:
        _reconfigure_or_retire(client, settings, tenant, fetch)
    except ReconfigurationError as exc:
        # The requests stay (the sweep asks again); say why for `stack up` and operators.
        stored.save(
            LockContext(client), paths.tenant_reconfigure_error(tenant), {"error": str(exc)}
        )
        raise
    flags.lower_flag(client, paths.tenant_reconfigure_error(tenant))
    for event in events:
        queue.ack(event)
    return True


def reconfigure_error(client: ZooKeeperClient, tenant: str) -> str | None:
    """Why the tenant's last requested reconfiguration failed, None if it did not."""
    try:
        found = stored.load(LockContext(client), paths.tenant_reconfigure_error(tenant))
    except NoDataError:
        return None
    return str(found.data.get("error", ""))


def _reconfigure_or_retire(
    client: ZooKeeperClient, settings: Settings, tenant: str, fetch: Fetch
) -> None:
    try:
        # Never wait long for the write lock: a `sluice reconfigure` holding it
        # may be waiting for this very merger worker's jobs. The task retries.
        result = reconfigure_tenant(client, settings, tenant, fetch, lock_timeout=LOCK_WAIT)
        for message in result.messages:
            log.warning("tenant %s: %s", tenant, message)
        retire_removed_pipelines(client, settings, tenant, result.layout)
    except TenantNotFoundError as exc:
        log.warning("tenant %s: not reconfigured: %s", tenant, exc)
        if left_tenant_file(settings, tenant) and cc.load_layout_state(client, tenant):
            # Removed from a valid tenant file: every pipeline retires.
            result = retire_tenant(client, tenant, lock_timeout=LOCK_WAIT)
            retire_removed_pipelines(client, settings, tenant, result.layout)


def left_tenant_file(settings: Settings, tenant: str) -> bool:
    """Whether the tenant file is readable, valid, and does not name ``tenant``.

    A file that cannot be read or has errors retires nothing (the tenant
    keeps its layout until the file is mended).
    """
    try:
        text = Path(settings.tenant_config).read_text(encoding="utf-8")
    except OSError:
        return False
    config = parse_tenant_config(text, Path(settings.tenant_config).name, settings.connections)
    return not config.errors and config.tenant(tenant) is None


def file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ReconfigurationError(f"{path}: cannot read the tenant config: {exc}") from None


def check_tenant_file(client: ZooKeeperClient, settings: Settings, nudge: Nudge) -> list[str]:
    """Request a reconfiguration of every tenant if the tenant file changed.

    Returns the tenants asked. The digest and the requests commit in one
    transaction that compares-and-sets the digest node, so two sweeps (or a
    sweep and ``stack up``) never both ask.
    """
    path = Path(settings.tenant_config)
    digest = file_digest(path)
    node = paths.tenant_file_state()
    context = LockContext(client)
    try:
        found = stored.load(context, node)
        recorded, version = found.data.get("sha256"), found.version
    except NoDataError:
        recorded, version = None, -1
    if recorded == digest:
        return []
    named = tenant_names(settings)
    # a tenant with a layout that the file no longer names is asked too (retired)
    tenants = named + [t for t in cc.layout_tenants(client) if t not in named]
    why = "the tenant file is new" if recorded is None else "the tenant file changed"
    requests = Transaction(client)
    for tenant in tenants:
        request_ops(client, tenant, why, requests)
    record = {"sha256": digest, "path": str(path), "time": time.time()}
    try:
        stored.save(context, node, record, version=version, extra=requests)
    except OpFailedError:
        return []  # another process recorded this file first (and asked)
    for tenant in tenants:
        nudge(tasknames.RECONFIGURE, (tenant,))
    log.info("%s: %s; reconfiguration requested for %s", path, why, ", ".join(tenants))
    return tenants
