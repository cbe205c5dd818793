"""A ZooKeeper server from Debian's ``zookeeper`` package, run as a child.

The server gets its own data dir, port and config; four-letter words are
enabled so readiness is probed with ``ruok`` (never by sleeping) and tests
can read ``mntr``/``srvr``. Members of a local ensemble are the same class
with a ``myid`` and the peer list.

With :class:`ServerTLS` the server listens on a TLS-only client port
(``secureClientPort``, Netty) and has no plaintext client port at all; the
readiness probe then sends its four-letter words over TLS, presenting the
probe's client certificate.

``super_digest`` (``user:base64(sha1(user:password))``, :func:`super_digest`)
makes that identity a superuser, whom no ACL stops; it goes into
``zoo.cfg``, which is mode 0600 like everything under the data dir (the
server runs with umask 077).
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cli.stack import process
from scheduler.errors import StackError

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# Jars beyond zookeeper.jar's own manifest Class-Path: a logger binding, and
# netty-codec which the Netty connection factory (TLS) needs. Nothing else is
# missing for TLS (tests/zk/test_tls.py): Netty falls back from epoll (whose
# netty-transport-native-unix-common is not on the Class-Path) to NIO.
EXTRA_JARS = ("slf4j-simple.jar", "netty-codec.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# The server's heap from the start (it may grow to -Xmx). A peak day's tree
# (18.5k znodes, 5.4 MB of data) lives in about 20 MB of it.
HEAP_START_MB = 64
# zoo.cfg keys ZooKeeper does not know become system properties "zookeeper.<key>"
SUPER_DIGEST_KEY = "DigestAuthenticationProvider.superDigest"


def super_digest(username: str, password: str) -> str:
    """ZooKeeper's digest of an identity: ``user:base64(sha1("user:password"))``."""
    sha1 = hashlib.sha1(f"{username}:{password}".encode()).digest()
    return f"{username}:{base64.b64encode(sha1).decode()}"


def four_letter(
    host: str,
    port: int,
    word: str,
    timeout: float = 2.0,
    tls: ssl.SSLContext | None = None,
) -> str:
    """Send a four-letter word (``ruok``, ``srvr``, ``mntr``) and return the reply.

    ``tls`` wraps the connection first (a server with a TLS-only client port).
    """
    with socket.create_connection((host, port), timeout=timeout) as raw:
        sock = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        sock.sendall(word.encode())
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def is_healthy(host: str, port: int, tls: ssl.SSLContext | None = None) -> bool:
    """True if the server answers ``ruok`` and serves clients (not mid-election)."""
    try:
        if four_letter(host, port, "ruok", tls=tls) != "imok":
            return False
        return "Mode:" in four_letter(host, port, "srvr", tls=tls)
    except OSError:  # ssl.SSLError included
        return False


@dataclass(frozen=True)
class ServerTLS:
    """A TLS-only client port: key and trust stores, and what the probe presents.

    ``keystore`` holds the server's key and certificate chain, ``truststore``
    the CA certificates whose clients are accepted (for PKCS12 made by
    ``keytool``: an ``openssl pkcs12 -nokeys`` file loads as an empty trust
    store in Java). ``client_auth`` is ZooKeeper's ``ssl.clientAuth``:
    ``need``, ``want`` or ``none``. ``probe_ca`` verifies the server's
    certificate and ``probe_cert``/``probe_key`` is the client certificate
    the readiness probe shows.
    """

    keystore: Path
    truststore: Path
    password: str
    probe_ca: Path
    probe_cert: Path | None = None
    probe_key: Path | None = None
    client_auth: str = "need"
    store_type: str = "PKCS12"

    def config(self) -> dict[str, str]:
        """The zoo.cfg lines (the port lines are the server's)."""
        return {
            "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.location": str(self.keystore),
            "ssl.keyStore.password": self.password,
            "ssl.keyStore.type": self.store_type,
            "ssl.trustStore.location": str(self.truststore),
            "ssl.trustStore.password": self.password,
            "ssl.trustStore.type": self.store_type,
            "ssl.clientAuth": self.client_auth,
        }

    def probe_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.probe_ca))
        context.check_hostname = False  # the chain is verified; probes go to 127.0.0.1
        if self.probe_cert is not None:
            key = None if self.probe_key is None else str(self.probe_key)
            context.load_cert_chain(str(self.probe_cert), key)
        return context


