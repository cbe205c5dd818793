"""The broker's credentials and the listeners' refusals, as settings and URLs (no services)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from scheduler.errors import SettingsError
from scheduler.settings import exposure
from scheduler.settings.load import load_settings, parse_settings

PASSWORD = "pa:ss/w@rd"


def test_a_password_goes_into_a_redis_url_once_and_is_shown_redacted() -> None:
    url = exposure.with_password("redis://127.0.0.1:6390/0", PASSWORD)
    assert url == "redis://:pa%3Ass%2Fw%40rd@127.0.0.1:6390/0"
    assert exposure.redact(url) == "redis://:**@127.0.0.1:6390/0"
    assert exposure.with_password(url, "other") == url  # the URL's own password stays
    assert exposure.with_password("rediss://h/1", "x") == "rediss://:x@h/1"
    assert exposure.with_password("amqp://h//", "x") == "amqp://h//"  # Redis only
    assert exposure.redact("redis://user:secret@h:1/0") == "redis://user:**@h:1/0"
    assert exposure.redact("redis://h:1/0") == "redis://h:1/0"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("ci.example.com", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert exposure.is_loopback(host) is loopback


def test_what_a_broker_failure_says() -> None:
    refused = OSError("redis: WRONGPASS invalid username-password pair or user is disabled.")
    assert exposure.broker_failure(refused).startswith("authentication failed (redis: WRONGPASS")
    wrapped = RuntimeError("Retry limit exceeded")
    wrapped.__cause__ = OSError("NOAUTH Authentication required.")
    assert exposure.broker_failure(wrapped) == (
        "authentication failed (NOAUTH Authentication required.)"
    )
    assert exposure.broker_failure(ssl.SSLError(1, "certificate verify failed")).startswith(
        "TLS failed"
    )
    assert exposure.broker_failure(ConnectionRefusedError(111, "refused")).startswith(
        "cannot connect"
    )
    error = exposure.broker_error("redis://:s3cret@127.0.0.1:1/0", refused)
    assert str(error).startswith("broker redis://:**@127.0.0.1:1/0: authentication failed")
    assert "s3cret" not in str(error)


def test_the_broker_section(tmp_path: Path) -> None:
    (tmp_path / "broker.pw").write_text(f"{PASSWORD}\n")
    settings = load_settings(_config(tmp_path, "broker:\n  password_file: broker.pw\n"), {})
    assert settings.broker.password_file == tmp_path / "broker.pw"
    assert settings.broker_url == "redis://:pa%3Ass%2Fw%40rd@127.0.0.1:6390/0"
    inline = load_settings(_config(tmp_path, "broker:\n  password: inline\n"), {})
    assert inline.broker_url == "redis://:inline@127.0.0.1:6390/0"
    # the environment names the file (a container's secret)
    env = {"SLUICE_BROKER_PASSWORD_FILE": str(tmp_path / "broker.pw")}
    assert load_settings(_config(tmp_path, ""), env).broker_url == settings.broker_url


def test_the_stacks_password_file_counts_for_a_loopback_broker_only(tmp_path: Path) -> None:
    config = _config(tmp_path, "")
    assert load_settings(config, {}).broker_url == "redis://127.0.0.1:6390/0"  # none yet
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "broker.password").write_text("made-by-the-stack\n")
    assert load_settings(config, {}).broker_url == "redis://:made-by-the-stack@127.0.0.1:6390/0"
    remote = {"SLUICE_BROKER_URL": "redis://broker.example.com:6379/0"}
    assert load_settings(config, remote).broker_url == "redis://broker.example.com:6379/0"


def test_tls_for_a_rediss_broker(tmp_path: Path) -> None:
    text = "broker_url: rediss://redis.example.com:6380/0\nbroker:\n  tls:\n"
    text += "    ca: pki/ca.pem\n    cert: pki/client.pem\n    key: pki/client.key\n"
    settings = parse_settings(text, "sluice.yaml", tmp_path)
    options = exposure.broker_ssl_options(settings.broker_url, settings.broker.tls)
    assert options == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": str(tmp_path / "pki" / "ca.pem"),
        "ssl_certfile": str(tmp_path / "pki" / "client.pem"),
        "ssl_keyfile": str(tmp_path / "pki" / "client.key"),
    }
    # rediss:// without a tls section: the system's CAs, verified
    assert exposure.broker_ssl_options("rediss://h/0", None) == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert exposure.broker_ssl_options("redis://h/0", settings.broker.tls) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "broker:\n  tls:\n    ca: ca.pem\n",
            "broker.tls: needs a rediss:// broker_url, got redis://127.0.0.1:6390/0",
        ),
        (
            "broker:\n  password: a\n  password_file: b\n",
            "sluice.yaml:",  # then the line and the key, as for the keystore
        ),
        ("broker:\n  tls:\n    verfy: false\n", "broker.tls.verfy: unknown key"),
        ("web:\n  allow_unauthenticated: yes please\n", "web.allow_unauthenticated: expected"),
        ("flower:\n  listen: 0.0.0.0\n", "flower.listen: expected HOST:PORT"),
        ("flower:\n  basic_auth: x\n", "flower.basic_auth: unknown key"),
    ],
)
def test_bad_sections_are_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(_config(tmp_path, text), {})
    assert message in str(info.value)


def test_a_password_in_the_url_and_in_the_section_is_refused(tmp_path: Path) -> None:
    text = "broker_url: redis://:a@127.0.0.1:1/0\nbroker:\n  password: b\n"
    with pytest.raises(SettingsError, match=r"broker\.password: broker_url names a password"):
        parse_settings(text, "sluice.yaml", tmp_path)


@pytest.mark.parametrize(
    ("web", "refused"),
    [
        ("listen: 127.0.0.1:9000\n", False),
        ("listen: '[::1]:9000'\n", False),
        ("listen: localhost:9000\n", False),
        ("listen: 0.0.0.0:9000\n", True),
        ("listen: 0.0.0.0:9000\n  allow_unauthenticated: true\n", False),
        (
            "listen: 0.0.0.0:9000\n  authenticators:\n"
            "    - {name: local, algorithm: HS256, secret: s}\n",
            False,
        ),
    ],
)
def test_the_web_refuses_to_listen_outside_loopback_unauthenticated(
    tmp_path: Path, web: str, refused: bool
) -> None:
    settings = parse_settings(f"web:\n  {web}", "sluice.yaml", tmp_path)
    if not refused:
        exposure.refuse_open_web(settings.web)
        return
    with pytest.raises(SettingsError) as info:
        exposure.refuse_open_web(settings.web)
    assert str(info.value) == (
        "refusing to serve on 0.0.0.0:9000 without authentication: web.listen is outside "
        "loopback and web.authenticators is empty; add an authenticator, listen on 127.0.0.1, "
        "or set web.allow_unauthenticated: true (admin verbs stay refused)"
    )


def test_the_flowers_login_file(tmp_path: Path) -> None:
    from cli.stack.flower import basic_auth

    logins = tmp_path / "flower.auth"
    logins.write_text("# operators\nalice:one:two\n\nbob:three\n")
    settings = parse_settings(
        "flower:\n  listen: 0.0.0.0:5555\n  basic_auth_file: flower.auth\n", "sluice.yaml", tmp_path
    )
    exposure.refuse_open_flower(settings.flower)  # a login is configured
    assert basic_auth(settings.flower) == "alice:one:two,bob:three"
    logins.write_text("alice\n")
    with pytest.raises(SettingsError, match=r"flower.auth:1: expected user:password"):
        basic_auth(settings.flower)
    logins.write_text("# nobody\n")
    with pytest.raises(SettingsError, match="no user:password line"):
        basic_auth(settings.flower)


def _config(tmp_path: Path, extra: str) -> Path:
    config = tmp_path / "sluice.yaml"
    config.write_text(f"broker_url: redis://127.0.0.1:6390/0\nstate_dir: state\n{extra}")
    return config
