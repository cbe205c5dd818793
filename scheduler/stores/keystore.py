"""Project key pairs in ZooKeeper, their private keys encrypted (Zuul's keystorage).

A project has two key pairs, as in Zuul: ``secrets`` (4096 bits; its
secrets are encrypted to it) and ``ssh`` (2048 bits; its public half is
served in OpenSSH's format, ``/api/tenant/<t>/project-ssh-key/<p>.pub``).
``/keystorage/<connection>/<project>/<kind>`` holds a stored object
``{"schema": 1, "keys": [{"version": 0, "created": <seconds>,
"private_key": "<PEM>"}]}``, Zuul's shape (a list, so a key can be
rotated later). The PEM is PKCS#8 encrypted with the keystore password
(``keystore.password`` in ``sluice.yaml``), which never reaches
ZooKeeper: the node, ZooKeeper's snapshots and its transaction log hold
no usable private key, and the public key is derived from the private one.

Guarantees:

* **One key per project and kind.** A key pair is made on first use and created
  with a plain ``create``: two processes that race on first use both
  generate one, ZooKeeper takes exactly one create, and the loser reads
  and uses the winner's key. A stored key is never replaced.
* **Cached per instance.** A key never changes once stored, so a
  :class:`KeyStore` keeps every key it opened (opening one derives the
  password key, a third of a second) for its whole life.
* **Wrong password.** A key that does not open with this store's password
  raises :class:`~scheduler.crypto.KeystoreError`; nothing is written.

On SUSPENDED or LOST a call raises
:class:`~scheduler.zk.errors.ZooKeeperUnavailableError` (or
:class:`~scheduler.zk.errors.CallTimeoutError`) within the call deadline.
Whether a create that raised so was applied is unknown; the next call
reads the node and uses whatever is there, so a retry never makes a
second key.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from kazoo.exceptions import NodeExistsError, NoNodeError

from scheduler import crypto
from scheduler.crypto import KeystoreError
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import DecodeError

SECRETS = "secrets"
SSH = "ssh"
# Zuul's project SSH keys are 2048-bit RSA keys
SSH_BITS = 2048


class KeyStore:
    """Every project's key pair, read from (or first created in) ZooKeeper."""

    def __init__(self, client: ZooKeeperClient, password: str, *, bits: int = 4096) -> None:
        if not password:
            raise KeystoreError(
                "no keystore password: set keystore.password or keystore.password_file "
                "in sluice.yaml"
            )
        self.client = client
        self._password = password
        self._bits = bits
        self._keys: dict[tuple[str, str, str], RSAPrivateKey] = {}
        # One load-or-create at a time: two threads never both make a 4096-bit key.
        self._lock = threading.Lock()

    def private_key(self, connection: str, project: str, kind: str = SECRETS) -> RSAPrivateKey:
        """The project's private key of ``kind`` (made and stored on first use)."""
        with self._lock:
            key = self._keys.get((connection, project, kind))
            if key is None:
                key = self._load_or_create(connection, project, kind)
                self._keys[connection, project, kind] = key
            return key

    def public_pem(self, connection: str, project: str) -> bytes:
        """The project's public key as PEM (what ``/api/tenant/<t>/key/<project>.pub`` serves)."""
        return crypto.public_pem(self.private_key(connection, project))

    def public_ssh(self, connection: str, project: str) -> bytes:
        """The project's public SSH key, ``ssh-rsa AAAA...`` (``project-ssh-key/<p>.pub``)."""
        return crypto.public_ssh(self.private_key(connection, project, SSH))

    def _load_or_create(self, connection: str, project: str, kind: str) -> RSAPrivateKey:
        path = paths.keystorage(connection, project, kind)
        found = self._read(path)
        if found is not None:
            return found
        key = crypto.generate_private_key(self._bits if kind == SECRETS else SSH_BITS)
        document = {
            "keys": [
                {
                    "version": 0,
                    "created": time.time(),
                    "private_key": crypto.private_pem(key, self._password).decode(),
                }
            ]
        }
        try:
            self.client.create(path, stored.encode(document), makepath=True)
        except NodeExistsError:  # another process made the project's key first: use it
            winner = self._read(path)
            if winner is None:  # a key is never deleted while in use
                raise KeystoreError(f"{path}: the key vanished while it was made") from None
            return winner
        return key

    def _read(self, path: str) -> RSAPrivateKey | None:
        try:
            raw, _ = self.client.get(path)
        except NoNodeError:
            return None
        return crypto.load_private_pem(_newest_pem(stored.decode(raw, path), path), self._password)


def _newest_pem(document: dict[str, Any], path: str) -> bytes:
    keys = document.get("keys")
    if not isinstance(keys, list) or not keys:
        raise DecodeError(f"{path}: a keystore node without keys")
    try:
        newest = max(keys, key=lambda entry: int(entry.get("version", 0)))
        pem = newest["private_key"]
    except (AttributeError, KeyError, TypeError, ValueError):
        raise DecodeError(f"{path}: a keystore entry without a private key") from None
    if not isinstance(pem, str):
        raise DecodeError(f"{path}: a keystore entry without a private key")
    return pem.encode()
