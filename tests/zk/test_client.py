"""The client: deadlines, connection states, the watchdog, and names from outside."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest

from cli.stack.process import free_port
from scheduler.settings.sections import ZooKeeperAuth, ZooKeeperSettings
from scheduler.zk import locks, paths, paths_nodepool, stored
from scheduler.zk.client import ConnectionState, ZooKeeperClient, attach, connect
from scheduler.zk.context import LockContext
from scheduler.zk.errors import (
    AccessDeniedError,
    CallTimeoutError,
    InvalidNameError,
    LockLostError,
    ZooKeeperUnavailableError,
)
from tests.fixtures.waiting import wait_until
from tests.zk.proxy import TcpProxy

BAD_NAMES = [
    "feature/x",
    "..",
    ".",
    "a\x00b",
    "\udc80lone surrogate",
    "\x01\x7f\u0085 control",
    "emoji \U0001f600 and ünïcode",
    "x" * 5000,
    "%2F",
    "/",
    "zookeeper",
]


def test_segment_is_safe_and_injective() -> None:
    encoded = [paths.segment(n) for n in BAD_NAMES]
    assert len(set(encoded)) == len(BAD_NAMES)
    for name, seg in zip(BAD_NAMES, encoded, strict=True):
        assert "/" not in seg and seg not in (".", "..")
        assert seg.isascii() and 0 < len(seg) <= paths.MAX_SEGMENT
        if len(name) < 60:
            assert paths.unsegment(seg) == name
    long_a, long_b = "y" * 5000, "y" * 4999 + "z"
    assert paths.segment(long_a) != paths.segment(long_b)
    with pytest.raises(ValueError):
        paths.segment("")


def test_the_path_memos_hold_the_work_in_flight_not_a_days_uuids() -> None:
    """A day's builds pass through the memos; what stays is bounded (issue 39: flat memory)."""
    memos = [paths._encoded, paths.item, paths.buildset, paths.frozen_job, paths.build]
    for memo in memos:
        memo.cache_clear()
    for n in range(paths.PATHS_MEMO + 100):  # more buildsets than a memo keeps
        ref = paths.BuildsetRef("t", "gate", f"item-{n}", f"buildset-{n}")
        assert paths.build(ref, "unit", f"build-{n}").endswith(f"/build/build-{n}")
    assert paths._encoded.cache_info().currsize <= paths.SEGMENTS_MEMO
    for memo in memos[1:]:
        assert memo.cache_info().currsize <= paths.PATHS_MEMO
    # a pipeline of 500 items of 3 jobs is held whole: its second pass builds nothing
    for memo in memos:
        memo.cache_clear()
    refs = [paths.BuildsetRef("t", "gate", f"i{n}", f"b{n}") for n in range(500)]
    for _ in range(2):
        for ref in refs:
            for job in ("lint", "unit", "docs"):
                paths.build(ref, job, f"{ref.buildset_uuid}-{job}")
    assert paths.build.cache_info().misses == 1500


def test_bad_names_become_nodes_without_breaking_the_client(zk: ZooKeeperClient) -> None:
    for name in BAD_NAMES:
        path = paths.pipeline_lock(name, name)
        zk.create(path, b"", makepath=True)
        assert paths.basename(path) == paths.segment(name)
        assert zk.exists(path) is not None
    assert len(zk.get_children("/locks/pipeline")) == len(BAD_NAMES)
    assert zk.state == ConnectionState.CONNECTED
    # The client is still healthy after all of them.
    zk.create("/after", b"ok")
    assert zk.get("/after")[0] == b"ok"


def test_get_each_reads_in_order_and_gives_none_for_the_missing(zk: ZooKeeperClient) -> None:
    zk.create("/each/a", b"1", makepath=True)
    zk.create("/each/c", b"3", makepath=True)
    zk.set("/each/c", b"33")
    found = zk.get_each(["/each/c", "/each/b", "/each/a"])
    assert [None if f is None else f[0] for f in found] == [b"33", None, b"1"]
    assert found[0] is not None and found[0][1].version == 1
    assert zk.get_each([]) == []


