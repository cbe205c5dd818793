"""Errors of the HTTP face: a status and a JSON body that says what was wrong.

The body is Zuul's (``error``, ``description``), which ``zuul-client``
prints, plus ``field`` when one parameter is to blame.
"""

from __future__ import annotations

from http import HTTPStatus

from starlette.responses import JSONResponse

from scheduler.drivers import ForgeError
from scheduler.drivers.git.refs import RefError
from scheduler.errors import SluiceError
from scheduler.layouts.errors import NoLayoutError, TenantNotFoundError, UnknownPipelineError
from scheduler.management import ManagementError, NoAnswerError, NotInPipelineError
from scheduler.reporting.errors import DatabaseUnavailableError
from scheduler.settings.exposure import BrokerError
from scheduler.zk.errors import ZooKeeperUnavailableError


class ApiError(Exception):
    def __init__(self, status: int, description: str, field: str = "") -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.field = field


def error_response(exc: ApiError) -> JSONResponse:
    body = {"error": HTTPStatus(exc.status).phrase, "description": exc.description}
    if exc.field:
        body["field"] = exc.field
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(body, status_code=exc.status, headers=headers)


def status_of(exc: SluiceError) -> int:
    """The HTTP status for an error the scheduler's code raised."""
    if isinstance(exc, NoAnswerError):
        return 504  # queued all the same: it is applied once a scheduler runs
    if isinstance(exc, RefError | ForgeError):
        return 502  # a repository or forge behind Sluice did not answer as it should
    if isinstance(exc, NotInPipelineError | TenantNotFoundError | NoLayoutError):
        return 404
    if isinstance(exc, UnknownPipelineError | ManagementError):
        return 400
    if isinstance(exc, ZooKeeperUnavailableError | DatabaseUnavailableError | BrokerError):
        return 503
    return 500
