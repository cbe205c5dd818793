"""Project keys and Zuul's PKCS#1 OAEP secrets (scheduler/crypto.py), against zuul-client."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from cli.commands.encrypt import secret_yaml
from scheduler import crypto
from scheduler.crypto import KeystoreError, SecretDecryptError
from tests.fixtures.secret_yaml import secret_chunks

ZUUL_CLIENT = str(Path(sys.executable).parent / "zuul-client")


@pytest.fixture(scope="module")
def key() -> RSAPrivateKey:
    return crypto.generate_private_key()


@pytest.fixture(scope="module")
def public_key_file(key: RSAPrivateKey, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "project.pub"
    path.write_bytes(crypto.public_pem(key))
    return path


def test_a_long_secret_round_trips_in_several_chunks(key: RSAPrivateKey) -> None:
    assert crypto.max_chunk_bytes(4096) == 470
    plaintext = bytes(range(256)) * 4  # 1024 bytes: three chunks
    chunks = crypto.encrypt_pkcs1_oaep(crypto.public_pem(key), plaintext)
    assert len(chunks) == 3
    assert crypto.decrypt_pkcs1_oaep(key, chunks) == plaintext
    # whitespace in a chunk (a wrapped YAML scalar) does not matter
    spaced = [" ".join(re.findall(".{1,60}", c)) for c in chunks]
    assert crypto.decrypt_pkcs1_oaep(key, spaced) == plaintext
    assert crypto.encrypt_pkcs1_oaep(crypto.public_pem(key), b"") == []


def test_the_private_key_is_written_encrypted_and_opens_only_with_its_password(
    key: RSAPrivateKey,
) -> None:
    pem = crypto.private_pem(key, "correct horse")
    assert pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    with pytest.raises(TypeError):  # no usable key without the password
        serialization.load_pem_private_key(pem, None)
    opened = crypto.load_private_pem(pem, "correct horse")
    assert crypto.public_pem(opened) == crypto.public_pem(key)
    for wrong in ("battery staple", ""):
        with pytest.raises(KeystoreError, match="keystore password is wrong"):
            crypto.load_private_pem(pem, wrong)
    with pytest.raises(KeystoreError, match="damaged"):
        crypto.load_private_pem(pem[:200] + pem[260:], "correct horse")
    with pytest.raises(KeystoreError):
        crypto.private_pem(key, "")


def test_public_pem_is_subject_public_key_info(key: RSAPrivateKey) -> None:
    pem = crypto.public_pem(key)
    assert pem.startswith(b"-----BEGIN PUBLIC KEY-----\n")
    loaded = serialization.load_pem_public_key(pem)
    assert loaded.public_numbers() == key.public_key().public_numbers()  # type: ignore[union-attr]


def test_what_does_not_decrypt_is_a_clear_error(key: RSAPrivateKey) -> None:
    other = crypto.generate_private_key(2048)
    chunks = crypto.encrypt_pkcs1_oaep(crypto.public_pem(other), b"for someone else")
    with pytest.raises(SecretDecryptError, match="chunk 1 of 1: does not decrypt"):
        crypto.decrypt_pkcs1_oaep(key, chunks)
    with pytest.raises(SecretDecryptError, match="chunk 2 of 2: not valid base64"):
        good = crypto.encrypt_pkcs1_oaep(crypto.public_pem(key), b"x")
        crypto.decrypt_pkcs1_oaep(key, [*good, "not*base64!"])
    with pytest.raises(ValueError, match="chunk 1 of 1: does not decrypt"):
        crypto.decrypt_pkcs1_oaep(key, ["QUJD"])  # base64, but no ciphertext


def zuul_client_encrypt(public_key: Path, plaintext: str, *args: str) -> str:
    done = subprocess.run(
        # --zuul-url is required even when the key is given as a file
        [ZUUL_CLIENT, "--zuul-url", "http://127.0.0.1:9", "encrypt", "--public-key",
         str(public_key), *args],
        input=plaintext, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_zuul_client_output_decrypts_here(key: RSAPrivateKey, public_key_file: Path) -> None:
    plaintext = "s3cret " * 150  # 1050 characters: three chunks
    output = zuul_client_encrypt(public_key_file, plaintext, "--secret-name", "db",
                                 "--field-name", "password")  # fmt: skip
    name, field, chunks = secret_chunks(output)
    assert (name, field, len(chunks)) == ("db", "password", 3)
    # zuul-client strips standard input
    assert crypto.decrypt_pkcs1_oaep(key, chunks) == plaintext.strip().encode()


def _shape(text: str) -> str:
    """The text with every base64 run masked: what two encryptions of one plaintext share."""
    return re.sub(r"[A-Za-z0-9+/=]{16,}", lambda m: "#" * len(m.group()), text)


@pytest.mark.parametrize(
    ("size", "args"), [(7, ()), (1000, ("--secret-name", "token", "--field-name", "value"))]
)
def test_our_stanza_is_zuul_clients(
    key: RSAPrivateKey, public_key_file: Path, size: int, args: tuple[str, ...]
) -> None:
    plaintext = "p" * size
    theirs = zuul_client_encrypt(public_key_file, plaintext, *args)
    options = dict(zip(args[0::2], args[1::2], strict=True))
    chunks = crypto.encrypt_pkcs1_oaep(crypto.public_pem(key), plaintext.encode())
    ours = secret_yaml(options.get("--secret-name"), options.get("--field-name"), chunks)
    assert _shape(ours + "\n") == _shape(theirs)  # zuul-client print()s: one more newline
    assert max(len(line) for line in ours.splitlines()) == 79
    assert crypto.decrypt_pkcs1_oaep(key, secret_chunks(ours)[2]) == plaintext.encode()


def test_openssl_decrypts_what_we_encrypt(key: RSAPrivateKey, tmp_path: Path) -> None:
    # what Zuul does on its side (OAEP, SHA-1) done by another implementation
    private = tmp_path / "project.pem"
    private.write_bytes(crypto.private_pem(key, "pw"))
    plaintext = b"\x00binary\xff" * 80  # 720 bytes: two chunks
    found = b""
    for chunk in crypto.encrypt_pkcs1_oaep(crypto.public_pem(key), plaintext):
        done = subprocess.run(
            ["openssl", "pkeyutl", "-decrypt", "-inkey", str(private), "-passin", "pass:pw",
             "-pkeyopt", "rsa_padding_mode:oaep", "-pkeyopt", "rsa_oaep_md:sha1"],
            input=base64.b64decode(chunk), capture_output=True, timeout=60, check=True,
        )  # fmt: skip
        found += done.stdout
    assert found == plaintext
