"""A GitHub connection's options as sluice.yaml gives them."""

from __future__ import annotations

from pathlib import Path

from scheduler.settings.load import parse_settings

CONFIG = """
connections:
  github:
    driver: github
    app_id: 7
    app_key: {key}
"""


def test_a_relative_app_key_is_beside_sluice_yaml(tmp_path: Path) -> None:
    settings = parse_settings(CONFIG.format(key="keys/app.pem"), "sluice.yaml", tmp_path)
    assert settings.connections["github"].options["app_key"] == str(tmp_path / "keys/app.pem")
    absolute = parse_settings(CONFIG.format(key="/etc/sluice/app.pem"), "sluice.yaml", tmp_path)
    assert absolute.connections["github"].options["app_key"] == "/etc/sluice/app.pem"
