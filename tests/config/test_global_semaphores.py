"""Global semaphores in the tenant file: ``- global-semaphore:`` and a tenant's ``semaphores``."""

from __future__ import annotations

import pytest

from scheduler.config import parse_tenant_config
from scheduler.settings.sections import ConnectionSettings

CONNECTIONS = {"git": ConnectionSettings("git", "git", "/repos")}

TENANTS = """
- tenant:
    name: one
    semaphores: [deploy]
    source:
      git:
        config-projects: [config]
- global-semaphore:
    name: deploy
    max: 2
- tenant:
    name: two
    source:
      git:
        config-projects: [config]
"""


def test_a_tenant_gets_the_global_semaphores_it_lists() -> None:
    config = parse_tenant_config(TENANTS, "main.yaml", CONNECTIONS)
    assert config.errors == ()
    one, two = config.tenant("one"), config.tenant("two")
    assert one is not None and dict(one.global_semaphores) == {"deploy": 2}
    assert two is not None and dict(two.global_semaphores) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            TENANTS.replace("[deploy]", "[deplo]"),
            "main.yaml:2: tenant 'one': semaphores: 'deplo' is not a defined global-semaphore",
        ),
        (
            TENANTS + "- global-semaphore: {name: deploy}\n",
            "main.yaml:16: global-semaphore 'deploy': is defined twice",
        ),
        ("- global-semaphore: {name: x, max: 0}\n", "main.yaml:1: global-semaphore 'x': max"),
        (
            "- global-semaphore: {name: x, colour: red}\n",
            "main.yaml:1: global-semaphore 'x': colour",
        ),
    ],
)
def test_global_semaphore_errors(text: str, message: str) -> None:
    errors = parse_tenant_config(text, "main.yaml", CONNECTIONS).errors
    assert errors, "an error was expected"
    assert str(errors[0]).startswith(message), str(errors[0])
