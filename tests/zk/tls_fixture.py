"""A throwaway PKI for TLS tests, made with the ``openssl`` and ``keytool`` CLIs.

Two CAs: the deployment's CA, which signs the server certificate and the
client certificate Sluice presents, and a rogue CA, which signs a rogue
client certificate. The server gets a PKCS12 key store made by ``openssl``
and a PKCS12 trust store made by ``keytool``: Java loads an
``openssl pkcs12 -nokeys`` file as an EMPTY trust store (the certificate
bags lack Java's trust attribute), and ZooKeeper then logs "the trustAnchors
parameter must be non-empty" and refuses every client.

EC P-256 keys keep generation well under a second.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cli.stack.zookeeper import ServerTLS

PASSWORD = "sluice-test-store"
DAYS = "2"


class PkiError(RuntimeError):
    """A certificate tool is missing or failed."""


@dataclass(frozen=True)
class Pki:
    """Paths of every file the TLS tests use."""

    ca: Path  # the deployment's CA certificate (PEM)
    server_keystore: Path  # PKCS12: server key and chain
    truststore: Path  # PKCS12: the deployment's CA only
    client_cert: Path  # signed by the deployment's CA
    client_key: Path
    rogue_ca: Path  # another CA
    rogue_cert: Path  # a client certificate signed by the rogue CA
    rogue_key: Path
    password: str = PASSWORD

    def server_tls(self, client_auth: str = "need") -> ServerTLS:
        """The server side; the readiness probe presents the good client certificate."""
        return ServerTLS(
            keystore=self.server_keystore,
            truststore=self.truststore,
            password=self.password,
            probe_ca=self.ca,
            probe_cert=self.client_cert,
            probe_key=self.client_key,
            client_auth=client_auth,
        )


def missing_tools() -> list[str]:
    return [tool for tool in ("openssl", "keytool") if shutil.which(tool) is None]


def _run(*args: str, cwd: Path) -> None:
    done = subprocess.run(args, check=False, cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise PkiError(f"{' '.join(args[:3])} failed ({done.returncode}): {done.stderr.strip()}")


def _new_key_and_csr(name: str, subject: str, cwd: Path) -> None:
    _run(
        "openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
        cwd=cwd,
    )  # fmt: skip


def _make_ca(name: str, cwd: Path) -> None:
    _run(
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", DAYS,
        "-subj", f"/CN=Sluice test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=cwd,
    )  # fmt: skip


def _make_leaf(name: str, ca: str, extensions: list[str], cwd: Path) -> None:
    _new_key_and_csr(name, f"/CN=sluice-{name}", cwd)
    (cwd / f"{name}.ext").write_text("".join(f"{line}\n" for line in extensions))
    _run(
        "openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
        "-CAkey", f"{ca}.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", DAYS,
        "-extfile", f"{name}.ext",
        cwd=cwd,
    )  # fmt: skip


SERVER_EXTENSIONS = [
    "basicConstraints=CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=serverAuth",
    "subjectAltName=IP:127.0.0.1,DNS:localhost",
]
CLIENT_EXTENSIONS = [
    "basicConstraints=CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=clientAuth",
]


def make_pki(directory: Path) -> Pki:
    """Generate both CAs, the certificates and the server's stores in ``directory``."""
    missing = missing_tools()
    if missing:
        raise PkiError(f"missing {', '.join(missing)} (openssl; keytool comes with Java)")
    directory.mkdir(parents=True, exist_ok=True)
    _make_ca("ca", directory)
    _make_ca("rogue-ca", directory)
    _make_leaf("server", "ca", SERVER_EXTENSIONS, directory)
    _make_leaf("client", "ca", CLIENT_EXTENSIONS, directory)
    _make_leaf("rogue", "rogue-ca", CLIENT_EXTENSIONS, directory)
    _run(
        "openssl", "pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key",
        "-certfile", "ca.pem", "-name", "server", "-out", "server.p12",
        "-passout", f"pass:{PASSWORD}",
        cwd=directory,
    )  # fmt: skip
    _run(
        "keytool", "-importcert", "-noprompt", "-storetype", "PKCS12",
        "-keystore", "truststore.p12", "-storepass", PASSWORD, "-alias", "ca",
        "-file", "ca.pem",
        cwd=directory,
    )  # fmt: skip
    return Pki(
        ca=directory / "ca.pem",
        server_keystore=directory / "server.p12",
        truststore=directory / "truststore.p12",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        rogue_ca=directory / "rogue-ca.pem",
        rogue_cert=directory / "rogue.pem",
        rogue_key=directory / "rogue.key",
    )
