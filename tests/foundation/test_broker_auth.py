"""A broker that asks for a password: real Redis, a real worker, the real CLI.

With the password (from ``SLUICE_BROKER_PASSWORD_FILE``, as a container
would give it) a worker serves and ``sluice roundtrip`` goes through;
without it, or with a wrong one, the CLI says at once that authentication
failed and at which broker, and a worker's log says so too. The password
appears in no output and no log (docs/reliability.md, row 20b).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from cli.stack.redis import RedisServer, probe
from scheduler.nudge import dispatch, task_names
from scheduler.settings.exposure import BrokerError
from scheduler.settings.load import load_settings
from tests.fixtures.cli import run_sluice
from tests.fixtures.services import ZooKeeperTarget
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import ServiceEnvironment, WorkerFactory


def _password_file(directory: Path, password: str) -> Path:
    path = directory / f"broker-{secrets.token_hex(4)}.password"
    path.write_text(password + "\n")
    path.chmod(0o600)
    return path


def _environment(
    zookeeper: ZooKeeperTarget, redis: RedisServer, state_dir: Path, password: str | None
) -> ServiceEnvironment:
    """The URL without its password; the password, if any, from a file."""
    extra = {"SLUICE_BROKER_URL": f"redis://127.0.0.1:{redis.port}/0"}
    if password is not None:
        extra["SLUICE_BROKER_PASSWORD_FILE"] = str(_password_file(state_dir.parent, password))
    return ServiceEnvironment(zookeeper, redis.url, state_dir, extra=extra)


def _roundtrip(environment: ServiceEnvironment) -> subprocess.CompletedProcess[str]:
    env, cwd = environment.env(), environment.state_dir
    return run_sluice("roundtrip", "--timeout", "30", env=env, cwd=cwd)


def _logs(state_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in (state_dir / "logs").glob("*.log"))


def test_with_the_password_a_worker_serves_and_the_cli_goes_through(
    zookeeper: ZooKeeperTarget, redis_with_password: RedisServer, state_dir: Path
) -> None:
    redis = redis_with_password
    environment = _environment(zookeeper, redis, state_dir, redis.password)
    factory = WorkerFactory(environment)
    try:
        factory.start(["maintenance"])
        done = _roundtrip(environment)
    finally:
        factory.stop_all()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "round trip OK" in done.stdout
    assert f"via redis://:**@127.0.0.1:{redis.port}/0" in done.stdout
    logs = _logs(state_dir)
    assert f"redis://:**@127.0.0.1:{redis.port}/0" in logs  # Celery's banner, redacted
    assert redis.password not in done.stdout + done.stderr + logs


@pytest.mark.parametrize("password", [None, "not-the-password"])
def test_without_the_password_the_cli_says_authentication_failed_and_where(
    zookeeper: ZooKeeperTarget,
    redis_with_password: RedisServer,
    state_dir: Path,
    password: str | None,
) -> None:
    redis = redis_with_password
    environment = _environment(zookeeper, redis, state_dir, password)
    started = time.monotonic()
    done = _roundtrip(environment)
    print(f"sluice roundtrip refused in {time.monotonic() - started:.2f}s")
    assert done.returncode == 1, done.stdout + done.stderr
    auth = ":**@" if password else ""
    reason = "invalid username-password pair" if password else "Authentication required"
    error = done.stderr.strip().splitlines()[-1]
    print(error)
    broker = f"redis://{auth}127.0.0.1:{redis.port}/0"
    assert error.startswith(f"Error: broker {broker}: authentication failed ({reason}"), error
    assert redis.password not in done.stdout + done.stderr
    if password:
        assert password not in done.stdout + done.stderr


def test_a_nudge_without_the_password_is_refused_at_once(
    redis_with_password: RedisServer, tmp_path: Path
) -> None:
    # `sluice enqueue` and friends push their nudge over a plain socket first
    # (scheduler/nudge/fresh_socket.py): a refused password is an error, not a fallback
    redis = redis_with_password
    config = tmp_path / "sluice.yaml"
    config.write_text(f"broker_url: redis://127.0.0.1:{redis.port}/0\nstate_dir: s\n")
    settings = load_settings(config, {})
    with pytest.raises(BrokerError, match="authentication failed"):
        dispatch.send_quickly(task_names.SWEEP, settings=settings)
    with pytest.raises(BrokerError, match="authentication failed"):
        dispatch.check_broker(settings)
    # what /health shows of a broker that refuses the password it was given
    wrong = load_settings(
        config, {"SLUICE_BROKER_PASSWORD_FILE": str(_password_file(tmp_path, "x"))}
    )
    with pytest.raises(BrokerError) as info:
        dispatch.check_broker(wrong)
    assert str(info.value) == (
        f"broker redis://:**@127.0.0.1:{redis.port}/0: authentication failed "
        "(invalid username-password pair or user is disabled.)"
    )
    password_file = str(_password_file(tmp_path, redis.password))
    right = load_settings(config, {"SLUICE_BROKER_PASSWORD_FILE": password_file})
    dispatch.check_broker(right)
    assert probe(right.broker_url) == ""


def test_a_worker_without_the_password_says_authentication_in_its_log(
    zookeeper: ZooKeeperTarget, redis_with_password: RedisServer, state_dir: Path
) -> None:
    redis = redis_with_password
    environment = _environment(zookeeper, redis, state_dir, "wrong-password")
    factory = WorkerFactory(environment)
    try:
        started = time.monotonic()
        worker = factory.start(["maintenance"], wait=False)
        wait_until(
            lambda: "invalid username-password pair" in worker.log_text(),
            30,
            "the worker to log that the broker refused it",
        )
        print(f"worker logged the refusal {time.monotonic() - started:.2f}s after its start")
        assert os.path.exists(f"/proc/{worker.pid}")  # it keeps trying: fix the file, it joins
    finally:
        factory.stop_all()
    text = worker.log_text()
    assert f"Cannot connect to redis://:**@127.0.0.1:{redis.port}/0" in text
    assert "wrong-password" not in text and redis.password not in text
