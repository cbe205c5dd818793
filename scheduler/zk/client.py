"""Connecting to ZooKeeper from the settings, one client per process.

:class:`ZooKeeperClient` wraps a started kazoo client chrooted at the
configured root and adds what kazoo leaves to its users:

* **Deadlines.** Every call goes through ``*_async().get(timeout=...)``
  (:meth:`ZooKeeperClient.wait`); without a quorum a call raises
  :class:`~scheduler.zk.errors.CallTimeoutError` after ``call_timeout``
  instead of blocking forever.
* **Connection state.** A listener records ``CONNECTED``/``SUSPENDED``/
  ``LOST``. SUSPENDED (connection dropped, session maybe alive) makes lock
  holders stop acting until the connection is back; LOST (the server expired
  the session: every ephemeral node, so every lock, is gone) bumps
  :attr:`session_generation`, and contexts made before it refuse to write
  for good, whatever kazoo's ``Lock.is_acquired`` says.
* **A watchdog.** A daemon thread pings the server every sixth of the
  session timeout and records when it last answered. A busy client whose
  server hangs may never see SUSPENDED (its own requests count as pings),
  so :meth:`responsive` is false once ZooKeeper has not answered for two
  thirds of the session timeout, and lock holders stop acting on their
  locks (see :mod:`scheduler.zk.context`).

* **Why a connection failed.** kazoo retries a refused connection until
  the deadline and only logs why; :func:`connect` puts the last reason in
  its error. A TLS refusal (no or untrusted client certificate, untrusted
  server certificate) raises :class:`~scheduler.zk.errors.AccessDeniedError`:
  retrying cannot help. With auth configured, every node the client creates
  carries a creator-only digest ACL (``default_acl``), recipes included,
  and so do the chroot and its parents (:func:`_ensure_root`); auth whose
  password file is missing or empty is refused before connecting. Closing
  the rest of a server (``/``, ``/zookeeper``, nodes made by others) is
  :mod:`scheduler.zk.acls`.

A kazoo client must never cross a ``fork()``: a client created in a parent
hangs in the child. :func:`process_client` therefore keys the client by the
process id and builds a fresh one lazily in each process (Celery prefork
children included).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from scheduler.errors import SettingsError, SluiceError
from scheduler.processlocal import ProcessLocal
from scheduler.zk.endpoint import DigestIdentity, ZooKeeperEndpoint
from scheduler.zk.errors import AccessDeniedError, CallTimeoutError, ZooKeeperUnavailableError
from scheduler.zk.pollhandler import PollHandler
from scheduler.zk.trace import RequestTrace, process_trace

log = logging.getLogger(__name__)

# Fraction of the session timeout after which a silent server means "stop acting".
WATCHDOG_FRACTION = 2.0 / 3.0


class ConnectionState(enum.StrEnum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


class _ConnectionLog(logging.LoggerAdapter[logging.Logger]):
    """kazoo's logger for one client, remembering why the last connection attempt failed."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.last_failure: str | None = None

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level >= logging.WARNING and isinstance(msg, str) and msg.startswith("Connection "):
            self.last_failure = msg % args if args else msg
        super().log(level, msg, *args, **kwargs)

    def warn(self, msg: object, *args: Any, **kwargs: Any) -> None:  # kazoo still calls it
        self.log(logging.WARNING, msg, *args, **kwargs)


# What a connection failure means, for the error message: (text in kazoo's reason, meaning).
_TLS_REFUSALS = (
    ("BAD_CERTIFICATE", "the server wants a client certificate (tls.cert, tls.key)"),
    ("CERTIFICATE_REQUIRED", "the server wants a client certificate (tls.cert, tls.key)"),
    ("CERTIFICATE_UNKNOWN", "the server does not trust our client certificate"),
    ("UNKNOWN_CA", "the server does not trust our client certificate"),
    ("CERTIFICATE_VERIFY_FAILED", "we do not trust the server's certificate (tls.ca)"),
    ("WRONG_VERSION_NUMBER", "the server does not speak TLS on this port"),
)
_PLAINTEXT_HINT = (
    "the server closed the connection; a TLS-only port does this to a plaintext client"
)


def _start(kazoo: KazooClient, settings: ZooKeeperEndpoint, what: str) -> None:
    """Start ``kazoo`` within the call deadline, or raise a SluiceError saying why not."""
    try:
        kazoo.start(timeout=settings.call_timeout)
    except KazooTimeoutError:
        pass
    else:
        return
    reason = kazoo.logger.last_failure if isinstance(kazoo.logger, _ConnectionLog) else None
    message = f"{what} ZooKeeper at {settings.hosts} within {settings.call_timeout:.1f}s"
    if reason is None:
        raise CallTimeoutError(message) from None
    message += f": {reason}"
    for needle, meaning in _TLS_REFUSALS:
        if needle in reason.upper():
            log.error("%s (%s)", message, meaning)
            raise AccessDeniedError(f"{message} ({meaning})") from None
    if settings.tls is None and reason.endswith("socket connection broken"):
        message += f" ({_PLAINTEXT_HINT})"
    log.error("%s", message)
    raise CallTimeoutError(message) from None


