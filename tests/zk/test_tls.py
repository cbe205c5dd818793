"""TLS and digest auth against a real ZooKeeper (RELIABILITY rows 17 and 18).

One ZooKeeper server for the module, TLS-only: ``secureClientPort`` with the
Netty connection factory, ``ssl.clientAuth=need``, and no plaintext client
port at all (its readiness probe speaks four-letter words over TLS). The
certificates come from :mod:`tests.zk.tls_fixture`.

Row 18: a Sluice client with the CA, a client certificate and its key reads
and writes; every other client is refused within its deadline with a
SluiceError that says why, the reason is logged on both sides, and nothing
was written. Row 17: nodes made by the authenticated client, through every
recipe, carry the creator-only ACL, and clients without or with wrong
credentials have every operation refused.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from cli.stack.process import start_on_free_port
from cli.stack.zookeeper import ZooKeeperServer
from scheduler.errors import SluiceError, StackError
from scheduler.settings.sections import TLSSettings, ZooKeeperAuth, ZooKeeperSettings
from scheduler.stores import components
from scheduler.stores.job_requests import JobRequest, JobRequestQueue
from scheduler.stores.semaphores import SemaphoreNode
from scheduler.zk import locks, paths, stored
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.context import LockContext
from scheduler.zk.errors import AccessDeniedError, CallTimeoutError
from scheduler.zk.event_queue import EventQueue
from tests.fixtures.services import missing_service
from tests.fixtures.waiting import wait_until
from tests.zk.tls_fixture import Pki, PkiError, make_pki

CALL_TIMEOUT = 2.0
# What a refused connect may take beyond its deadline (kazoo's stop, our close).
SLACK = 1.5
AUTH = ZooKeeperAuth("sluice", "s3cret")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    try:
        return make_pki(tmp_path_factory.mktemp("pki"))
    except PkiError as exc:
        missing_service(f"a test PKI ({exc})")
        raise  # unreachable: missing_service fails or skips


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ZooKeeperServer]:
    if shutil.which("java") is None:
        missing_service("java (for ZooKeeper)")
    data_dir = tmp_path_factory.mktemp("zookeeper-tls")
    try:
        server = start_on_free_port(
            lambda port: ZooKeeperServer(data_dir=data_dir, port=port, tls=pki.server_tls()),
            timeout=60,
        )
    except StackError as exc:
        missing_service(f"ZooKeeper with TLS ({exc})")
        raise  # unreachable: missing_service fails or skips
    yield server
    server.stop()


@dataclass
class Tls:
    """The TLS server, its PKI and a chroot of the test's own."""

    server: ZooKeeperServer
    pki: Pki
    root: str

    def good(self) -> TLSSettings:
        return TLSSettings(
            ca=str(self.pki.ca), cert=str(self.pki.client_cert), key=str(self.pki.client_key)
        )

    def settings(
        self,
        tls: TLSSettings | None,
        auth: ZooKeeperAuth | None = None,
        root: str | None = None,
    ) -> ZooKeeperSettings:
        return ZooKeeperSettings(
            hosts=self.server.hosts,
            root=self.root if root is None else root,
            session_timeout=10.0,
            call_timeout=CALL_TIMEOUT,
            auth=auth,
            tls=tls,
        )

    def server_log(self) -> str:
        return self.server.log_file.read_bytes().decode(errors="replace")


