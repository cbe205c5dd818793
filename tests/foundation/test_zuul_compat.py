"""docs/zuul-compat.md tells the truth: one row per Zuul name, each status checked against Sluice.

* Configuration keys: each key is put in a small document and given to
  Sluice's own parsers (``parse_config_text``, ``parse_tenant_config``). A
  key marked ``supported`` or ``differs`` must parse without an error; one
  marked ``not supported`` must be refused with an error that names it.
* REST API routes: a route marked ``supported`` or ``differs`` must be served
  by the web app (its OpenAPI document, or the webhook route beside it), one
  marked ``not supported`` must not be.
* zuul-client verbs: read from the installed client's argparse. Each verb is
  run (in this process, the real ``zuul-client`` code) against a small HTTP
  server that records what it asks; the routes it asked must be the verb's
  row's routes, and a verb marked ``supported`` or ``differs`` needs all of
  them served, one marked ``not supported`` lacks one.

Zuul's names come from ``tests/foundation/zuul_reference.py``. When a
branch adds a key or a route, the test names the row to flip: a status is
one word of the row (``not supported`` -> ``supported``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from zuulclient.cmd import ZuulClient  # type: ignore[import-untyped]

from scheduler.config.errors import ConfigError
from scheduler.config.parser import parse_config_text
from scheduler.config.schema import Where
from scheduler.config.tenant import parse_tenant_config
from scheduler.settings.sections import ConnectionSettings, Settings, ZooKeeperSettings
from tests.foundation.zuul_reference import CONFIG_KEYS, ROUTES, VERB_ARGS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "zuul-compat.md"
STATUSES = ("supported", "differs", "not supported")
SERVED = ("supported", "differs")


@dataclass(frozen=True)
class Row:
    """One row of a table: its name cells, its status, its notes and where it is."""

    names: tuple[str, ...]
    status: str
    notes: str
    line: int

    def __str__(self) -> str:
        return f"docs/zuul-compat.md:{self.line}: {' '.join(self.names)} ({self.status})"


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _code(cell: str) -> str:
    found = re.fullmatch(r"`([^`]+)`", cell)
    assert found, f"expected a `name` cell, got {cell!r}"
    return found.group(1)


def read_tables(text: str) -> dict[str, list[Row]]:
    """The page's tables by the first cell of their header (``object``, ``route``, ``verb``)."""
    tables: dict[str, list[Row]] = {}
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if not lines[index].startswith("|") or index + 1 >= len(lines):
            index += 1
            continue
        header = _cells(lines[index])
        index += 2  # the header and its rule
        rows = tables.setdefault(header[0], [])
        while index < len(lines) and lines[index].startswith("|"):
            cells = _cells(lines[index])
            assert len(cells) == len(header), f"line {index + 1}: {len(cells)} cells"
            row = dict(zip(header, cells, strict=True))
            names = tuple(_code(row[h]) for h in header if h not in ("status", "notes", "routes"))
            if "routes" in row:
                names += tuple(re.findall(r"`([^`]+)`", row["routes"]))
            rows.append(Row(names, row["status"], row["notes"], index + 1))
            index += 1
    return tables


@pytest.fixture(scope="module")
def tables() -> dict[str, list[Row]]:
    return read_tables(DOC.read_text())


def test_each_table_is_well_formed(tables: dict[str, list[Row]]) -> None:
    assert set(tables) >= {"object", "route", "verb"}
    for rows in (tables["object"], tables["route"], tables["verb"]):
        assert rows
        for row in rows:
            assert row.status in STATUSES, f"{row}: status must be one of {STATUSES}"
            # a `not supported` row without notes: Sluice does not implement it
            if row.status == "differs":
                assert row.notes, f"{row}: say how it differs"


def _once(found: list[Any], wanted: list[Any], what: str) -> None:
    counts = Counter(found)
    twice = sorted(str(name) for name, n in counts.items() if n > 1)
    missing = sorted(str(name) for name in set(wanted) - set(counts))
    extra = sorted(str(name) for name in set(counts) - set(wanted))
    assert not (twice or missing or extra), (
        f"{what}: twice {twice}, no row {missing}, not Zuul's {extra}"
    )


# -- configuration keys -------------------------------------------------------

