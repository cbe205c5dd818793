"""The forge clients never carry a credential across a redirect to another origin.

Real HTTP servers on loopback: the "forge" answers every call with a
redirect to a second server (another port: another origin), which records
what it was sent and answers as the forge would. The GitHub client's
``Authorization`` (a token, or an App's JWT) and the GitLab client's
``PRIVATE-TOKEN`` never reach the second server; a redirect within the
forge's own origin keeps them, and one to a scheme other than http(s) is
an error.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scheduler.drivers import rest
from scheduler.drivers.github.api import GitHubApi, GitHubError
from scheduler.drivers.gitlab.api import GitLabApi, GitLabError
from scheduler.settings.sections import ConnectionSettings

TOKEN = "forge-token-that-must-stay-home"
PULL = {"number": 1, "base": {"ref": "main"}, "head": {"sha": "a" * 40}}


@dataclass
class Server:
    """An HTTP server on a free loopback port; ``answer`` says what to do with a request."""

    answer: Any
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def handle_one(self) -> None:
                outer.seen.append((self.command, self.path, dict(self.headers)))
                status, headers, body = outer.answer(self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                data = json.dumps(body).encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = handle_one  # noqa: N815 (http.server's names)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    """The forge, redirecting every call to the same path on the elsewhere server."""
    elsewhere = Server(lambda path: (200, {}, PULL))
    forge = Server(lambda path: (302, {"Location": elsewhere.url + path}, {}))
    try:
        yield forge, elsewhere
    finally:
        forge.close()
        elsewhere.close()


def credentials(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower() in rest.CREDENTIALS}


def test_github_token_stays_with_its_origin(servers: tuple[Server, Server]) -> None:
    forge, elsewhere = servers
    options = {"api_url": forge.url, "api_token": TOKEN}
    api = GitHubApi(ConnectionSettings("gh", "github", "", options))
    assert api.pull("org/app", 1)["number"] == 1
    ((method, path, headers),) = forge.seen
    assert (method, credentials(headers)) == ("GET", {"authorization": f"token {TOKEN}"})
    ((method, path, headers),) = elsewhere.seen
    assert path == "/repos/org/app/pulls/1" and credentials(headers) == {}


def test_gitlab_private_token_stays_with_its_origin(servers: tuple[Server, Server]) -> None:
    forge, elsewhere = servers
    options = {"api_url": forge.url, "api_token": TOKEN}
    api = GitLabApi(ConnectionSettings("gl", "gitlab", "", options))
    assert api.merge_request("group/lib", 1)["number"] == 1
    assert credentials(forge.seen[0][2]) == {"private-token": TOKEN}
    ((_, path, headers),) = elsewhere.seen
    assert path.endswith("/merge_requests/1") and credentials(headers) == {}
    # a write urllib does not redirect (PUT): an error, and nothing reached the other server
    with pytest.raises(GitLabError) as refused:
        api.request("PUT", "/projects/1/merge_requests/1/merge", {})
    assert refused.value.status == 302 and len(elsewhere.seen) == 1


def test_a_redirect_within_the_origin_keeps_the_token() -> None:
    def answer(path: str) -> tuple[int, dict[str, str], Any]:
        if path.startswith("/repos/old/"):
            return 301, {"Location": path.replace("/repos/old/", "/repos/org/")}, {}
        return 200, {}, PULL

    forge = Server(answer)
    try:
        options = {"api_url": forge.url, "api_token": TOKEN}
        GitHubApi(ConnectionSettings("gh", "github", "", options)).pull("old/app", 1)
        assert [credentials(h)["authorization"] for _, _, h in forge.seen] == [f"token {TOKEN}"] * 2
    finally:
        forge.close()


def test_a_redirect_to_another_scheme_is_an_error() -> None:
    forge = Server(lambda path: (302, {"Location": "ftp://127.0.0.1/secret"}, {}))
    try:
        options = {"api_url": forge.url, "api_token": TOKEN}
        with pytest.raises(GitHubError) as refused:
            GitHubApi(ConnectionSettings("gh", "github", "", options)).pull("org/app", 1)
        assert refused.value.status == 302
    finally:
        forge.close()


def test_origins() -> None:
    assert rest.origin("https://API.example.com/x") == ("https", "api.example.com", 443)
    assert rest.origin("https://api.example.com:443/y") == rest.origin("https://api.example.com/")
    assert rest.origin("http://api.example.com/") != rest.origin("https://api.example.com/")
    assert rest.origin("https://api.example.com:8443/") != rest.origin("https://api.example.com/")
