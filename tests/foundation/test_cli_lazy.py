"""The ``sluice`` command loads its commands lazily; its help lists them all."""

from __future__ import annotations

import ast
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


def _heavy_after(code: str, heavy: tuple[str, ...]) -> tuple[list[str], str]:
    """Which of ``heavy`` a fresh Python has imported after running ``code``; and its output."""
    probe = f"{code}\nimport sys\nprint('HEAVY', [m for m in {heavy!r} if m in sys.modules])\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("HEAVY "))
    return ast.literal_eval(line.removeprefix("HEAVY ")), done.stdout


def test_help_imports_no_heavy_module() -> None:
    code = "from cli.main import cli\ntry:\n    cli(['--help'])\nexcept SystemExit:\n    pass"
    heavy, output = _heavy_after(code, ("sqlalchemy", "celery", "kazoo", "alembic"))
    assert "Commands:" in output and "enqueue" in output
    assert heavy == []


def test_an_unknown_command_is_a_usage_error() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "sluice"), "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "No such command 'nope'" in done.stderr


def test_management_commands_load_without_celery_or_sqlalchemy() -> None:
    # `sluice enqueue` nudges a Redis broker without Celery (scheduler/nudge/fresh_socket.py)
    heavy, _ = _heavy_after(
        "import cli.commands.manage", ("sqlalchemy", "celery", "kombu", "redis", "alembic")
    )
    assert heavy == []
