"""Project keys through the faces: the ``.pub`` endpoint, the real ``zuul-client encrypt``, and
``sluice encrypt``; what either writes decrypts with the key stored in ZooKeeper."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler import crypto
from scheduler.reconfiguration import reconfigure_tenant
from scheduler.settings.load import load_settings
from scheduler.stores.keystore import KeyStore
from scheduler.zk.client import ZooKeeperClient, connect
from tests.e2e.system import SluiceSystem
from tests.fixtures.secret_yaml import secret_chunks
from tests.web.server import KEYSTORE_PASSWORD, WebServer, start_web

BIN = Path(sys.executable).parent
# a project whose name has a slash: zuul-client puts it in the URL as is
TENANT_YAML = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
        untrusted-projects: [org/app]
"""
PLAINTEXT = "a password that is longer than one chunk of a 4096-bit key " * 12


@pytest.fixture
def client(system: SluiceSystem) -> Iterator[ZooKeeperClient]:
    """The test's ZooKeeper, with the tenant ``demo`` reconfigured (no mergers needed)."""
    system.tenant(TENANT_YAML)
    settings = load_settings(system.config, environ=system.env())
    zk = connect(settings.zookeeper)
    try:
        reconfigure_tenant(zk, settings, "demo", lambda connection, project: {"main": {}})
        yield zk
    finally:
        zk.stop()
        zk.close()


def zuul_client(web: WebServer, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "zuul-client"), "--zuul-url", web.url, *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_zuul_client_encrypts_with_the_key_that_zookeeper_keeps(
    web: WebServer, client: ZooKeeperClient
) -> None:
    args = ("--tenant", "demo", "--project", "org/app", "--secret-name", "db")
    done = zuul_client(web, "encrypt", *args, "--field-name", "password", stdin=PLAINTEXT)
    assert done.returncode == 0, done.stderr
    name, field, chunks = secret_chunks(done.stdout)
    assert (name, field, len(chunks)) == ("db", "password", 2)
    key = KeyStore(client, KEYSTORE_PASSWORD).private_key("local", "org/app")
    assert crypto.decrypt_pkcs1_oaep(key, chunks) == PLAINTEXT.strip().encode()

    answer = web.request("GET", "/api/tenant/demo/key/org/app.pub")
    assert answer.status == 200 and answer.headers["content-type"].startswith("text/plain")
    assert answer.body.encode() == crypto.public_pem(key)
    # one key per project: the config project's is another
    other = web.request("GET", "/api/tenant/demo/key/config.pub").body
    assert other.startswith("-----BEGIN PUBLIC KEY-----") and other != answer.body


def test_an_unknown_project_or_tenant_is_a_404_naming_it(
    web: WebServer, client: ZooKeeperClient
) -> None:
    answer = web.request("GET", "/api/tenant/demo/key/org/nope.pub")
    assert answer.status == 404 and answer.body["field"] == "project"
    assert answer.body["description"] == "tenant 'demo' has no project 'org/nope'"
    answer = web.request("GET", "/api/tenant/nope/key/org/app.pub")
    assert answer.status == 404 and answer.body["field"] == "tenant"
    done = zuul_client(web, "encrypt", "--tenant", "demo", "--project", "nope", stdin="x")
    assert done.returncode != 0 and "has no project 'nope'" in done.stderr
    assert web.request("GET", "/api/tenant/demo/key/..%2Fetc.pub").status in (400, 404)
    document = web.get("/api/openapi.json")
    assert "get" in document["paths"]["/api/tenant/{tenant}/key/{project}.pub"]


def test_a_web_without_a_keystore_password_says_so(
    system: SluiceSystem, client: ZooKeeperClient
) -> None:
    with start_web(system, "") as web:
        answer = web.request("GET", "/api/tenant/demo/key/org/app.pub")
        assert answer.status == 503
        assert "keystore.password or keystore.password_file" in answer.body["description"]
        assert web.request("GET", "/api/tenant/demo/key/org/nope.pub").status == 404


def sluice(system: SluiceSystem, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The ``sluice`` console script with the system's settings and ``stdin``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(system.env())
    return subprocess.run(
        [str(BIN / "sluice"), *args], input=stdin, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def test_sluice_encrypt_prints_zuul_clients_stanza(
    system: SluiceSystem, client: ZooKeeperClient, tmp_path: Path
) -> None:
    args = ("encrypt", "--tenant", "demo", "--project", "org/app")
    done = sluice(system, *args, stdin="x")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (
        "Error: no keystore password: set keystore.password or keystore.password_file "
        "in sluice.yaml"
    )
    with system.config.open("a") as config:
        config.write(f"keystore:\n  password: {KEYSTORE_PASSWORD}\n")

    done = sluice(system, *args, "--secret-name", "db", "--field-name", "pw", stdin=PLAINTEXT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("\n- secret:\n    name: db\n    data:\n      pw: !encrypted/")
    name, field, chunks = secret_chunks(done.stdout)
    assert (name, field, len(chunks)) == ("db", "pw", 2)
    key = KeyStore(client, KEYSTORE_PASSWORD).private_key("local", "org/app")
    assert crypto.decrypt_pkcs1_oaep(key, chunks) == PLAINTEXT.strip().encode()

    # a file is encrypted as is (its whitespace kept), to --outfile
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"  line one\nline two\n")
    out = tmp_path / "secret.yaml"
    done = sluice(system, *args, "--infile", str(secret), "--outfile", str(out))
    assert done.returncode == 0 and done.stdout == "", done.stderr
    name, field, chunks = secret_chunks(out.read_text())
    assert (name, field) == ("<name>", "<fieldname>")
    assert crypto.decrypt_pkcs1_oaep(key, chunks) == secret.read_bytes()

    done = sluice(system, "encrypt", "--tenant", "demo", "--project", "nope", stdin="x")
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: tenant 'demo' has no project 'nope'"
    done = sluice(system, "encrypt", "--tenant", "nope", "--project", "org/app", stdin="x")
    assert done.returncode == 1 and "no tenant 'nope'" in done.stderr
