"""Fixtures of the fault tests: a gate run over the end-to-end system."""

from __future__ import annotations

import pytest

from tests.chaos.gate import GateRun
from tests.e2e.system import SluiceSystem, system  # noqa: F401


@pytest.fixture
def gate_run(system: SluiceSystem) -> GateRun:  # noqa: F811
    run = GateRun(system)
    run.prepare()
    return run
