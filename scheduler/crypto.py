"""Project key pairs and Zuul's secret encryption (PKCS#1 OAEP), pure and without I/O.

Every project has an RSA key pair (Zuul's scheme, ``docs/secrets.md``):
anyone encrypts a secret with the project's public key, only Sluice
decrypts it. The format is Zuul's, so what ``zuul-client encrypt`` writes
decrypts here and what :func:`encrypt_pkcs1_oaep` writes decrypts in Zuul:

* RSA OAEP with SHA-1 as the hash and in MGF1 (what ``openssl rsautl``
  always did, and ``zuul-client`` asks ``openssl pkeyutl`` for);
* the plaintext split in chunks of ``key_bytes - 2 * 20 - 2`` bytes (the
  most one OAEP block of a SHA-1 key holds: 470 for 4096 bits), each chunk
  encrypted on its own and base64 encoded: a secret is a list of chunks.

Private keys leave this module only as PKCS#8 PEM encrypted with a
password (:func:`private_pem`); :mod:`scheduler.stores.keystore` stores that
form in ZooKeeper, so ZooKeeper never holds a usable private key.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from scheduler.errors import SluiceError

#: The YAML tag of an encrypted secret (Zuul's), and the one key of its plain
#: JSON form: ``{ENCRYPTED: [base64 ciphertext chunks]}``.
ENCRYPTED = "!encrypted/pkcs1-oaep"
DEFAULT_BITS = 4096
PUBLIC_EXPONENT = 65537
# OAEP overhead of a SHA-1 hash: two digests and two bytes.
_SHA1_BYTES = 20
OAEP_OVERHEAD = 2 * _SHA1_BYTES + 2
_WHITESPACE = re.compile(rb"\s+")


class KeystoreError(SluiceError):
    """A project key that cannot be used: the keystore password is wrong, or the key is damaged."""


class SecretDecryptError(SluiceError, ValueError):
    """An encrypted secret that this key cannot decrypt (not base64, damaged, another key's)."""


def _oaep() -> padding.OAEP:
    return padding.OAEP(
        mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None
    )


def generate_private_key(bits: int = DEFAULT_BITS) -> RSAPrivateKey:
    """A new RSA key (Zuul's projects have 4096-bit keys)."""
    return rsa.generate_private_key(public_exponent=PUBLIC_EXPONENT, key_size=bits)


def public_pem(key: RSAPrivateKey) -> bytes:
    """The public half as SubjectPublicKeyInfo PEM (``BEGIN PUBLIC KEY``), as Zuul serves it."""
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def public_ssh(key: RSAPrivateKey) -> bytes:
    """The public half in OpenSSH's format (``ssh-rsa AAAA...``), as Zuul serves a project's
    SSH key."""
    return key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )


def private_pem(key: RSAPrivateKey, password: str) -> bytes:
    """The key as PKCS#8 PEM encrypted with ``password`` (``ENCRYPTED PRIVATE KEY``)."""
    if not password:
        raise KeystoreError("a private key is only ever written encrypted: the password is empty")
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password.encode()),
    )


def load_private_pem(pem: bytes, password: str) -> RSAPrivateKey:
    """The key of an encrypted PEM; :class:`KeystoreError` when it does not open."""
    try:
        key = serialization.load_pem_private_key(pem, password.encode() or None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        # cryptography says ValueError for a bad password or damaged data and
        # TypeError for a missing one; neither is worth more detail here.
        raise KeystoreError(
            "the stored private key does not open: the keystore password is wrong "
            "(keystore.password or keystore.password_file in sluice.yaml) or the key is damaged"
        ) from None
    if not isinstance(key, RSAPrivateKey):
        raise KeystoreError(f"the stored private key is not an RSA key ({type(key).__name__})")
    return key


def max_chunk_bytes(key_bits: int) -> int:
    """How many plaintext bytes one OAEP block of a ``key_bits`` key holds."""
    return (key_bits + 7) // 8 - OAEP_OVERHEAD


def encrypt_pkcs1_oaep(public_key_pem: bytes, plaintext: bytes) -> list[str]:
    """``plaintext`` encrypted for the key of ``public_key_pem``: base64 chunks (Zuul's format).

    An empty plaintext gives no chunks, as ``zuul-client encrypt`` does.
    """
    try:
        public_key = serialization.load_pem_public_key(public_key_pem)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeystoreError(f"not a PEM public key: {exc}") from None
    if not isinstance(public_key, rsa.RSAPublicKey):
        raise KeystoreError(f"not an RSA public key ({type(public_key).__name__})")
    size = max_chunk_bytes(public_key.key_size)
    return [
        base64.b64encode(public_key.encrypt(plaintext[start : start + size], _oaep())).decode()
        for start in range(0, len(plaintext), size)
    ]


def decrypt_pkcs1_oaep(key: RSAPrivateKey, chunks: Sequence[str]) -> bytes:
    """The plaintext of a secret's chunks (whitespace inside a chunk is ignored).

    A YAML plain scalar wrapped over several lines, as ``zuul-client``
    writes them, reads back with spaces where the lines were broken.
    """
    plaintext = []
    for number, chunk in enumerate(chunks, start=1):
        where = f"chunk {number} of {len(chunks)}"
        if not isinstance(chunk, str):
            raise SecretDecryptError(f"{where}: expected base64 text, got {type(chunk).__name__}")
        try:
            raw = base64.b64decode(_WHITESPACE.sub(b"", chunk.encode()), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise SecretDecryptError(f"{where}: not valid base64") from None
        try:
            plaintext.append(key.decrypt(raw, _oaep()))
        except ValueError:
            raise SecretDecryptError(
                f"{where}: does not decrypt with this project's key "
                "(encrypted for another project, or damaged)"
            ) from None
    return b"".join(plaintext)