class RequestCount:
    """Requests one thread sent while counting (:meth:`ZooKeeperClient.counting_requests`)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.calls: list[tuple[str, str]] = []  # (request type, path)

    @property
    def total(self) -> int:
        return len(self.calls)

    def by_type(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for kind, _ in self.calls:
            found[kind] = found.get(kind, 0) + 1
        return found


class ZooKeeperClient:
    """A started, chrooted kazoo client with deadlines, state tracking and a watchdog."""

    def __init__(self, settings: ZooKeeperEndpoint, kazoo: KazooClient) -> None:
        self.settings = settings
        self.kazoo = kazoo
        self.call_timeout = settings.call_timeout
        self.session_timeout = settings.session_timeout
        self.state = ConnectionState.LOST
        self.session_generation = 0
        self._last_reply = time.monotonic()
        self._ping_pending = False
        self._stopping = threading.Event()
        self._watchdog: threading.Thread | None = None
        # Ephemeral nodes a failed call may have left behind: (parent, name prefix).
        self._leftovers: set[tuple[str, str]] = set()
        # ... and fixed-path nodes, deleted only while they hold our data: path -> data
        self._owned_leftovers: dict[str, bytes] = {}
        self._leftovers_lock = threading.Lock()
        self._counts: list[RequestCount] = []
        self._trace: RequestTrace | None = None
        kazoo.add_listener(self._on_state)

    @contextlib.contextmanager
    def counting_requests(self) -> Iterator[RequestCount]:
        """Count the requests the calling thread sends (tests and benchmarks).

        A multi counts once, as ZooKeeper counts it.
        """
        count = RequestCount()
        self._wrap_calls()
        self._counts.append(count)
        try:
            yield count
        finally:
            self._counts.remove(count)

    def trace(self, trace: RequestTrace) -> None:
        """Add every request of this client to ``trace`` (``SLUICE_ZK_TRACE``)."""
        self._trace = trace
        self._wrap_calls()

    def _wrap_calls(self) -> None:
        """Route kazoo's one entry point for requests (its private ``_call``) through a count."""
        if "_call" in vars(self.kazoo):
            return  # wrapped already
        original = self.kazoo._call

        def counted(request: Any, async_object: Any) -> Any:
            if self._trace is not None:
                self._trace.add(request)
            for open_count in self._counts:
                if open_count.thread == threading.get_ident():
                    path = getattr(request, "path", "")
                    open_count.calls.append((type(request).__name__, str(path)))
            return original(request, async_object)

        setattr(self.kazoo, "_call", counted)  # noqa: B010 (a method, replaced per instance)

    # ------------------------------------------------------------ state

    def _on_state(self, state: str) -> None:
        # Runs in kazoo's event thread: record, never block.
        if state == KazooState.LOST:
            self.session_generation += 1
            self.state = ConnectionState.LOST
            if not self._stopping.is_set():
                log.warning("ZooKeeper session lost (generation %d)", self.session_generation)
        elif state == KazooState.SUSPENDED:
            self.state = ConnectionState.SUSPENDED
            log.warning("ZooKeeper connection suspended")
        else:
            self.state = ConnectionState.CONNECTED
            self._last_reply = time.monotonic()

    @property
    def session_id(self) -> int | None:
        client_id = self.kazoo.client_id
        return None if client_id is None else int(client_id[0])

    def silent_for(self) -> float:
        """Seconds since ZooKeeper last answered this client."""
        return time.monotonic() - self._last_reply

    def responsive(self) -> bool:
        """Connected, and ZooKeeper answered within 2/3 of the session timeout."""
        return (
            self.state == ConnectionState.CONNECTED
            and self.silent_for() < WATCHDOG_FRACTION * self.session_timeout
        )

    def _start_watchdog(self) -> None:
        self._last_reply = time.monotonic()
        self._watchdog = threading.Thread(
            target=self._watch, name="sluice-zk-watchdog", daemon=True
        )
        self._watchdog.start()

    def discard_later(self, parent: str, prefix: str) -> None:
        """Delete our children of ``parent`` named ``prefix*`` once ZooKeeper answers again.

        For ephemeral nodes a timed-out call may have created (a lock
        contender whose create or cleanup got no answer): while the session
        lives they would block others, so the watchdog removes them.
        """
        self._leftovers.add((parent, prefix))

    def discard_later_if(self, path: str, data: bytes) -> None:
        """Delete ``path`` once ZooKeeper answers again, if it still holds ``data``.

        For a node at a fixed path (a try-lock's holder) whose create or
        delete got no answer: another process may hold that path by then,
        and its node holds other data.
        """
        with self._leftovers_lock:
            self._owned_leftovers[path] = data

    def _discard_owned(self) -> None:
        with self._leftovers_lock:
            pending = dict(self._owned_leftovers)
        for path, data in pending.items():
            try:
                found, stat = self.get(path)
                if found == data:
                    self.delete(path, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass
            except Exception as exc:  # still unreachable: try again next round
                log.info("leftover %s not removed yet: %s", path, exc)
                continue
            with self._leftovers_lock:
                if self._owned_leftovers.get(path) == data:
                    del self._owned_leftovers[path]

    def _discard_leftovers(self) -> None:
        self._discard_owned()
        for parent, prefix in list(self._leftovers):
            try:
                names = self.get_children(parent)
                for name in names:
                    if name.startswith(prefix):
                        with contextlib.suppress(NoNodeError):
                            self.delete(f"{parent.rstrip('/')}/{name}")
            except NoNodeError:
                pass
            except Exception as exc:  # still unreachable: try again next round
                log.info("leftover %s/%s* not removed yet: %s", parent, prefix, exc)
                continue
            self._leftovers.discard((parent, prefix))

    def _watch(self) -> None:
        interval = self.session_timeout / 6.0
        while not self._stopping.wait(interval):
            if self._ping_pending or self.state != ConnectionState.CONNECTED:
                continue
            if (self._leftovers or self._owned_leftovers) and self.responsive():
                self._discard_leftovers()
            self._ping_pending = True
            try:
                self.kazoo.exists_async("/").rawlink(self._pong)
            except Exception:  # the client is closing; the next round retries
                self._ping_pending = False

    def _pong(self, result: Any) -> None:
        self._ping_pending = False
        if result.successful():
            self._last_reply = time.monotonic()

    # ------------------------------------------------------------ calls

    def wait(self, async_result: Any, timeout: float | None = None) -> Any:
        """The value of a kazoo async result, within the call deadline."""
        try:
            value = async_result.get(timeout=self.call_timeout if timeout is None else timeout)
        except KazooTimeoutError:
            raise CallTimeoutError(
                f"ZooKeeper did not answer within {self.call_timeout:.1f}s"
            ) from None
        except (ConnectionLoss, SessionExpiredError) as exc:
            raise ZooKeeperUnavailableError(f"ZooKeeper unavailable: {exc!r}") from exc
        except (NoAuthError, AuthFailedError) as exc:
            self._last_reply = time.monotonic()
            raise AccessDeniedError(f"ZooKeeper refused access: {exc!r}") from exc
        except KazooException:
            self._last_reply = time.monotonic()  # an error reply is still a reply
            raise
        self._last_reply = time.monotonic()
        return value

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Any]:
        return self.wait(self.kazoo.get_async(path, watch=watch))  # type: ignore[no-any-return]

    def get_each(self, paths: Sequence[str]) -> list[tuple[bytes, Any] | None]:
        """Each path's data and stat, None where it does not exist, in order.

        Pipelined: every read is sent before the first answer is awaited,
        one round trip for all (unlike a multiRead, no reply-size bound).
        """
        return self.wait_each([self.kazoo.get_async(path) for path in paths])

    def wait_each(self, pending: Sequence[Any]) -> list[Any]:
        """The values of kazoo async results sent together, in order; None for a missing node."""
        found: list[Any] = []
        for result in pending:
            try:
                found.append(self.wait(result))
            except NoNodeError:
                found.append(None)
        return found

    def exists(self, path: str, watch: Any = None) -> Any:
        return self.wait(self.kazoo.exists_async(path, watch=watch))

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        return self.wait(self.kazoo.get_children_async(path, watch=watch))  # type: ignore[no-any-return]

    def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        result = self.kazoo.create_async(
            path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath
        )
        return self.wait(result)  # type: ignore[no-any-return]

    def set(self, path: str, value: bytes, version: int = -1) -> Any:
        return self.wait(self.kazoo.set_async(path, value, version))

    def delete(self, path: str, version: int = -1) -> None:
        self.wait(self.kazoo.delete_async(path, version))

    def ensure_path(self, path: str) -> None:
        self.wait(self.kazoo.ensure_path_async(path))

    def delete_tree(self, path: str) -> None:
        """Delete a node and everything below it, each call with its deadline.

        Raises kazoo's ``NoNodeError`` if ``path`` does not exist; nodes that
        vanish meanwhile (someone else cleaning up) are skipped.
        """
        children = self.get_children(path)
        for child in children:
            with contextlib.suppress(NoNodeError):
                self.delete_tree(f"{path.rstrip('/')}/{child}")
        self.delete(path)

    # ------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        self._stopping.set()
        self.kazoo.stop()

    def close(self) -> None:
        self.kazoo.close()


