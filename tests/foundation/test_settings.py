"""sluice.yaml: the documented example, defaults, overrides and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.errors import SettingsError
from scheduler.settings.load import load_settings, parse_settings

EXAMPLE = """\
zookeeper:
  hosts: 127.0.0.1:2181
  root: /sluice
  session_timeout: 10
broker_url: redis://127.0.0.1:6379/0
database_url: sqlite:///state/sluice.db
state_dir: state
tenant_config: main.yaml
connections:
  local:
    driver: git
    baseurl: repos
"""


def test_the_documented_example_works_as_written(tmp_path: Path) -> None:
    config = tmp_path / "sluice.yaml"
    config.write_text(EXAMPLE)
    settings = load_settings(config, environ={})
    assert settings.zookeeper.hosts == "127.0.0.1:2181"
    assert settings.zookeeper.root == "/sluice"
    assert settings.zookeeper.session_timeout == 10.0
    assert settings.broker_url == "redis://127.0.0.1:6379/0"
    # Relative paths resolve against the file's folder.
    assert settings.database_url == f"sqlite:///{tmp_path}/state/sluice.db"
    assert settings.state_dir == tmp_path / "state"
    assert settings.tenant_config == tmp_path / "main.yaml"
    assert settings.connections["local"].driver == "git"
    assert settings.connections["local"].baseurl == str(tmp_path / "repos")
    assert settings.source == config


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    settings = load_settings(environ={})
    assert settings.state_dir == tmp_path / ".sluice"
    assert settings.database_url == f"sqlite:///{tmp_path}/.sluice/sluice.db"
    assert settings.zookeeper.root == "/sluice"
    assert settings.source is None


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "sluice.yaml"
    config.write_text(EXAMPLE)
    settings = load_settings(
        config,
        environ={"SLUICE_ZK_HOSTS": "10.0.0.1:2181", "SLUICE_BROKER_URL": "redis://x:1/2"},
    )
    assert settings.zookeeper.hosts == "10.0.0.1:2181"
    assert settings.broker_url == "redis://x:1/2"


def test_remote_baseurls_are_kept() -> None:
    text = "connections:\n  gh:\n    driver: git\n    baseurl: https://example.org/org\n"
    settings = parse_settings(text, "sluice.yaml", Path("/base"))
    assert settings.connections["gh"].baseurl == "https://example.org/org"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("zookeper:\n  hosts: x\n", "sluice.yaml:1: zookeper: unknown key"),
        (
            "zookeeper:\n  hosts: x\n  sesion_timeout: 3\n",
            "sluice.yaml:3: zookeeper.sesion_timeout: unknown key",
        ),
        (
            "zookeeper:\n  session_timeout: soon\n",
            "sluice.yaml:2: zookeeper.session_timeout: expected a number, got str",
        ),
        ("broker_url: 5\n", "sluice.yaml:1: broker_url: expected a string, got int"),
        ("zookeeper: [1]\n", "sluice.yaml:1: zookeeper: expected a mapping, got list"),
        (
            "zookeeper:\n  root: sluice\n",
            "sluice.yaml:2: zookeeper.root: must be an absolute path without a trailing '/', "
            "got 'sluice'",
        ),
        (
            "connections:\n  local:\n    driver: git\n",
            "sluice.yaml:3: connections.local.driver: a git connection needs a 'baseurl'",
        ),
        (
            "connections:\n  local:\n    driver: git\n    baseurl: r\n    colour: red\n",
            "sluice.yaml:5: connections.local.colour: unknown key",
        ),
        ("- a\n- b\n", "sluice.yaml: expected a mapping at the top level"),
        ("a: [\n", "sluice.yaml:2: invalid YAML"),
    ],
)
def test_errors_name_file_line_and_key(text: str, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        parse_settings(text, "sluice.yaml", Path("/base"))
    assert str(info.value).startswith(message)


def test_executor_section(tmp_path: Path) -> None:
    text = "executor:\n  poll_interval: 0.1\n  kill_grace: 0.5\n  share_objects: false\n"
    settings = parse_settings(text, "sluice.yaml", tmp_path)
    assert settings.executor.poll_interval == 0.1
    assert settings.executor.kill_grace == 0.5
    assert settings.executor.share_objects is False
    assert settings.executor.tail_lines == 50
    assert parse_settings("", "sluice.yaml", tmp_path).executor.poll_interval == 0.2


def test_jobs_are_sandboxed_unless_the_settings_say_otherwise(tmp_path: Path) -> None:
    assert parse_settings("", "sluice.yaml", tmp_path).executor.sandbox == "bwrap"
    text = "executor:\n  sandbox: none\n  sandbox_writable: [/srv/cache]\n"
    executor = parse_settings(text, "sluice.yaml", tmp_path).executor
    assert (executor.sandbox, executor.sandbox_writable) == ("none", (Path("/srv/cache"),))
    environ = {"SLUICE_SANDBOX_WRITABLE": f"{tmp_path}/a:{tmp_path}/b"}
    loaded = load_settings(None, environ=environ).executor.sandbox_writable
    assert loaded == (tmp_path / "a", tmp_path / "b")


def test_workspaces_live_under_the_state_dir_unless_build_dir_says_otherwise(
    tmp_path: Path,
) -> None:
    assert parse_settings("", "sluice.yaml", tmp_path).executor.build_dir is None
    text = "executor:\n  build_dir: /dev/shm/sluice-builds\n"
    executor = parse_settings(text, "sluice.yaml", tmp_path).executor
    assert executor.build_dir == Path("/dev/shm/sluice-builds")
    environ = {"SLUICE_BUILD_DIR": str(tmp_path / "builds")}
    assert load_settings(None, environ=environ).executor.build_dir == tmp_path / "builds"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("executor:\n  pol_interval: 1\n", "sluice.yaml:2: executor.pol_interval: unknown key"),
        (
            "executor:\n  poll_interval: 1\n  kill_grace: 1.5\n",
            "sluice.yaml:3: executor.kill_grace: poll_interval + kill_grace must stay below 2",
        ),
        ("executor:\n  tail_lines: -1\n", "sluice.yaml:2: executor.tail_lines: must be at least 0"),
        (
            "executor:\n  build_dir: builds\n",
            "sluice.yaml:2: executor.build_dir: expected an absolute path, got 'builds'",
        ),
        (
            "executor:\n  sandbox_writable: [cache]\n",
            "sluice.yaml:2: executor.sandbox_writable: expected a list of absolute paths",
        ),
        (
            "executor:\n  share_objects: 1\n",
            "sluice.yaml:2: executor.share_objects: expected true/false, got int",
        ),
    ],
)
def test_executor_section_errors(text: str, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        parse_settings(text, "sluice.yaml", Path("/base"))
    assert str(info.value).startswith(message)


def test_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="config file not found"):
        load_settings(tmp_path / "nope.yaml", environ={})


def test_log_format() -> None:
    assert parse_settings("log_format: json\n", "sluice.yaml", Path("/b")).log_format == "json"
    assert parse_settings("", "sluice.yaml", Path("/b")).log_format == "text"
    with pytest.raises(SettingsError, match="log_format: expected one of text, json"):
        parse_settings("log_format: xml\n", "sluice.yaml", Path("/b"))


def test_keystore_password_inline_from_a_file_or_none(tmp_path: Path) -> None:
    assert parse_settings("", "sluice.yaml", tmp_path).keystore.password == ""
    inline = parse_settings("keystore:\n  password: s3cret\n", "sluice.yaml", tmp_path)
    assert inline.keystore.password == "s3cret"
    assert inline.keystore.require_password() == "s3cret"
    # relative to the settings file, its first line stripped
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "pw").write_text("  from-a-file \nignored\n")
    text = "keystore:\n  password_file: keys/pw\n"
    from_file = parse_settings(text, "sluice.yaml", tmp_path).keystore
    assert (from_file.password, from_file.password_file) == ("from-a-file", tmp_path / "keys/pw")
    env = {"SLUICE_KEYSTORE_PASSWORD_FILE": str(tmp_path / "keys" / "pw")}
    config = tmp_path / "sluice.yaml"
    config.write_text("")
    assert load_settings(config, environ=env).keystore.password == "from-a-file"


def test_keystore_errors_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"^no keystore password: set keystore.password or "):
        parse_settings("", "sluice.yaml", tmp_path).keystore.require_password()
    missing = parse_settings("keystore:\n  password_file: nope\n", "sluice.yaml", tmp_path)
    assert missing.keystore.password == ""
    with pytest.raises(SettingsError, match=f"keystore.password_file: {tmp_path}/nope is missing"):
        missing.keystore.require_password()
    cases = {
        "keystore:\n  pasword: x\n": "sluice.yaml:2: keystore.pasword: unknown key",
        "keystore:\n  password: 5\n": "sluice.yaml:2: keystore.password: expected a string",
        "keystore:\n  password: a\n  password_file: b\n": (
            "sluice.yaml:3: keystore.password_file: give password or password_file, not both"
        ),
    }
    for text, message in cases.items():
        with pytest.raises(SettingsError) as info:
            parse_settings(text, "sluice.yaml", tmp_path)
        assert str(info.value).startswith(message)


def test_the_stack_keeps_a_keystore_password_file(tmp_path: Path) -> None:
    from cli.stack.local import LocalStack, ensure_password_file, keystore_password_file

    unset = parse_settings("state_dir: state\n", "sluice.yaml", tmp_path)
    path = keystore_password_file(unset)
    assert path == tmp_path / "state" / "keystore.password"
    assert ensure_password_file(path) is True
    first = path.read_text()
    assert len(first.strip()) >= 32 and path.stat().st_mode & 0o777 == 0o600
    assert ensure_password_file(path) is False and path.read_text() == first  # never replaced
    # what the stack starts (web, workers) reads it
    assert LocalStack(unset)._worker_env()["SLUICE_KEYSTORE_PASSWORD_FILE"] == str(path)
    configured = parse_settings("keystore:\n  password_file: pw\n", "sluice.yaml", tmp_path)
    assert keystore_password_file(configured) == tmp_path / "pw"
    inline = parse_settings("keystore:\n  password: x\n", "sluice.yaml", tmp_path)
    assert keystore_password_file(inline) is None
