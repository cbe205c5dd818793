"""A ``rediss://`` broker: TLS with a client certificate and a password, end to end.

A real Redis that speaks TLS only and wants a client certificate of the
deployment's CA; ``broker.tls`` (``ca``, ``cert``, ``key``) in sluice.yaml
gives Celery's ``broker_use_ssl`` and ``redis_backend_use_ssl`` to a real
worker and to ``sluice roundtrip``. A client that trusts another CA is
refused, and the CLI says TLS failed and where (docs/reliability.md, 20e).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli.stack import process
from cli.stack.redis import ping
from scheduler.errors import StackError
from scheduler.settings.exposure import broker_ssl_options
from scheduler.settings.sections import TLSSettings
from tests.fixtures.cli import clean_env, run_sluice
from tests.fixtures.services import ZooKeeperTarget, missing_service
from tests.fixtures.workers import ServiceEnvironment, WorkerFactory
from tests.zk.tls_fixture import Pki, PkiError, make_pki

PASSWORD = "tls-broker-password"


@dataclass(frozen=True)
class TlsRedis:
    port: int
    pki: Pki

    @property
    def url(self) -> str:
        return f"rediss://:{PASSWORD}@127.0.0.1:{self.port}/0"

    def config(self, directory: Path, zookeeper: ZooKeeperTarget, ca: Path) -> Path:
        """A sluice.yaml for this broker whose client trusts ``ca``."""
        config = directory / "sluice.yaml"
        config.write_text(
            f"zookeeper:\n  hosts: {zookeeper.hosts}\n  root: {zookeeper.root}\n"
            f"broker_url: rediss://127.0.0.1:{self.port}/0\nstate_dir: state\n"
            f"broker:\n  password: {PASSWORD}\n  tls:\n    ca: {ca}\n"
            f"    cert: {self.pki.client_cert}\n    key: {self.pki.client_key}\n"
        )
        return config


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    if shutil.which("redis-server") is None:
        missing_service("redis-server")
    try:
        pki = make_pki(tmp_path_factory.mktemp("pki"))
    except PkiError as exc:
        missing_service(f"a test PKI ({exc})")
        raise  # unreachable: missing_service fails or skips
    server = TlsRedis(process.free_port(), pki)
    data = tmp_path_factory.mktemp("redis-tls")
    argv = ["redis-server", "--port", "0", "--tls-port", str(server.port)]
    argv += ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(data)]
    argv += ["--tls-cert-file", str(pki.ca.parent / "server.pem")]
    argv += ["--tls-key-file", str(pki.ca.parent / "server.key")]
    argv += ["--tls-ca-cert-file", str(pki.ca), "--tls-auth-clients", "yes"]
    argv += ["--requirepass", PASSWORD]  # a test server: its argv is nobody's secret
    log = data / "redis.log"
    proc = process.spawn(argv, log)
    client_tls = TLSSettings(ca=str(pki.ca), cert=str(pki.client_cert), key=str(pki.client_key))
    options = broker_ssl_options(server.url, client_tls)
    try:
        process.wait_for(
            lambda: ping(server.url, options),
            30,
            "Redis with TLS",
            log_file=log,
            alive=lambda: process.is_alive(proc.pid),
        )
    except StackError as exc:
        process.stop_group(proc.pid)
        missing_service(f"Redis with TLS ({exc})")
    yield server
    process.stop_group(proc.pid)


def _roundtrip(config: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``sluice roundtrip`` with the broker of ``config`` (its URL, password and TLS)."""
    env = {k: v for k, v in env.items() if k != "SLUICE_BROKER_URL"}
    return run_sluice("--config", str(config), "roundtrip", env=env, cwd=config.parent)


def test_a_worker_and_the_cli_over_tls(
    zookeeper: ZooKeeperTarget, tls_redis: TlsRedis, state_dir: Path
) -> None:
    config = tls_redis.config(state_dir.parent, zookeeper, tls_redis.pki.ca)
    environment = ServiceEnvironment(
        zookeeper, tls_redis.url, state_dir, extra={"SLUICE_CONFIG": str(config)}
    )
    factory = WorkerFactory(environment)
    try:
        # the worker too takes the file's rediss:// URL, password and TLS
        worker = factory.start(["maintenance"], wait=False, extra_env={"SLUICE_BROKER_URL": ""})
        done = _roundtrip(config, environment.env())
    finally:
        factory.stop_all()
    assert done.returncode == 0, done.stdout + done.stderr + worker.log_text()[-2000:]
    assert "round trip OK" in done.stdout
    assert f"via rediss://:**@127.0.0.1:{tls_redis.port}/0" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr + worker.log_text()


def test_a_client_that_trusts_another_ca_is_refused(
    zookeeper: ZooKeeperTarget, tls_redis: TlsRedis, tmp_path: Path
) -> None:
    config = tls_redis.config(tmp_path, zookeeper, tls_redis.pki.rogue_ca)
    started = time.monotonic()
    done = _roundtrip(config, clean_env())
    print(f"sluice roundtrip refused in {time.monotonic() - started:.2f}s")
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    print(error)
    assert error.startswith(
        f"Error: broker rediss://:**@127.0.0.1:{tls_redis.port}/0: TLS failed ("
    ), error
    assert "certificate verify failed" in error