def _hosts_with_chroot(settings: ZooKeeperEndpoint) -> str:
    root = settings.root.rstrip("/")
    return settings.hosts + root if root else settings.hosts


def _digest(auth: DigestIdentity) -> tuple[str, str]:
    """kazoo's ``auth_data`` entry of ``auth``; SettingsError when it has no password."""
    if not auth.password:
        where = auth.password_file or "zookeeper.auth.password"
        raise SettingsError(f"zookeeper.auth: no password ({where} is missing or empty)")
    return ("digest", f"{auth.username}:{auth.password}")


def _make_kazoo(
    settings: ZooKeeperEndpoint,
    hosts: str,
    client_id: tuple[int, bytes] | None = None,
    also_as: Sequence[DigestIdentity] = (),
) -> KazooClient:
    auth_data = [_digest(auth) for auth in also_as] or None
    default_acl = None
    if settings.auth is not None:
        auth_data = [_digest(settings.auth), *(auth_data or [])]
        # ACLs are not inherited: every node this client creates carries them.
        default_acl = [make_digest_acl(settings.auth.username, settings.auth.password, all=True)]
    kwargs: dict[str, object] = {}
    if settings.tls is not None:
        kwargs.update(
            use_ssl=True,
            ca=settings.tls.ca,
            certfile=settings.tls.cert,
            keyfile=settings.tls.key,
            verify_certs=settings.tls.verify,
        )
    return KazooClient(
        hosts=hosts,
        timeout=settings.session_timeout,
        auth_data=auth_data,
        default_acl=default_acl,
        connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
        client_id=client_id,
        handler=PollHandler(),
        logger=_ConnectionLog(),
        **kwargs,
    )


