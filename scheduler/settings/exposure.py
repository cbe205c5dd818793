"""What Sluice exposes, and on what terms: the broker's credentials and the listeners.

The broker (and Celery's result backend, the same Redis): its password goes
into its URL (``redis://:<password>@host:port/db``, :func:`with_password`),
and the URL is shown redacted wherever it is printed or logged
(:func:`redact`: ``redis://:**@host:port/db``, as Celery and Flower show
it). A ``rediss://`` URL gets Celery's TLS options from ``broker.tls``
(:func:`broker_ssl_options`). A broker that refuses a client is named with
what failed, authentication, TLS or the connection (:func:`broker_failure`).

ZooKeeper: a loopback ZooKeeper without ``zookeeper.auth`` is reached as
the local stack's identity (user ``sluice``, the password of
``<state_dir>/zookeeper.password``) once the stack has made that file
(:func:`with_zookeeper_auth`); one outside loopback needs ``zookeeper.auth``
(:func:`refuse_open_zookeeper`).

The listeners never start unauthenticated outside loopback: ``sluice web``
on a non-loopback address needs an authenticator (or the explicit
``web.allow_unauthenticated``), and the stack's Flower a configured login
(:func:`refuse_open_web`, :func:`refuse_open_flower`; docs/reliability.md).

It takes the settings as values (:mod:`scheduler.settings.sections`) and
knows nothing of how they are read; :func:`scheduler.settings.load.load_settings`
completes every process's settings through :func:`with_zookeeper_auth` and
:func:`with_broker_password`.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from scheduler.errors import SettingsError, SluiceError
from scheduler.settings.reader import read_password_file
from scheduler.settings.sections import (
    ZOOKEEPER_USER,
    FlowerSettings,
    Settings,
    TLSSettings,
    WebSettings,
    ZooKeeperAuth,
    ZooKeeperSettings,
)

REDIS_SCHEMES = ("redis", "rediss")


class BrokerError(SluiceError):
    """The broker refused or could not be reached; the message says what and where."""


# ---------------------------------------------------------------- addresses


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.1``, ``[::1]``).

    Anything else, a name included, counts as reachable from outside:
    ``0.0.0.0`` and ``::`` listen on every interface.
    """
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(url: str) -> str:
    """The host a URL points at ("" when it names none)."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


# ---------------------------------------------------------------- the broker URL


def _set_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{hostport}"))


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` as its Redis password, unless it names one already.

    Only ``redis://`` and ``rediss://`` URLs are changed; the password is
    percent-encoded (Celery, kombu and redis-py decode it).
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not password or parts.scheme not in REDIS_SCHEMES or parts.password is not None:
        return url
    return _set_password(url, quote(password, safe=""))


def url_password(url: str) -> str | None:
    """The password a URL carries (still percent-encoded), None when it has none."""
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def redact(url: str) -> str:
    """``url`` fit to print: its password replaced by ``**`` (``redis://:**@host:6379/0``)."""
    if url_password(url) is None:
        return url
    return _set_password(url, "**")


def broker_password(settings: Settings) -> str:
    """The broker's password: ``broker.password``, ``broker.password_file``, the stack's; or "".

    The local stack's file (``<state_dir>/broker.password``) counts for a
    loopback broker only: it is the password of the Redis the stack started.
    """
    broker = settings.broker
    if broker.password:
        return broker.password
    if broker.password_file is None and not is_loopback(url_host(settings.broker_url)):
        return ""
    return read_password_file(settings.broker_password_file, "broker.password_file")


def with_broker_password(settings: Settings) -> Settings:
    """``settings`` whose ``broker_url`` carries the broker's password (unless it names one).

    Every process loads its settings through this
    (:func:`scheduler.settings.load.load_settings`), so workers, Flower, beat, the
    web and the CLI all authenticate; the URL is shown only through
    :func:`redact`.
    """
    url = settings.broker_url
    if settings.broker.tls is not None and not url.startswith("rediss://"):
        raise SettingsError(f"broker.tls: needs a rediss:// broker_url, got {redact(url)}")
    if url_password(url) is not None:
        return settings
    password = broker_password(settings)
    return replace(settings, broker_url=with_password(url, password))


def broker_ssl_options(url: str, tls: TLSSettings | None) -> dict[str, Any] | None:
    """Celery's ``broker_use_ssl`` and ``redis_backend_use_ssl`` for ``url``; None without TLS.

    A ``rediss://`` URL verifies the server against ``tls.ca`` (the system's
    CAs without one) and presents ``tls.cert``/``tls.key`` when given.
    """
    if urlsplit(url).scheme != "rediss":
        return None
    verify = tls is None or tls.verify
    options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED if verify else ssl.CERT_NONE}
    if tls is not None:
        for key, value in (
            ("ssl_ca_certs", tls.ca),
            ("ssl_certfile", tls.cert),
            ("ssl_keyfile", tls.key),
        ):
            if value:
                options[key] = value
    return options


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


_AUTH_WORDS = (
    "NOAUTH",
    "WRONGPASS",
    "invalid username-password",
    "Authentication required",
    "HELLO must be called with the client already authenticated",
)