CONNECTIONS = {
    "git": ConnectionSettings("git", "git", "/srv/git"),
    "github": ConnectionSettings("github", "github"),
    "timer": ConnectionSettings("timer", "timer"),
}
DRIVERS = {name: conn.driver for name, conn in CONNECTIONS.items()}
# the least of each object that parses, to which the probed key is added
BASES: dict[str, dict[str, Any]] = {
    "pipeline": {"name": "probe", "manager": "dependent"},
    "job": {"name": "probe"},
    "project": {"name": "app"},
    "project-template": {"name": "probe"},
    "nodeset": {"name": "probe", "nodes": []},
    "secret": {"name": "probe", "data": {}},
    "semaphore": {"name": "probe"},
    "queue": {"name": "probe"},
    "pragma": {},
    "global-semaphore": {"name": "probe", "max": 1},
    "tenant": {
        "name": "probe",
        "source": {"git": {"config-projects": ["config"], "untrusted-projects": ["app"]}},
    },
}
TENANT_FILE = ("main.yaml", "global-semaphore", "tenant", "tenant source", "tenant project")
# Values where an empty one would not tell: a project stanza reads any key
# it does not know as a pipeline's name, so its keys get values of their type.
SAMPLES: dict[tuple[str, str], Any] = {
    ("project", "description"): "probe",
    ("project", "branches"): ["main"],
    ("project", "templates"): ["probe"],
    ("project", "queue"): "probe",
    ("project", "vars"): {"probe": 1},
    ("project", "default-branch"): "main",
    ("project", "merge-mode"): "merge",
    ("project-template", "description"): "probe",
    ("project-template", "queue"): "probe",
    ("project-template", "vars"): {"probe": 1},
    ("secret", "oidc"): {},
}


def _with_key(obj: str, key: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(json.dumps(BASES.get(obj, {"name": "probe"})))
    value = SAMPLES.get((obj, key))
    if key.startswith("<pipeline>"):
        _, _, inner = key.partition(".")
        body["check"] = {inner: value} if inner else {"jobs": []}
    elif "." in key:
        outer, _, inner = key.partition(".")
        body[outer] = [{"name": "probe", inner: value}]
    elif value is not None or key not in body:
        body[key] = value
    return body


def _tenant_document(obj: str, key: str) -> list[Any]:
    tenant = _with_key("tenant", "name")
    git = tenant["source"]["git"]
    if obj == "main.yaml":
        return [{key: tenant if key == "tenant" else {"name": "probe"}}]
    if obj == "global-semaphore":
        return [{"global-semaphore": _with_key(obj, key)}]
    if obj == "tenant":
        return [{"tenant": _with_key(obj, key)}]
    if obj == "tenant source":
        git[key] = git.get(key)
    elif key == "projects":
        git["untrusted-projects"] = [{"projects": ["app"]}]
    else:
        git["untrusted-projects"] = [{"app": {key: None}}]
    return [{"tenant": tenant}]


def parse_errors(obj: str, key: str) -> tuple[ConfigError, ...]:
    """What Sluice's parser says of a document holding ``key`` of ``obj``."""
    if obj in TENANT_FILE:
        text = yaml.safe_dump(_tenant_document(obj, key), sort_keys=False)
        return parse_tenant_config(text, "main.yaml", CONNECTIONS).errors
    if obj == "config file":
        document = [{key: json.loads(json.dumps(BASES.get(key, {"name": "probe"})))}]
    else:
        document = [{obj: _with_key(obj, key)}]
    text = yaml.safe_dump(document, sort_keys=False)
    _, errors = parse_config_text(
        text, Where("zuul.yaml", "config", "main"), trusted=True, drivers=DRIVERS
    )
    return tuple(errors)


def accepted(obj: str, key: str) -> bool:
    """True: parsed without an error; False: refused by an error naming the key."""
    errors = parse_errors(obj, key)
    if not errors:
        return True
    if obj in ("config file", "main.yaml"):  # the document holds that object alone
        return False
    # the key, or its object when the whole object type is refused (pragma)
    names = (key.rpartition(".")[2].replace("<pipeline>", "check"), f"{obj}:")
    assert any(name in str(e) for e in errors for name in names), (
        f"{obj} {key}: the probe failed for another reason: {[str(e) for e in errors]}"
    )
    return False


def test_every_zuul_key_has_one_row(tables: dict[str, list[Row]]) -> None:
    wanted = [(obj, key) for obj, keys in CONFIG_KEYS.items() for key in keys]
    _once([row.names for row in tables["object"]], wanted, "configuration keys")


def test_each_key_is_as_its_row_says(tables: dict[str, list[Row]]) -> None:
    wrong = []
    for row in tables["object"]:
        obj, key = row.names
        if accepted(obj, key) != (row.status in SERVED):
            does = "accepts" if row.status == "not supported" else "refuses"
            wrong.append(f"{row}: Sluice's parser {does} it")
    assert not wrong, "rows to update:\n" + "\n".join(wrong)


def test_the_probe_refuses_what_no_one_knows() -> None:
    """The probe tells a refused key: an unknown one is refused everywhere."""
    for obj in CONFIG_KEYS:
        if obj not in ("config file", "main.yaml", "project", "project-template"):
            assert not accepted(obj, "no such key"), obj
    assert not accepted("config file", "no-such-type")
    assert not accepted("main.yaml", "no-such-type")
    assert not accepted("project", "<pipeline>.no such key")


# -- REST API routes ----------------------------------------------------------


def _shape(route: str) -> tuple[str, str]:
    """(method, path with every parameter as {}) for comparing Zuul's routes and Sluice's."""
    method, _, path = route.partition(" ")
    return method, re.sub(r"{[^}]*}", "{}", path)


def served_routes() -> set[tuple[str, str]]:
    """What the web app serves: its OpenAPI document, and the routes beside the API table."""
    import web.app  # registers every endpoint on the API table
    from web.rest import API

    served = set()
    document = API.openapi("probe", "0")
    for path, operations in document["paths"].items():
        served |= {_shape(f"{method.upper()} {path}") for method in operations}
    settings = Settings(
        ZooKeeperSettings(), "redis://unused", "sqlite://", Path("/nonexistent"),
        Path("/nonexistent/main.yaml"), {},
    )  # fmt: skip
    for route in web.app.create_app(settings).routes:
        path = getattr(route, "path", "")
        for method in getattr(route, "methods", None) or ():
            if path.startswith("/api/") and method != "HEAD":
                served.add(_shape(f"{method} {path}"))
    return served


def test_every_zuul_route_has_one_row(tables: dict[str, list[Row]]) -> None:
    _once([row.names[0] for row in tables["route"]], list(ROUTES), "routes")


def test_each_route_is_as_its_row_says(tables: dict[str, list[Row]]) -> None:
    served = served_routes()
    wrong = []
    for row in tables["route"]:
        if (_shape(row.names[0]) in served) != (row.status in SERVED):
            does = "serves" if row.status == "not supported" else "does not serve"
            wrong.append(f"{row}: the web app {does} it")
    assert not wrong, "rows to update:\n" + "\n".join(wrong)


# -- zuul-client verbs ---------------------------------------------------------


def client_verbs() -> list[str]:
    """The verbs of the installed zuul-client, from its own argparse."""
    parser = ZuulClient().createParser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(commands.choices)


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.command, self.path.partition("?")[0]))
        body = json.dumps({"info": {}} if self.path.endswith("/info") else []).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def recorder() -> Iterator[str]:
    with ThreadingHTTPServer(("127.0.0.1", 0), _Recorder) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        host, port = server.server_address[:2]
        try:
            yield f"http://{host!s}:{port}"
        finally:
            server.shutdown()


