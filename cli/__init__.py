"""The ``sluice`` command line."""

from cli.main import main

__all__ = ["main"]
