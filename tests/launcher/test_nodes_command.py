"""``sluice nodes pubkey``: the line an operator installs on static hosts."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.cli import run_sluice
from workers.nodekey import public_key


def test_pubkey_prints_the_node_key_made_when_missing(tmp_path: Path) -> None:
    (tmp_path / "sluice.yaml").write_text("nodes:\n  ssh_key: keys/nodes\n")
    env_args = ("--config", str(tmp_path / "sluice.yaml"), "nodes", "pubkey")
    first = run_sluice(*env_args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    key = tmp_path / "keys" / "nodes"
    assert first.stdout.strip() == public_key(key)
    assert first.stdout.startswith("ssh-ed25519 ")
    again = run_sluice(*env_args, cwd=tmp_path)
    assert again.stdout == first.stdout, "the same pair, not a new one"