def requests_of(verb: str, url: str, infile: Path) -> set[str]:
    """The routes (Zuul's, from the reference) the real zuul-client asks for ``verb``."""
    args = ["--zuul-url", url, "--auth-token", "probe", verb, "--tenant", "demo"]
    args += VERB_ARGS[verb]
    if verb == "encrypt":
        args += ["--infile", str(infile)]
    _Recorder.seen = []
    # the recorder's answers are empty, so a verb may fail after it asked: asking counts
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        contextlib.suppress(Exception),
    ):
        ZuulClient()._main(args)
    found = set()
    for method, path in _Recorder.seen:
        matches = [r for r in ROUTES if _matches(r, method, path)]
        assert matches, f"{verb}: {method} {path} is no route of the reference"
        found.add(matches[0])
    found.discard("GET /api/info")  # every verb reads the capabilities first
    return found


def _matches(route: str, method: str, path: str) -> bool:
    wanted, _, template = route.partition(" ")
    pattern = "".join(
        "[^/]+" if part.startswith("{") else re.escape(part)
        for part in re.split(r"({[^}]*})", template)
    )
    return wanted == method and re.fullmatch(pattern, path) is not None


def test_every_verb_has_one_row(tables: dict[str, list[Row]]) -> None:
    verbs = client_verbs()
    assert set(VERB_ARGS) == set(verbs), "zuul-client's verbs changed: update VERB_ARGS"
    _once([row.names[0] for row in tables["verb"]], verbs, "zuul-client verbs")


def test_each_verb_is_as_its_row_says(
    tables: dict[str, list[Row]], recorder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_PROXY", "no_proxy"):  # the client goes straight to the recorder
        monkeypatch.setenv(name, "127.0.0.1")
    infile = tmp_path / "secret.txt"
    infile.write_text("probe")
    served = served_routes()
    routes = {row.names[0]: row.status for row in tables["route"]}
    wrong = []
    for row in tables["verb"]:
        verb, listed = row.names[0], set(row.names[1:])
        asked = requests_of(verb, recorder, infile)
        if listed != asked:
            wrong.append(f"{row}: zuul-client asks {sorted(asked)}")
            continue
        missing = sorted(r for r in asked if _shape(r) not in served or routes.get(r) not in SERVED)
        if bool(missing) != (row.status == "not supported"):
            why = f"{missing} not served" if missing else "its routes are all served"
            wrong.append(f"{row}: {why}")
    assert not wrong, "rows to update:\n" + "\n".join(wrong)