@pytest.fixture
def tls(tls_server: ZooKeeperServer, pki: Pki) -> Tls:
    return Tls(tls_server, pki, f"/tls-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def clients() -> Iterator[Callable[[ZooKeeperSettings], ZooKeeperClient]]:
    made: list[ZooKeeperClient] = []

    def make(settings: ZooKeeperSettings) -> ZooKeeperClient:
        client = connect(settings)
        made.append(client)
        return client

    yield make
    for client in made:
        client.stop()
        client.close()


# ---------------------------------------------------------------- TLS (row 18)


def test_the_server_has_no_plaintext_client_port(tls: Tls) -> None:
    config = tls.server.config_file.read_text().splitlines()
    assert f"secureClientPort={tls.server.port}" in config
    assert "ssl.clientAuth=need" in config
    assert not [line for line in config if line.startswith("clientPort")]


def test_client_with_the_ca_and_a_certificate_reads_and_writes(
    tls: Tls, clients: Callable[[ZooKeeperSettings], ZooKeeperClient]
) -> None:
    client = clients(tls.settings(tls.good()))
    client.create("/plain", b"one")
    client.set("/plain", b"two")
    assert client.get("/plain")[0] == b"two"
    assert client.get_children("/") == ["plain"]
    client.delete("/plain")
    context = LockContext(client)
    stored.save(context, "/tenant/t/state", {"big": os.urandom(300_000).hex()})  # sharded
    assert len(stored.load(context, "/tenant/t/state").data["big"]) == 600_000
    queue = EventQueue(client, paths.pipeline_trigger_queue("t", "check"))
    queue.put({"type": "x"})
    assert [e.payload for e in queue.read()] == [{"type": "x"}]
    held = locks.try_exclusive(client, paths.pipeline_lock("t", "check"))
    assert held is not None
    held.release()


@dataclass(frozen=True)
class Refusal:
    tls: Callable[[Pki], TLSSettings | None]
    error: type[SluiceError]
    client_says: str  # in the SluiceError and in the client's log
    server_says: str  # in ZooKeeper's log


REFUSALS = {
    "no client certificate": Refusal(
        lambda p: TLSSettings(ca=str(p.ca)),
        AccessDeniedError,
        "the server wants a client certificate",
        "Empty client certificate chain",
    ),
    "rogue certificate (another CA)": Refusal(
        lambda p: TLSSettings(ca=str(p.ca), cert=str(p.rogue_cert), key=str(p.rogue_key)),
        AccessDeniedError,
        "the server does not trust our client certificate",
        "unable to find valid certification path",
    ),
    "client trusts the wrong CA": Refusal(
        lambda p: TLSSettings(ca=str(p.rogue_ca), cert=str(p.client_cert), key=str(p.client_key)),
        AccessDeniedError,
        "we do not trust the server's certificate",
        "Received fatal alert: unknown_ca",
    ),
    "plaintext client": Refusal(
        lambda p: None,
        CallTimeoutError,
        "a TLS-only port does this to a plaintext client",
        "NotSslRecordException: not an SSL/TLS record",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refused_within_the_deadline_with_the_reason_logged(
    case: str,
    tls: Tls,
    clients: Callable[[ZooKeeperSettings], ZooKeeperClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusal = REFUSALS[case]
    log_before = len(tls.server_log())
    started = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(refusal.error) as raised:
        connect(tls.settings(refusal.tls(tls.pki)))
    took = time.monotonic() - started
    message = str(raised.value)
    assert took < CALL_TIMEOUT + SLACK, f"{case}: refused only after {took:.1f}s"
    print(f"{case}: {type(raised.value).__name__} after {took:.2f}s: {message}")
    assert refusal.client_says in message
    assert tls.server.hosts in message
    logged = [r.getMessage() for r in caplog.records if r.name == "scheduler.zk.client"]
    assert any(refusal.client_says in line for line in logged), logged
    # kazoo's own log names each failed attempt (it retries until the deadline).
    assert any(
        r.name == "kazoo.client" and "Connection dropped" in r.getMessage() for r in caplog.records
    )
    wait_until(
        lambda: refusal.server_says in tls.server_log()[log_before:],
        timeout=5,
        what=f"ZooKeeper logging {refusal.server_says!r}",
    )
    # Nothing was written: the refused client could not even create its chroot.
    admin = clients(tls.settings(tls.good(), root="/"))
    assert admin.exists(tls.root) is None


def test_verify_false_trusts_any_server(
    tls: Tls, clients: Callable[[ZooKeeperSettings], ZooKeeperClient]
) -> None:
    """What ``verify: false`` gives up: the wrong CA no longer matters (never in production)."""
    pki = tls.pki
    lax = TLSSettings(
        ca=str(pki.rogue_ca), cert=str(pki.client_cert), key=str(pki.client_key), verify=False
    )
    client = clients(tls.settings(lax))
    client.create("/lax", b"")
    assert client.exists("/lax") is not None


# ---------------------------------------------------------------- auth (row 17)


def _walk(client: ZooKeeperClient, path: str = "/") -> list[str]:
    found = [path]
    for child in client.get_children(path):
        found += _walk(client, paths.join(path, child))
    return found


@dataclass
class Protected:
    owner: ZooKeeperClient
    nodes: list[str]


@pytest.fixture
def protected(tls: Tls, clients: Callable[[ZooKeeperSettings], ZooKeeperClient]) -> Protected:
    """Nodes of every kind, made by the authenticated client through the recipes."""
    owner = clients(tls.settings(tls.good(), auth=AUTH))
    context = LockContext(owner)
    stored.save(context, paths.pipeline_state("t", "gate"), {"secret": "s"})
    stored.save(context, paths.tenant_state("t"), {"big": os.urandom(700_000).hex()})
    queue = EventQueue(owner, paths.pipeline_trigger_queue("t", "gate"))
    queue.put({"type": "small"})
    queue.put({"type": "large", "blob": os.urandom(100_000).hex()})  # separate data node
    jobs = JobRequestQueue(owner, paths.executor_queue())
    jobs.submit(JobRequest(uuid="r1"), {"secret": "params"}, wait=True)  # + ephemeral waiter
    jobs.submit(JobRequest(uuid="r2"), {"x": 1})
    assert jobs.claim("r2", "worker-1") is not None  # ephemeral lock made in a transaction
    held = locks.try_exclusive(owner, paths.pipeline_lock("t", "gate"))
    assert held is not None  # kept: an ephemeral lock node
    waited = locks.acquire(owner, paths.tenant_lock("t"), timeout=CALL_TIMEOUT)
    assert waited is not None  # kept: a sequence lock node
    SemaphoreNode(owner, paths.semaphore("t", "db")).acquire("buildset-1", 2)
    components.register(owner, "executor", version="test")
    nodes = _walk(owner)
    names = "\n".join(nodes)
    for expected in (
        "/data/",
        "__lock__",
        "/holder",
        "/waiters/r1",
        "/locks/r2",
        "/components/executor/",
    ):
        assert expected in names, f"no {expected!r} node among:\n{names}"
    return Protected(owner, nodes)


def test_every_node_made_through_the_recipes_is_creator_only(protected: Protected) -> None:
    creator_only = [make_digest_acl(AUTH.username, AUTH.password, all=True)]
    wrong = {}
    for node in protected.nodes:
        acls, _ = protected.owner.wait(protected.owner.kazoo.get_acls_async(node))
        if list(acls) != creator_only:
            wrong[node] = acls
    assert not wrong, f"{len(wrong)} of {len(protected.nodes)} nodes not creator-only: {wrong}"


STRANGERS = {
    "no auth": None,
    "wrong password": ZooKeeperAuth(AUTH.username, "guess"),
    "wrong user": ZooKeeperAuth("intruder", AUTH.password),
}


@pytest.mark.parametrize("who", list(STRANGERS))
def test_without_or_with_wrong_credentials_every_operation_is_refused(
    who: str,
    tls: Tls,
    protected: Protected,
    clients: Callable[[ZooKeeperSettings], ZooKeeperClient],
) -> None:
    stranger = clients(tls.settings(tls.good(), auth=STRANGERS[who]))
    k = stranger.kazoo
    operations: dict[str, Callable[[str], object]] = {
        "get": stranger.get,
        "get_children": stranger.get_children,
        "get_acls": lambda n: stranger.wait(k.get_acls_async(n)),
        "set": lambda n: stranger.set(n, b"tampered"),
        "create child": lambda n: stranger.create(paths.join(n, "intruder"), b""),
        "set_acls (open it)": lambda n: stranger.wait(k.set_acls_async(n, OPEN_ACL_UNSAFE)),
        "delete": stranger.delete,
    }
    allowed: list[str] = []
    other: list[str] = []
    tried = 0
    for node in protected.nodes:
        for name, operation in operations.items():
            if name == "delete" and node == "/":
                continue  # the chroot node: its parent is ZooKeeper's own (open) root
            tried += 1
            try:
                operation(node)
            except AccessDeniedError:
                continue
            except Exception as exc:
                other.append(f"{name} {node}: {exc!r}")
            else:
                allowed.append(f"{name} {node}")
    assert allowed == [], f"{who}: {len(allowed)} of {tried} operations allowed"
    assert other == [], f"{who}: refused for another reason than NoAuth"
    assert tried >= 7 * len(protected.nodes) - 1 > 100
    print(f"{who}: 0 of {tried} operations allowed on {len(protected.nodes)} nodes")
    # And the owner still finds everything as it was.
    assert _walk(protected.owner) == protected.nodes


def test_server_config_keys_documented() -> None:
    """docs/zookeeper.md names the zoo.cfg lines the TLS server here runs with."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "zookeeper.md").read_text()
    for key in ("secureClientPort", "NettyServerCnxnFactory", "ssl.clientAuth", "keytool"):
        assert key in doc
