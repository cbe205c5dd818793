from __future__ import annotations

import pytest

from scheduler.config import parse_tenant_config
from scheduler.config.parser import CONFIG_TYPES
from tests.config.builders import CONNECTIONS, dedent


def test_tenant_with_options_and_groups() -> None:
    text = dedent(
        """
        - tenant:
            name: example
            default-parent: base-minimal
            max-job-timeout: 7200
            source:
              github:
                untrusted-projects:
                  - app
                  - lib:
                      include: [job, semaphore]
                      shadow: config
                  - exclude: [project]
                    projects: [one, two]
              git:
                config-projects:
                  - config:
                      load-branch: main
        """
    )
    config = parse_tenant_config(text, "main.yaml", CONNECTIONS)
    assert config.errors == ()
    tenant = config.tenants[0]
    assert tenant.default_parent == "base-minimal"
    assert tenant.max_job_timeout == 7200
    assert [p.name for p in tenant.projects] == ["config", "app", "lib", "one", "two"]
    config_project = tenant.projects[0]
    assert config_project.trusted and config_project.load_branch == "main"
    assert config_project.connection == "git"
    lib = tenant.project("lib")
    assert lib is not None
    assert lib.include == ("job", "semaphore") and lib.shadow == ("config",)
    one = tenant.project("one")
    assert one is not None
    assert "project" not in one.include and "job" in one.include
    app = tenant.project("app")
    assert app is not None and app.include == CONFIG_TYPES and not app.trusted


def test_good_tenant_survives_a_broken_one() -> None:
    text = dedent(
        """
        - tenant:
            name: good
            source:
              git:
                untrusted-projects: [app]
        - tenant:
            name: bad
            source:
              nowhere:
                untrusted-projects: [app]
        """
    )
    config = parse_tenant_config(text, "main.yaml", CONNECTIONS)
    assert [t.name for t in config.tenants] == ["good"]
    assert [str(e) for e in config.errors] == [
        "main.yaml:9: tenant 'bad': source: 'nowhere' is not a known connection "
        "(known: git, github, gitlab, sql, timer)"
    ]


TENANT_ERRORS = [
    (
        "- tenant:\n    name: t\n    source:\n      timer:\n        untrusted-projects: [a]\n",
        "main.yaml:4: tenant 't': source: connection 'timer' (timer) cannot be a source",
    ),
    (
        "- tenant:\n    name: t\n    source:\n      git:\n        untrusted-projects: [../etc]\n",
        "main.yaml:5: tenant 't': project name '../etc' must not contain '.', '..' "
        "or empty segments",
    ),
    (
        "- tenant:\n    name: t\n    source:\n      git:\n        untrusted-projects: [a, a]\n",
        "main.yaml:3: tenant 't': source: project 'a' is listed twice",
    ),
    (
        "- tenant:\n    name: t\n    colour: red\n    source: {}\n",
        "main.yaml:3: tenant 't': colour: unknown key",
    ),
    ("- tenant:\n    name: t\n", "main.yaml:2: tenant 't': 'source' is required"),
    (
        "- tenant:\n    name: t\n    source:\n      git:\n        untrusted-projects:\n"
        "          - a:\n              include: [jobs]\n",
        "main.yaml:7: tenant 't': project 'a': include: 'jobs' is not a configuration object type",
    ),
    (
        "- tenant:\n    name: t\n    source:\n      git:\n        trusted-projects: [a]\n",
        "main.yaml:5: tenant 't': source.git.trusted-projects: unknown key",
    ),
    (
        "- admin-rule:\n    name: x\n",
        "main.yaml:1: expected '- tenant:' or '- global-semaphore:' "
        "(other types are not supported)",
    ),
    ("tenant: x\n", "main.yaml:1: expected a list of tenants"),
    (
        "- tenant:\n    name: t\n    source:\n      git: {untrusted-projects: [a]}\n"
        "- tenant:\n    name: t\n    source:\n      git: {untrusted-projects: [a]}\n",
        "main.yaml:5: tenant 't': is defined twice",
    ),
]


@pytest.mark.parametrize(("text", "message"), TENANT_ERRORS)
def test_tenant_errors(text: str, message: str) -> None:
    config = parse_tenant_config(text, "main.yaml", CONNECTIONS)
    assert [str(e) for e in config.errors] == [message]