@contextlib.contextmanager
def bare_client(
    settings: ZooKeeperEndpoint, also_as: Sequence[DigestIdentity] = ()
) -> Iterator[KazooClient]:
    """A started kazoo client without the chroot, authenticated also as ``also_as``.

    For what a chrooted client cannot reach: the chroot node itself and the
    nodes above it. Calls on it need their own deadlines (``.get(timeout=...)``).
    """
    bare = _make_kazoo(settings, settings.hosts, also_as=also_as)
    try:
        _start(bare, settings, "could not reach")
        yield bare
    except KazooTimeoutError:
        raise CallTimeoutError(f"could not reach ZooKeeper at {settings.hosts}") from None
    finally:
        bare.stop()
        bare.close()


def _ensure_root(settings: ZooKeeperEndpoint) -> None:
    """Create the chroot node itself (with its parents), which a chrooted client cannot do."""
    if settings.root in ("", "/"):
        return
    with bare_client(settings) as bare:
        bare.ensure_path_async(settings.root).get(timeout=settings.call_timeout)


def connect(settings: ZooKeeperEndpoint) -> ZooKeeperClient:
    """A started client chrooted at ``settings.root``, with its watchdog running."""
    _ensure_root(settings)
    kazoo = _make_kazoo(settings, _hosts_with_chroot(settings))
    client = ZooKeeperClient(settings, kazoo)
    trace = process_trace()
    if trace is not None:
        client.trace(trace)
    try:
        _start(kazoo, settings, "could not connect to")
    except SluiceError:
        kazoo.close()
        raise
    client._start_watchdog()
    return client


def attach(settings: ZooKeeperEndpoint, session_id: int, password: bytes) -> ZooKeeperClient:
    """A second client on an existing session (tests: closing it expires the session)."""
    kazoo = _make_kazoo(settings, _hosts_with_chroot(settings), (session_id, password))
    client = ZooKeeperClient(settings, kazoo)
    kazoo.start(timeout=settings.call_timeout)
    return client


def _close(client: ZooKeeperClient) -> None:
    client.stop()
    client.close()


# One client per process and settings, never inherited across a fork.
_clients: ProcessLocal[ZooKeeperEndpoint, ZooKeeperClient] = ProcessLocal(
    "ZooKeeper client", _close
)


def process_client(settings: ZooKeeperEndpoint) -> ZooKeeperClient:
    """This process's client for ``settings``, created on first use (after any fork)."""
    return _clients.get(settings, lambda: connect(settings))


def close_process_clients() -> None:
    """Close this process's clients (a worker process's shutdown)."""
    _clients.close_all()
