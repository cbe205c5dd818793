"""Shared start-up of the helper scripts: settings from argv[1], a connected client."""

from __future__ import annotations

import json
import sys

from scheduler.settings.sections import ZooKeeperSettings
from scheduler.zk.client import ZooKeeperClient, connect


def client_from_argv() -> ZooKeeperClient:
    config = json.loads(sys.argv[1])
    settings = ZooKeeperSettings(
        hosts=config["hosts"],
        root=config["root"],
        session_timeout=config["timeout"],
        call_timeout=max(config["timeout"], 5.0),
    )
    return connect(settings)


def say(line: str) -> None:
    print(line, flush=True)
