"""A test system with a fake forge as a connection, its webhooks sent to a real ``sluice web``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from tests.e2e.system import SluiceSystem
from tests.fixtures.fake_forge import FakeForge
from tests.web.server import WebServer, start_web


@contextlib.contextmanager
def forge_web(
    system: SluiceSystem,
    forge: FakeForge,
    *,
    driver: str,
    api_token: str,
    tenant: str,
    config: Mapping[str, str],
    project: str,
    files: Mapping[str, str],
    branch: tuple[str, Mapping[str, str]],
    options: str = "",
) -> Iterator[WebServer]:
    """Connection ``driver`` (named after it) to ``forge``, the tenant and its repositories.

    ``config`` goes to the config project, ``files`` to ``project``'s main
    branch and ``branch`` (name, files) is a topic branch off it; then the
    workers and ``sluice web`` start and the forge sends its webhooks there.
    """
    with forge:
        connection = (
            f"  {driver}:\n    driver: {driver}\n    baseurl: repos\n"
            f"    api_url: {forge.url}\n    api_token: {api_token}\n"
            f"    webhook_token: {forge.secret}\n" + options
        )
        text = system.config.read_text()
        system.config.write_text(text.replace("connections:\n", "connections:\n" + connection))
        system.tenant(tenant)
        system.repos.commit("config", "main", dict(config))
        base = system.repos.commit(project, "main", dict(files))
        system.repos.commit(project, branch[0], dict(branch[1]), base=base)
        system.repos.git(project, "checkout", "-q", "--detach")
        system.start_workers()
        system.sluice("reconfigure")
        with start_web(system, "") as web:
            forge.webhook_url = f"{web.url}/api/connection/{driver}/payload"
            yield web
