"""The ``sluice`` command loads its commands lazily; its help lists them all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from cli.main import COMMANDS, cli


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_help_is_the_commands_own(name: str) -> None:
    ctx = click.Context(cli)
    command = cli.get_command(ctx, name)
    assert command is not None and command.name == name
    own = (command.help or "").strip().splitlines()[0]
    assert COMMANDS[name][2] == own


def test_help_imports_no_heavy_module() -> None:
    code = (
        "import sys\n"
        "from cli.main import cli\n"
        "try:\n"
        "    cli(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('sqlalchemy', 'celery', 'kazoo', 'alembic') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "Commands:" in done.stdout and "enqueue" in done.stdout
    assert "HEAVY []" in done.stdout, done.stdout


def test_an_unknown_command_is_a_usage_error() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "sluice"), "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "No such command 'nope'" in done.stderr