def broker_failure(exc: BaseException) -> str:
    """What a broker error means: ``authentication failed (...)``, ``TLS failed (...)``, ...

    Reads the whole chain of causes: Celery and kombu wrap redis-py's
    ``AuthenticationError`` in their own errors.
    """
    chain = _causes(exc)

    def said(error: BaseException) -> str:
        text = " ".join(str(error).split()) or type(error).__name__
        # redis-py 8 opens with HELLO, which Redis answers at length
        return "Authentication required." if "HELLO must be called" in text else text

    for error in chain:
        names = {cls.__name__ for cls in type(error).__mro__}
        if "AuthenticationError" in names or any(w in str(error) for w in _AUTH_WORDS):
            return f"authentication failed ({said(error)})"
    for error in chain:
        if isinstance(error, ssl.SSLError) or "SSL" in str(error):
            return f"TLS failed ({said(error)})"
    return f"cannot connect ({said(exc)})"


def broker_error(url: str, exc: BaseException) -> BrokerError:
    """A :class:`BrokerError` naming the broker (redacted) and what failed."""
    return BrokerError(f"broker {redact(url)}: {broker_failure(exc)}")


# ---------------------------------------------------------------- ZooKeeper


def zookeeper_hosts(hosts: str) -> list[str]:
    """The host of every server of a ZooKeeper connect string (``a:2181,[::1]:2182/chroot``)."""
    found = []
    for entry in hosts.split(","):
        address = entry.strip().split("/", 1)[0]
        host, colon, port = address.rpartition(":")
        bare_ipv6 = address.count(":") > 1 and not address.startswith("[")
        if not colon or not port.isdigit() or bare_ipv6:  # no port
            host = address
        found.append(host.strip("[]") or "127.0.0.1")
    return found


def zookeeper_on_loopback(zookeeper: ZooKeeperSettings) -> bool:
    return all(is_loopback(host) for host in zookeeper_hosts(zookeeper.hosts))


def with_zookeeper_auth(settings: Settings) -> Settings:
    """``settings`` whose ``zookeeper.auth`` holds the password of its file, when it has one.

    Without ``zookeeper.auth``, a ZooKeeper all on loopback is reached as
    the local stack's identity (user ``sluice``) once
    ``<state_dir>/zookeeper.password`` exists; a ``password_file`` read
    before it existed is read again. Every process loads its settings
    through this (:func:`scheduler.settings.load.load_settings`), so every node
    it creates carries that identity's ACL.
    """
    zookeeper = settings.zookeeper
    auth = zookeeper.auth
    if auth is not None and (auth.password or auth.password_file is None):
        return settings
    if auth is None and not zookeeper_on_loopback(zookeeper):
        return settings
    path = settings.zookeeper_password_file
    password = read_password_file(path, "zookeeper.auth.password_file")
    if not password:
        return settings
    username = auth.username if auth is not None else ZOOKEEPER_USER
    fresh = ZooKeeperAuth(username, password, path)
    return replace(settings, zookeeper=replace(zookeeper, auth=fresh))


def refuse_open_zookeeper(zookeeper: ZooKeeperSettings) -> None:
    """SettingsError for a ZooKeeper outside loopback that ``zookeeper.auth`` does not cover.

    Every node Sluice creates carries the ACL of its digest identity; without
    one, anyone who reaches the server reads and changes the whole tree.
    """
    outside = [host for host in zookeeper_hosts(zookeeper.hosts) if not is_loopback(host)]
    if not outside or zookeeper.auth is not None:
        return
    raise SettingsError(
        f"refusing to use ZooKeeper at {zookeeper.hosts} without authentication: "
        f"zookeeper.hosts names {outside[0]}, outside loopback, and zookeeper.auth is not "
        "set; set zookeeper.auth (username and password_file), or use a loopback ZooKeeper"
    )


def zookeeper_cleartext(zookeeper: ZooKeeperSettings) -> str | None:
    """A note when the digest password would cross a network in the clear (no TLS)."""
    if zookeeper.tls is not None or zookeeper.auth is None or zookeeper_on_loopback(zookeeper):
        return None
    return (
        f"ZooKeeper at {zookeeper.hosts}: digest authentication without zookeeper.tls sends "
        "the password over the network in the clear"
    )


# ---------------------------------------------------------------- the listeners


def refuse_open_web(web: WebSettings) -> None:
    """SettingsError unless ``sluice web`` on ``web.listen`` would check who calls it.

    Outside loopback a web needs an authenticator, or the operator's
    explicit ``web.allow_unauthenticated: true`` (reads open unless
    ``protect_reads``, every admin verb refused).
    """
    if is_loopback(web.host) or web.authenticators or web.allow_unauthenticated:
        return
    raise SettingsError(
        f"refusing to serve on {web.listen} without authentication: web.listen is outside "
        "loopback and web.authenticators is empty; add an authenticator, listen on "
        "127.0.0.1, or set web.allow_unauthenticated: true (admin verbs stay refused)"
    )


def refuse_open_flower(flower: FlowerSettings) -> None:
    """SettingsError unless the stack's Flower on ``flower.listen`` asks for a login.

    On loopback the stack makes a login when none is configured; outside it
    the login must be configured (``flower.basic_auth_file``), so that the
    operators who reach it from elsewhere have one.
    """
    if is_loopback(flower.host) or flower.basic_auth_file is not None:
        return
    raise SettingsError(
        f"refusing to start Flower on {flower.listen} without a login: flower.listen is "
        "outside loopback and flower.basic_auth_file (user:password lines) is not set"
    )
