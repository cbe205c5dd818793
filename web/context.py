"""What one web process shares between requests: settings, ZooKeeper, SQL, layouts.

A web instance keeps no state of its own: every answer is read from
ZooKeeper (pipeline state through the validated cache, layouts through
:class:`~scheduler.layouts.TenantLayouts`) or SQL, so any number of
instances can run behind a load balancer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from sqlalchemy import Engine

from scheduler.errors import SettingsError
from scheduler.layouts import TenantLayout, TenantLayouts
from scheduler.model.build import Build
from scheduler.model.item import PipelineState, QueueItem
from scheduler.nudge import dispatch
from scheduler.reporting import open_database
from scheduler.reporting.queries import format_time
from scheduler.settings.exposure import BrokerError
from scheduler.settings.sections import Settings
from scheduler.state.store import PipelineStore
from scheduler.stores import inventory
from scheduler.stores.keystore import KeyStore
from scheduler.zk.client import ZooKeeperClient, process_client
from web.auth import Authenticators
from web.errors import ApiError


def _stamp(value: float | None) -> str | None:
    return None if value is None else format_time(datetime.fromtimestamp(value, UTC))


def _live_row(
    tenant: str, pipeline: str, item: QueueItem, voting: bool, build: Build
) -> dict[str, Any]:
    change = item.change
    done = build.done
    duration = None
    if done and build.start_time is not None and build.end_time is not None:
        duration = build.end_time - build.start_time
    return {
        "uuid": build.uuid,
        "attempt": build.attempt,
        "job": build.job,
        "tenant": tenant,
        "pipeline": pipeline,
        "project": change.project,
        "branch": change.branch,
        "ref": change.ref,
        "change": change.ref,
        "newrev": change.commit,
        "buildset": item.buildset.uuid,
        "voting": voting,
        "nodeset": "",
        "executor": build.worker,
        "result": build.result.value if done and build.result else None,
        "final": False,
        "start_time": _stamp(build.start_time),
        "end_time": _stamp(build.end_time) if done else None,
        "duration": duration,
        "log_url": build.log_path,
        "error_detail": build.message,
        "state": build.state.value,
    }


@dataclass
class WebContext:
    settings: Settings
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @cached_property
    def client(self) -> ZooKeeperClient:
        return process_client(self.settings.zookeeper)

    @cached_property
    def engine(self) -> Engine:
        return open_database(self.settings.database_url)

    @cached_property
    def layouts(self) -> TenantLayouts:
        return TenantLayouts(self.client)

    @cached_property
    def auth(self) -> Authenticators:
        return Authenticators(self.settings.web.authenticators)

    @cached_property
    def keystore(self) -> KeyStore:
        """The projects' keys; ApiError 503 when this web has no keystore password."""
        try:
            password = self.settings.keystore.require_password()
        except SettingsError as exc:
            raise ApiError(503, f"this server cannot open project keys: {exc}") from None
        return KeyStore(self.client, password)

    # -- reads -------------------------------------------------------------

    def tenants(self) -> list[str]:
        return sorted(inventory.tenants(self.client))

    def check_tenant(self, tenant: str) -> str:
        """``tenant`` if it exists (has a layout); ApiError 404 otherwise."""
        if self.layouts.state(tenant) is None:
            raise ApiError(404, "Unknown tenant", "tenant")  # Zuul's words
        return tenant

    def layout(self, tenant: str) -> TenantLayout:
        self.check_tenant(tenant)
        with self._lock:  # the layout cache is not built for threads
            return self.layouts.get(tenant)

    def pipelines(self, tenant: str) -> list[PipelineState]:
        store = PipelineStore(self.client)
        return [
            store.state(tenant, name, store.read(tenant, name))
            for name in sorted(inventory.pipelines(self.client, tenant))
        ]

    def live_build(self, tenant: str, uuid: str) -> dict[str, Any] | None:
        """A build still in a pipeline (not yet in SQL), in the history's shape."""
        for state in self.pipelines(tenant):
            for item in state.items.values():
                for job in item.buildset.graph:
                    for build in job.builds:
                        if build.uuid == uuid:
                            return _live_row(tenant, state.pipeline, item, job.info.voting, build)
        return None

    def health(self) -> dict[str, Any]:
        """Whether ZooKeeper and the broker answer (``/health``).

        A broker's error names it with its password redacted, and what failed.
        """
        checks: dict[str, Any] = {}
        try:
            self.client.exists("/")
            checks["zookeeper"] = "ok"
        except Exception as exc:
            checks["zookeeper"] = f"error: {exc}"
        try:
            dispatch.check_broker(self.settings)
            checks["broker"] = "ok"
        except BrokerError as exc:
            checks["broker"] = f"error: {exc}"
        return checks
