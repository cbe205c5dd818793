"""sluice.yaml: the documented example, defaults, overrides and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.errors import SettingsError
from scheduler.settings import load_settings, parse_settings

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
