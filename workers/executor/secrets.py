"""Secrets on the executor: decrypted just before a build, given per step, kept out of logs.

The frozen job carries each secret still encrypted (``{ENCRYPTED: [chunks]}``
leaves, RSA-OAEP with its project's key). :func:`decrypt_secrets` turns them
into plain data with the project's private key, which only a worker holding
the keystore password can load (:class:`scheduler.stores.keystore.KeyStore`).
Nothing decrypted is written to ZooKeeper, the broker or the result.

A step that sees secrets (those bound to its playbook when the job was
frozen) gets ``SLUICE_SECRETS_FILE``: a JSON object ``{name: data}`` in the
build's private ``secrets/`` folder (mode 0600), removed when the step ends.
Every decrypted value (and each line of a multi-line one) is replaced by
``******`` in the job's output (:class:`Redactor`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from scheduler.crypto import ENCRYPTED, KeystoreError, SecretDecryptError, decrypt_pkcs1_oaep
from scheduler.wire.build_spec import BuildSpec
from workers.executor.job import Step

MASK = "******"
# Shorter decrypted values are not masked: masking "1" or "ab" would garble the log.
MIN_MASKED = 4

PrivateKeys = Callable[[str, str], RSAPrivateKey]


class SecretError(Exception):
    """A secret of the build cannot be decrypted (the build is refused with this message)."""


def decrypt_secrets(spec: BuildSpec, private_key: PrivateKeys) -> dict[str, Any]:
    """Each secret's key -> its data with every encrypted leaf decrypted (UTF-8 text)."""
    plain: dict[str, Any] = {}
    for key, secret in spec.job.secrets.items():
        name = secret.get("name", key)
        try:
            rsa = private_key(str(secret["connection"]), str(secret["project"]))
            plain[key] = _decrypt(secret.get("data", {}), rsa)
        except SecretError as exc:
            raise SecretError(f"secret {name!r}: {exc}") from None
        except (KeystoreError, SecretDecryptError, ValueError, KeyError, TypeError) as exc:
            # a wrong password, a damaged key or ciphertext: refuse the build
            raise SecretError(f"secret {name!r} cannot be decrypted: {exc}") from None
    return plain


def _decrypt(value: Any, key: RSAPrivateKey) -> Any:
    if isinstance(value, Mapping):
        if set(value) == {ENCRYPTED}:
            try:
                return decrypt_pkcs1_oaep(key, value[ENCRYPTED]).decode("utf-8")
            except UnicodeDecodeError:
                raise SecretError("a decrypted value is not UTF-8 text") from None
        return {k: _decrypt(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_decrypt(v, key) for v in value]
    return value


def decrypted_strings(spec: BuildSpec, plain: Mapping[str, Any]) -> list[str]:
    """The values that were encrypted, as decrypted: what the log must never show."""
    found: list[str] = []
    for key, secret in spec.job.secrets.items():
        found.extend(_encrypted_leaves(secret.get("data", {}), plain.get(key)))
    return found


def _encrypted_leaves(encrypted: Any, plain: Any) -> Iterable[str]:
    if isinstance(encrypted, Mapping):
        if set(encrypted) == {ENCRYPTED}:
            if isinstance(plain, str):
                yield plain
            return
        if isinstance(plain, Mapping):
            for k, v in encrypted.items():
                yield from _encrypted_leaves(v, plain.get(k))
    elif isinstance(encrypted, list) and isinstance(plain, list):
        for e, p in zip(encrypted, plain, strict=False):
            yield from _encrypted_leaves(e, p)


class Redactor:
    """Replaces secret values in text with :data:`MASK`, longest first."""

    def __init__(self, values: Iterable[str]) -> None:
        pieces: set[str] = set()
        for value in values:
            pieces.add(value.strip())
            pieces.update(line.strip() for line in value.splitlines())
        self.pieces = sorted((p for p in pieces if len(p) >= MIN_MASKED), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for piece in self.pieces:
            if piece in text:
                text = text.replace(piece, MASK)
        return text


def step_secrets(step: Step, plain: Mapping[str, Any]) -> dict[str, Any]:
    """What one step sees: ``{name: data}`` for the secrets bound to it."""
    return {alias: plain[key] for alias, key in step.secrets if key in plain}


def write_step_secrets(folder: Path, label: str, seen: Mapping[str, Any]) -> Path:
    """The step's secrets file, readable by its owner only; remove it after the step."""
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{label}.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(seen, handle)
    return path
