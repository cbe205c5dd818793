"""``python -m cli``: the ``sluice`` command (the stack starts its web process so)."""

from cli import main

main()
