"""Register as an executor component, report, then run until killed (argv: config)."""

from __future__ import annotations

import sys

from scheduler.stores import components
from tests.zk.scripts._common import client_from_argv, say

client = client_from_argv()
component = components.register(client, "executor", version="test", handles=("executor",))
say(f"registered {component.path}")
sys.stdin.readline()
