"""The local stack's Redis asks for a password; its Flower and web never run open outside loopback.

Real processes: the Redis the stack starts (its password file, 0600, made
once and reused), ``sluice stack up`` refusing a web or a Flower that would
listen outside loopback unauthenticated (before anything starts), and the
stack's Flower on ``0.0.0.0`` answering 401 without its login
(docs/reliability.md, rows 20a to 20d).
"""

from __future__ import annotations

import base64
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis as redis_client

from cli.stack import flower, process
from cli.stack.local import PROJECT_ROOT, LocalStack
from cli.stack.redis import RedisServer, probe
from scheduler.errors import StackError
from scheduler.settings.load import load_settings
from scheduler.settings.sections import FlowerSettings
from tests.fixtures.cli import clean_env, run_sluice


def _config(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "sluice.yaml"
    config.write_text(f"state_dir: state\n{text}")
    return config


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")


def test_the_stack_starts_redis_with_a_password_made_once(tmp_path: Path) -> None:
    port = process.free_port()
    config = _config(tmp_path, f"broker_url: redis://127.0.0.1:{port}/0\n")
    stack = LocalStack(load_settings(config, {}))
    entry = stack.start_redis()
    assert entry.pid is not None
    try:
        password_file = tmp_path / "state" / "broker.password"
        password = password_file.read_text().strip()
        assert len(password) >= 32 and password_file.stat().st_mode & 0o777 == 0o600
        url = f"redis://:{password}@127.0.0.1:{port}/0"
        # this process and every process that loads the same sluice.yaml use it
        assert stack.settings.broker_url == url
        assert load_settings(config, {}).broker_url == url
        assert probe(url) == ""
        plain = f"redis://127.0.0.1:{port}/0"
        assert probe(plain).startswith("authentication failed (Authentication required")
        client = redis_client.Redis.from_url(url)
        assert client.config_get("bind") == {"bind": "127.0.0.1"}
        client.close()
        # neither `ps` nor the log shows it; its config file is the owner's only
        assert password not in _cmdline(entry.pid)
        config_file = tmp_path / "state" / "redis" / "redis.conf"
        assert config_file.stat().st_mode & 0o777 == 0o600
    finally:
        process.stop_group(entry.pid)
    again = LocalStack(load_settings(config, {}))
    second = again.start_redis()
    assert second.pid is not None
    try:
        assert password_file.read_text().strip() == password  # reused, never replaced
        assert again.settings.broker_url == url and probe(url) == ""
    finally:
        process.stop_group(second.pid)
    assert password not in (tmp_path / "state" / "redis" / "redis.log").read_text()


def test_a_redis_that_refuses_the_stacks_password_is_named(
    redis_with_password: RedisServer, tmp_path: Path
) -> None:
    config = _config(tmp_path, f"broker_url: redis://127.0.0.1:{redis_with_password.port}/0\n")
    with pytest.raises(StackError) as info:
        LocalStack(load_settings(config, {})).start_redis()
    assert str(info.value) == (
        f"Redis at redis://127.0.0.1:{redis_with_password.port}/0: authentication failed "
        "(Authentication required.); its port is taken by another server"
    )


@pytest.mark.parametrize(
    ("section", "flags", "message"),
    [
        (
            "web:\n  listen: 0.0.0.0:{port}\n",
            (),
            "refusing to serve on 0.0.0.0:{port} without authentication: web.listen is "
            "outside loopback and web.authenticators is empty; add an authenticator, listen "
            "on 127.0.0.1, or set web.allow_unauthenticated: true (admin verbs stay refused)",
        ),
        (
            "flower:\n  listen: 0.0.0.0:{port}\n",
            ("--flower",),
            "refusing to start Flower on 0.0.0.0:{port} without a login: flower.listen is "
            "outside loopback and flower.basic_auth_file (user:password lines) is not set",
        ),
    ],
)
def test_stack_up_refuses_an_open_listener_before_anything_starts(
    tmp_path: Path, section: str, flags: tuple[str, ...], message: str
) -> None:
    port = process.free_port()
    config = _config(tmp_path, section.format(port=port))
    started = time.monotonic()
    done = run_sluice("--config", str(config), "stack", "up", *flags, cwd=tmp_path)
    print(f"stack up refused in {time.monotonic() - started:.2f}s")
    assert done.returncode == 1
    assert done.stderr.strip() == f"Error: {message.format(port=port)}", done.stderr
    assert not (tmp_path / "state" / "run" / "stack.json").exists()  # nothing started


def _status(url: str, login: str | None = None) -> int:
    request = urllib.request.Request(url)
    if login is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_stacks_flower_outside_loopback_asks_for_its_login(
    redis_with_password: RedisServer, tmp_path: Path
) -> None:
    logins = tmp_path / "flower.auth"
    logins.write_text("ops:a long flower password\n")
    port = process.free_port()
    settings = FlowerSettings(listen=f"0.0.0.0:{port}", basic_auth_file=logins)
    env = {k: v for k, v in clean_env().items() if not k.startswith("FLOWER_")}
    env["SLUICE_BROKER_URL"] = redis_with_password.url
    env["SLUICE_STATE_DIR"] = str(tmp_path / "state")
    # an operator's FLOWER_* variables never open the stack's Flower
    env["FLOWER_UNAUTHENTICATED_API"] = "true"
    log = tmp_path / "flower.log"
    started = flower.start(settings, env, log, PROJECT_ROOT)
    try:
        assert started.generated_login is None  # the configured one
        assert started.address == f"http://0.0.0.0:{port}"
        api = f"http://127.0.0.1:{port}/api/workers"
        assert _status(api) == 401
        assert _status(f"http://127.0.0.1:{port}/") == 401
        assert _status(api, "ops:wrong") == 401
        assert _status(api, "ops:a long flower password") == 200
        assert "flower password" not in _cmdline(started.pid)  # from its environment
    finally:
        process.stop_group(started.pid)
    text = log.read_text()
    assert f"redis://:**@127.0.0.1:{redis_with_password.port}/0" in text  # Flower's "Broker:"
    assert redis_with_password.password not in text
