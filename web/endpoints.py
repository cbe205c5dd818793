"""One table of endpoints: the routes, their parameter checks and the OpenAPI document.

Every endpoint of the REST API is declared once, with :meth:`Api.get` /
:meth:`Api.post` / :meth:`Api.put` / :meth:`Api.delete`: its path, its query and body
parameters (:class:`Param`), whether it needs an admin token, and a summary.
From that one declaration come the Starlette route, the checks every
request passes before the handler runs (a wrong parameter is a 400 naming
it; nothing unchecked reaches ZooKeeper or SQL), and the entry in
``/api/openapi.json``. Handlers are plain functions (they call ZooKeeper
and SQL, which block): they run in Starlette's thread pool.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from scheduler.errors import SluiceError
from web.auth import ALL
from web.bodies import parse_json, read_body
from web.errors import ApiError, error_response, status_of

log = logging.getLogger(__name__)

# Names that become parts of ZooKeeper paths or SQL filters.
NAME = r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,199}"
PROJECT = r"[A-Za-z0-9][A-Za-z0-9._@+/-]{0,254}"
UUID = r"[0-9a-fA-F-]{8,64}"
TEXT = r"[^\x00-\x1f]{1,1000}"
MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class Param:
    """A query, path or body parameter: its type and the pattern a string must match."""

    name: str
    kind: type = str  # str, int or bool (query/path); also list for a body
    required: bool = False
    pattern: str = TEXT
    help: str = ""
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()

    def parse(self, raw: Any, where: str) -> Any:
        """The checked value of ``raw`` (a string from a URL, or a JSON value)."""
        if self.kind is bool:
            return self._bool(raw, where)
        if self.kind is int:
            return self._int(raw, where)
        if self.kind is list:
            if not isinstance(raw, list) or not raw or len(raw) > 100:
                raise ApiError(400, f"{where} {self.name!r}: expected a list of 1 to 100 strings")
            return [self._str(v, where) for v in raw]
        return self._str(raw, where)

    def _str(self, raw: Any, where: str) -> str:
        if not isinstance(raw, str):
            raise ApiError(400, f"{where} {self.name!r}: expected a string", self.name)
        if self.choices and raw not in self.choices:
            known = ", ".join(self.choices)
            raise ApiError(400, f"{where} {self.name!r}: expected one of {known}", self.name)
        if not re.fullmatch(self.pattern, raw):
            raise ApiError(
                400, f"{where} {self.name!r}: not a valid value: {raw[:80]!r}", self.name
            )
        return raw

    def _int(self, raw: Any, where: str) -> int:
        try:
            if isinstance(raw, bool):
                raise ValueError
            value = int(raw)
        except (TypeError, ValueError):
            raise ApiError(400, f"{where} {self.name!r}: expected an integer", self.name) from None
        if self.minimum is not None and value < self.minimum:
            raise ApiError(400, f"{where} {self.name!r}: at least {self.minimum}", self.name)
        if self.maximum is not None and value > self.maximum:
            raise ApiError(400, f"{where} {self.name!r}: at most {self.maximum}", self.name)
        return value

    def _bool(self, raw: Any, where: str) -> bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).lower()
        if text in ("1", "true", "yes"):
            return True
        if text in ("0", "false", "no"):
            return False
        raise ApiError(400, f"{where} {self.name!r}: expected true or false", self.name)

    def schema(self) -> dict[str, Any]:
        if self.kind is list:
            return {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 100}
        if self.kind is int:
            found: dict[str, Any] = {"type": "integer"}
            if self.minimum is not None:
                found["minimum"] = self.minimum
            if self.maximum is not None:
                found["maximum"] = self.maximum
            return found
        if self.kind is bool:
            return {"type": "boolean"}
        if self.choices:
            return {"type": "string", "enum": list(self.choices)}
        return {"type": "string", "pattern": f"^{self.pattern}$"}


@dataclass(frozen=True)
class Call:
    """What a handler gets: the checked parameters and the request."""

    request: Request
    args: Mapping[str, Any]
    # the admin's claims when the endpoint needs a token
    claims: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.args[name]

    def get(self, name: str, default: Any = None) -> Any:
        value = self.args.get(name)
        return default if value is None else value


Handler = Callable[[Call], Any]
# Checks the token of a request: the claims, or ApiError 401/403. Its
# arguments: the request, the tenant it acts on or reads (a raw path value,
# unchecked; ALL: every tenant; None: any valid token will do), and whether
# it is an admin verb.
Authorizer = Callable[[Request, str | None, bool], Mapping[str, Any]]


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    handler: Handler
    summary: str
    path_params: tuple[Param, ...] = ()
    query: tuple[Param, ...] = ()
    body: tuple[Param, ...] = ()
    admin: bool = False
    # answered without a token even when reads are protected (capabilities)
    public: bool = False
    # with protect_reads, any valid token reads it and the handler shows only the
    # tenants the token may read (the tenant list); otherwise an endpoint outside
    # /api/tenant/<t>/ needs a token for every tenant ("*")
    listing: bool = False
    # needs a valid token even when reads are open (what may its bearer do?)
    token: bool = False
    status: int = 200
    # what a success answers (the OpenAPI document says it)
    media_type: str = "application/json"

    def scope(self, request: Request) -> str | None:
        """The tenant a token must name to call this endpoint (see :data:`Authorizer`)."""
        if any(p.name == "tenant" for p in self.path_params):
            return str(request.path_params.get("tenant", ""))
        return None if self.listing else ALL

    @property
    def operation_id(self) -> str:
        return self.handler.__name__


@dataclass
class Api:
    """The endpoint table; :meth:`routes` makes the Starlette routes."""

    endpoints: list[Endpoint] = field(default_factory=list)

    def _add(self, method: str, path: str, **options: Any) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            summary = (handler.__doc__ or handler.__name__).strip().splitlines()[0]
            names = re.findall(r"{(\w+)(?::path)?}", path)
            given = {p.name: p for p in options.pop("path_params", ())}
            params = tuple(given.get(n, Param(n, required=True, pattern=NAME)) for n in names)
            self.endpoints.append(
                Endpoint(method, path, handler, summary, path_params=params, **options)
            )
            return handler

        return register

    def get(self, path: str, **options: Any) -> Callable[[Handler], Handler]:
        return self._add("GET", path, **options)

    def post(self, path: str, **options: Any) -> Callable[[Handler], Handler]:
        return self._add("POST", path, **options)

    def put(self, path: str, **options: Any) -> Callable[[Handler], Handler]:
        return self._add("PUT", path, **options)

    def delete(self, path: str, **options: Any) -> Callable[[Handler], Handler]:
        return self._add("DELETE", path, **options)

    def routes(self, authorize: Authorizer, protect_reads: bool) -> list[Route]:
        by_path: dict[str, list[Endpoint]] = {}
        for endpoint in self.endpoints:
            by_path.setdefault(endpoint.path, []).append(endpoint)
        return [
            Route(path, _dispatcher(found, authorize, protect_reads), methods=_methods(found))
            for path, found in by_path.items()
        ]

    def openapi(self, title: str, version: str) -> dict[str, Any]:
        """The OpenAPI 3 document of every endpoint."""
        document: dict[str, Any] = {
            "openapi": "3.0.3",
            "info": {"title": title, "version": version},
            "paths": {},
            "components": {
                "securitySchemes": {
                    "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
                },
                "schemas": {"Error": ERROR_SCHEMA},
            },
        }
        for endpoint in self.endpoints:
            path = re.sub(r"{(\w+):path}", r"{\1}", endpoint.path)
            operations = document["paths"].setdefault(path, {})
            operations[endpoint.method.lower()] = _operation(endpoint)
        return document


ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {"type": "string"},
        "description": {"type": "string"},
        "field": {"type": "string"},
    },
    "required": ["error", "description"],
}


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    parameters = [
        {"name": p.name, "in": "path", "required": True, "schema": p.schema()}
        for p in endpoint.path_params
    ] + [
        {"name": p.name, "in": "query", "required": p.required, "schema": p.schema()}
        for p in endpoint.query
    ]
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    responses: dict[str, Any] = {
        str(endpoint.status): _success(endpoint),
        "400": {"description": "A parameter is wrong", "content": error},
        "404": {"description": "Not found", "content": error},
    }
    operation: dict[str, Any] = {
        "operationId": endpoint.operation_id,
        "summary": endpoint.summary,
        "parameters": parameters,
        "responses": responses,
    }
    if endpoint.body:
        responses["413"] = {"description": f"Body larger than {MAX_BODY} bytes", "content": error}
        operation["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {p.name: p.schema() for p in endpoint.body},
                        "required": [p.name for p in endpoint.body if p.required],
                    }
                }
            },
        }
    if endpoint.admin or endpoint.token:
        operation["security"] = [{"bearer": []}]
        responses["401"] = {"description": "No valid token", "content": error}
        responses["403"] = {"description": "Not an admin of the tenant", "content": error}
    return operation


def _success(endpoint: Endpoint) -> dict[str, Any]:
    if endpoint.status == 204:
        return {"description": "Done"}
    return {"description": "OK", "content": {endpoint.media_type: {"schema": {}}}}


def _methods(endpoints: Sequence[Endpoint]) -> list[str]:
    return [e.method for e in endpoints]


def _dispatcher(
    endpoints: Sequence[Endpoint], authorize: Authorizer, protect_reads: bool
) -> Callable[[Request], Any]:
    by_method = {e.method: e for e in endpoints}

    async def dispatch(request: Request) -> Response:
        endpoint = by_method.get(request.method) or by_method.get(
            "GET" if request.method == "HEAD" else ""
        )
        if endpoint is None:
            return error_response(ApiError(405, f"method {request.method} not allowed"))
        try:
            return await _answer(request, endpoint, authorize, protect_reads)
        except ApiError as exc:
            return error_response(exc)
        except ClientDisconnect:  # gone while sending its body: nobody reads the answer
            return Response(status_code=400)
        except SluiceError as exc:
            return error_response(ApiError(status_of(exc), str(exc)))
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(ApiError(500, "internal error (logged by the server)"))

    return dispatch


async def _answer(
    request: Request, endpoint: Endpoint, authorize: Authorizer, protect_reads: bool
) -> Response:
    call = await _call(request, endpoint, authorize, protect_reads)
    value = await run_in_threadpool(endpoint.handler, call)
    if isinstance(value, Response):
        return value
    if endpoint.status == 204:
        return Response(status_code=204)
    return JSONResponse(value, status_code=endpoint.status)


async def _call(
    request: Request, endpoint: Endpoint, authorize: Authorizer, protect_reads: bool
) -> Call:
    """The checked call: the token first (nothing of the request is read before
    it passed), then the path, the query and the body."""
    claims: Mapping[str, Any] = {}
    if endpoint.admin or (protect_reads and not endpoint.public):
        scope = endpoint.scope(request)
        claims = await run_in_threadpool(authorize, request, scope, endpoint.admin)
    elif endpoint.token:
        claims = await run_in_threadpool(authorize, request, None, False)
    args: dict[str, Any] = {}
    for param in endpoint.path_params:
        args[param.name] = param.parse(request.path_params.get(param.name), "path parameter")
    known = {p.name for p in endpoint.query}
    for name in request.query_params:
        if name not in known:
            raise ApiError(400, f"unknown query parameter {name!r}", name)
    for param in endpoint.query:
        values = request.query_params.getlist(param.name)
        if len(values) > 1:
            raise ApiError(400, f"query parameter {param.name!r} given twice", param.name)
        if values:
            args[param.name] = param.parse(values[0], "query parameter")
        elif param.required:
            raise ApiError(400, f"query parameter {param.name!r} is required", param.name)
    if endpoint.body:
        args.update(await _body(request, endpoint.body))
    return Call(request, args, claims)


async def _body(request: Request, params: Sequence[Param]) -> dict[str, Any]:
    raw = await read_body(request, MAX_BODY)
    data = parse_json(raw) if raw.strip() else {}
    if not isinstance(data, dict):
        raise ApiError(400, "request body: expected a JSON object")
    args: dict[str, Any] = {}
    for param in params:
        value = data.get(param.name)
        if value is None or value == "":  # zuul-client sends "" for options not given
            if param.required:
                raise ApiError(400, f"body field {param.name!r} is required", param.name)
            continue
        args[param.name] = param.parse(value, "body field")
    return args