def test_every_seed_path_builds(zk: ZooKeeperClient) -> None:
    ref = paths.BuildsetRef("tenant/a", "gate", "item-1", "bs-1")
    built = [
        paths.branch_cache_data("gerrit"),
        paths.branch_cache_lock("gerrit"),
        paths.change_cache_entry("gerrit", "change 1,1"),
        paths.change_cache_data("gerrit", "d1"),
        paths.blob_data("secret"),
        paths.blob_lock("secret"),
        paths.cleanup_lock("semaphores"),
        paths.component_prefix("executor", "host"),
        paths.config_cache("org/project", "stable/1.0", "zuul.d/jobs.yaml"),
        paths.config_lock("org/project"),
        paths.connection_event_election("gerrit"),
        paths.tenant_management_queue("t"),
        paths.tenant_trigger_queue("t"),
        paths.pipeline_management_queue("t", "gate"),
        paths.pipeline_result_queue("t", "gate"),
        paths.pipeline_trigger_queue("t", "gate"),
        paths.request_flag(paths.executor_queue("zone/a"), "u", "cancel"),
        paths.request_child(paths.merger_queue(), "waiters", "u"),
        paths_nodepool.launcher_stats_election(),
        paths.layout_state("t"),
        paths.layout_data("l1"),
        paths.connection_lock("gerrit", "poller"),
        paths.database_migration_lock(),
        paths.trigger_queue_lock("t"),
        paths.management_queue_lock("t"),
        paths.tenant_lock("t"),
        paths.ltime(),
        paths_nodepool.nodepool_election(),
        paths.management_result("e1"),
        paths.timer_election(),
        paths.scheduler_stats_election(),
        paths.global_semaphore("s"),
        paths.semaphore("t", "s"),
        paths.system_conf(),
        paths.system_conf_lock(),
        paths.pipeline_dirty("t", "gate"),
        paths.pipeline_queue("t", "gate", "integrated"),
        paths.repo_state(ref),
        paths.build_parameters(ref, "tox/py3", "b1"),
        paths.provider_config("t", "cloud"),
        paths_nodepool.nodeset_request("n1"),
        paths_nodepool.nodeset_lock("n1"),
        paths_nodepool.node("n1"),
        paths_nodepool.node_lock("n1"),
        paths_nodepool.image_artifact("a1"),
        paths_nodepool.image_upload("img", "b1", "ep"),
    ]
    assert len(set(built)) == len(built)
    txn_paths = [p for p in built if not p.endswith("-")]
    for path in txn_paths:
        assert path.startswith("/") and "//" not in path
        zk.create(path, b"", makepath=True)
    assert zk.exists("/tenant/tenant%2Fa/pipeline/gate/item/item-1/buildset/bs-1/repo_state")


