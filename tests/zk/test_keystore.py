"""Project keys in ZooKeeper: one per project, made once, stored encrypted, opened by password."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives import serialization

from scheduler import crypto
from scheduler.crypto import KeystoreError
from scheduler.stores.keystore import KeyStore
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient

PASSWORD = "a keystore password"


def test_two_processes_racing_on_first_use_end_with_one_key(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    stores = [KeyStore(make_client(), PASSWORD) for _ in range(2)]
    start = threading.Barrier(len(stores))
    found: dict[int, bytes] = {}

    def first_use(index: int) -> None:
        start.wait(timeout=10)
        # each finds no key, makes a 4096-bit one (~0.5 s): both get to create()
        found[index] = stores[index].public_pem("local", "org/app")

    threads = [threading.Thread(target=first_use, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(found) == 2 and found[0] == found[1]
    # and that is the key stored, for anyone who comes later
    assert KeyStore(make_client(), PASSWORD).public_pem("local", "org/app") == found[0]
    assert found[0].startswith(b"-----BEGIN PUBLIC KEY-----")


def test_the_node_holds_only_the_encrypted_private_key(zk: ZooKeeperClient) -> None:
    store = KeyStore(zk, PASSWORD, bits=2048)
    key = store.private_key("local", "org/app")
    # a slash in the project name is one encoded segment, not a level
    path = "/keystorage/local/org%2Fapp/secrets"
    assert paths.keystorage("local", "org/app") == path
    raw, _ = zk.get(path)
    assert PASSWORD.encode() not in raw
    document = json.loads(raw)
    assert document["schema"] == 1
    (entry,) = document["keys"]
    assert entry["version"] == 0 and entry["created"] > 0
    pem = entry["private_key"].encode()
    assert b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in pem
    assert b"-----BEGIN PRIVATE KEY-----" not in raw and b"RSA PRIVATE KEY" not in raw
    with pytest.raises(TypeError):  # nothing opens it without the password
        serialization.load_pem_private_key(pem, None)
    opened = crypto.load_private_pem(pem, PASSWORD)
    assert crypto.public_pem(opened) == crypto.public_pem(key)


def test_keys_are_per_project_and_connection_and_cached(zk: ZooKeeperClient) -> None:
    store = KeyStore(zk, PASSWORD, bits=2048)
    app = store.private_key("local", "app")
    assert store.private_key("local", "app") is app  # cached: not read again
    others = {store.public_pem("local", "lib"), store.public_pem("github", "app")}
    assert crypto.public_pem(app) not in others and len(others) == 2
    secret = b"only app can read this" * 30
    chunks = crypto.encrypt_pkcs1_oaep(store.public_pem("local", "app"), secret)
    fresh = KeyStore(zk, PASSWORD)  # another process: reads the stored key
    assert crypto.decrypt_pkcs1_oaep(fresh.private_key("local", "app"), chunks) == secret


def test_a_wrong_password_is_a_clear_error_and_writes_nothing(zk: ZooKeeperClient) -> None:
    KeyStore(zk, PASSWORD, bits=2048).private_key("local", "app")
    path = paths.keystorage("local", "app")
    before, stat = zk.get(path)
    with pytest.raises(KeystoreError, match="keystore password is wrong"):
        KeyStore(zk, "not the password").private_key("local", "app")
    after, again = zk.get(path)
    assert (after, again.version) == (before, stat.version)
    with pytest.raises(KeystoreError, match=r"no keystore password: set keystore\.password"):
        KeyStore(zk, "")