@dataclass
class ZooKeeperServer:
    """One ZooKeeper server process.

    ``peers`` (``(myid, quorum_port, election_port)`` for every member) makes
    it an ensemble member; empty means standalone.
    """

    data_dir: Path
    port: int
    host: str = "127.0.0.1"
    tick_ms: int = 200
    min_session_ms: int = 1000
    max_session_ms: int = 60000
    myid: int = 0
    peers: Sequence[tuple[int, int, int]] = ()
    extra_config: dict[str, str] = field(default_factory=dict)
    # TLS-only client port: ``port`` becomes the secureClientPort.
    tls: ServerTLS | None = None
    proc_pid: int | None = None
    # the four-letter words it answers ("*": all; the probe needs ruok and srvr)
    four_letter_words: str = "*"
    # the superuser's digest (super_digest()); "" for none
    super_digest: str = ""

    @property
    def log_file(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def config_file(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    def write_config(self) -> None:
        process.private_dir(self.data_dir)
        # A TLS server has no plaintext client port at all.
        port_key = "clientPort" if self.tls is None else "secureClientPort"
        lines = {
            "tickTime": str(self.tick_ms),
            "initLimit": "20",
            "syncLimit": "10",
            "dataDir": str(self.data_dir / "data"),
            port_key: str(self.port),
            f"{port_key}Address": self.host,
            "minSessionTimeout": str(self.min_session_ms),
            "maxSessionTimeout": str(self.max_session_ms),
            "4lw.commands.whitelist": self.four_letter_words,
            "admin.enableServer": "false",
            "maxClientCnxns": "0",
            "autopurge.purgeInterval": "1",
        }
        for myid, quorum_port, election_port in self.peers:
            lines[f"server.{myid}"] = f"{self.host}:{quorum_port}:{election_port}"
        if self.tls is not None:
            lines.update(self.tls.config())
        if self.super_digest:
            lines[SUPER_DIGEST_KEY] = self.super_digest
        lines.update(self.extra_config)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        with os.fdopen(process.open_private(self.config_file, flags), "w") as out:
            out.write("".join(f"{k}={v}\n" for k, v in lines.items()))
        process.private_dir(self.data_dir / "data")
        if self.peers:
            (self.data_dir / "data" / "myid").write_text(f"{self.myid}\n")

    def command(self) -> list[str]:
        if not ZOOKEEPER_JAR.is_file():
            raise StackError(
                f"ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing); "
                "run: sudo apt-get install -y zookeeper"
            )
        jars = [str(ZOOKEEPER_JAR)]
        jars += [str(ZOOKEEPER_JAR.parent / j) for j in EXTRA_JARS]
        return [
            "java",
            # The heap is made whole and touched at start: its memory is then the
            # same at the end of a day as after its first minute (a heap of 32 MB
            # grew with the tree and collected its old generation every ten
            # seconds; docs/performance.md "Memory").
            f"-Xms{HEAP_START_MB}m",
            "-XX:+AlwaysPreTouch",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-cp",
            ":".join(jars),
            MAIN_CLASS,
            str(self.config_file),
        ]

    def start(self) -> int:
        """Start the server without waiting for it; returns its pid."""
        self.write_config()
        proc = process.spawn(self.command(), self.log_file)
        self.proc_pid = proc.pid
        return proc.pid

    def wait_ready(self, timeout: float = 60.0) -> None:
        pid = self.proc_pid
        probe = None if self.tls is None else self.tls.probe_context()
        process.wait_for(
            lambda: is_healthy(self.host, self.port, probe),
            timeout,
            f"ZooKeeper on {self.hosts}",
            log_file=self.log_file,
            alive=(lambda: process.is_alive(pid)) if pid else None,
        )

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc_pid is not None:
            process.stop_group(self.proc_pid, timeout)
            self.proc_pid = None

    def kill(self) -> None:
        """SIGKILL, for fault tests."""
        if self.proc_pid is not None:
            process.stop_group(self.proc_pid, timeout=0)
            self.proc_pid = None