def test_lost_session_is_recorded_and_refuses_writes(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    client = make_client(session_timeout=1.0)
    context = LockContext(client)
    assert context.valid
    session_id, password = client.kazoo.client_id
    twin = attach(client.settings, session_id, password)
    twin.stop()
    twin.close()
    wait_until(lambda: client.session_generation == 1, timeout=10, what="LOST recorded")
    wait_until(lambda: client.state == ConnectionState.CONNECTED, timeout=10, what="reconnect")
    assert client.session_id != session_id
    assert not context.valid
    with pytest.raises(LockLostError, match="session"):
        context.transaction()
    assert LockContext(client).valid  # a new context on the new session may write


def test_calls_have_deadlines_when_the_server_hangs(
    make_client: Callable[..., ZooKeeperClient], proxy: TcpProxy
) -> None:
    client = make_client(session_timeout=10.0, hosts=proxy.hosts, call_timeout=1.0)
    client.create("/before", b"")
    proxy.freeze()
    started = time.monotonic()
    with pytest.raises((CallTimeoutError, ZooKeeperUnavailableError)):
        client.get("/before")
    assert time.monotonic() - started < 3.0
    proxy.thaw()


def test_watchdog_stops_a_busy_holder_when_zookeeper_goes_silent(
    make_client: Callable[..., ZooKeeperClient], proxy: TcpProxy
) -> None:
    """A busy client whose server hangs still says CONNECTED; the watchdog does not."""
    session_timeout = 3.0
    client = make_client(session_timeout=session_timeout, hosts=proxy.hosts, call_timeout=1.0)
    held = locks.acquire(client, "/locks/pipeline/t/p")
    assert held is not None and held.valid
    busy = threading.Event()

    def keep_busy() -> None:  # requests in flight count as pings for kazoo
        while not busy.is_set():
            client.kazoo.exists_async("/")
            time.sleep(0.02)

    worker = threading.Thread(target=keep_busy, daemon=True)
    worker.start()
    proxy.freeze()
    frozen_at = time.monotonic()
    reason = wait_until(held.context.lost_reason, timeout=session_timeout, what="holder stops")
    noticed = time.monotonic() - frozen_at
    state_then = client.state
    assert noticed <= session_timeout * 2 / 3 + 0.8, f"noticed after {noticed:.2f}s"
    assert reason is not None and "watchdog" in reason
    assert state_then == ConnectionState.CONNECTED  # kazoo has not noticed anything
    with pytest.raises(LockLostError):
        stored.save(held.context, "/state", {"x": 1})
    busy.set()
    worker.join(5)
    # The server answers again within the session: the same lock is valid again.
    proxy.thaw()
    wait_until(lambda: held.valid, timeout=10, what="holder valid again")
    stored.save(held.context, "/state", {"x": 2})
    held.release()


def test_digest_auth_protects_every_node_created(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    auth = ZooKeeperAuth("sluice", "s3cret")
    owner = make_client(auth=auth)
    stored.save(LockContext(owner), "/tenant/t/pipeline/p", {"secret": "x"})
    assert stored.load(LockContext(owner), "/tenant/t/pipeline/p").data["secret"] == "x"
    stranger = make_client()
    with pytest.raises(AccessDeniedError):
        stranger.get("/tenant/t/pipeline/p")
    with pytest.raises(AccessDeniedError):
        stranger.create("/tenant/t/intruder", b"")


def test_connect_without_a_server_fails_within_the_deadline() -> None:
    settings = ZooKeeperSettings(hosts=f"127.0.0.1:{free_port()}", call_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(CallTimeoutError, match="could not reach"):
        connect(settings)
    assert time.monotonic() - started < 5


def test_lock_acquire_is_bounded_when_the_server_hangs(
    make_client: Callable[..., ZooKeeperClient], proxy: TcpProxy
) -> None:
    client = make_client(session_timeout=3.0, hosts=proxy.hosts, call_timeout=1.0)
    client.ensure_path("/locks/pipeline/t/p")
    proxy.freeze()
    started = time.monotonic()
    try:
        held = locks.acquire(client, "/locks/pipeline/t/p", timeout=1.0)
    except ZooKeeperUnavailableError:
        held = None
    assert held is None
    assert time.monotonic() - started < 3.0 + 2.0
    proxy.thaw()


def test_a_uuid_is_its_own_segment_and_never_memoized() -> None:
    """An executor sees each request's uuid a few times: a day of them must not stay."""
    paths._encoded.cache_clear()
    for _ in range(3 * paths.SEGMENTS_MEMO):
        name = uuid.uuid4().hex
        assert paths.segment(name) is name
        assert paths.request_child("/executor/unzoned", "requests", name).endswith("/" + name)
    assert paths._encoded.cache_info().currsize == 0
    # names that need encoding or checking still go through the encoder
    for name in ("feature/x", ".", "..", "a-b", "é", "x" * (paths.MAX_SEGMENT + 1)):
        assert paths.segment(name) == paths._encoded(name)
        assert "/" not in paths.segment(name) and paths.segment(name) not in (".", "..")
    for bad in ("", None, 5):
        with pytest.raises(InvalidNameError):
            paths.segment(bad)  # type: ignore[arg-type]
