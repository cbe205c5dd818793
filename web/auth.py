"""Admin authentication: JWTs as Zuul checks them.

A request to an admin verb carries ``Authorization: Bearer <JWT>``. The
token must verify against one of ``web.authenticators`` (HS256 with a
shared secret, RS256 with a public key), be unexpired, and match the
authenticator's ``issuer``/``audience`` when set. Zuul's claim layout names
the tenants the bearer administers::

    {"sub": "alice", "exp": ..., "zuul": {"admin": ["tenant-a", "tenant-b"]}}

``"*"`` in ``zuul.admin`` means every tenant. Without a token the answer is
401, with a valid token that does not name the tenant 403. With no
authenticator configured every admin verb is refused (401): the API never
runs open by accident.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import jwt
from starlette.requests import Request

from scheduler.settings import Authenticator
from web.errors import ApiError

log = logging.getLogger(__name__)


class Authenticators:
    def __init__(self, configured: Sequence[Authenticator]) -> None:
        self.configured = tuple(configured)

    @cached_property
    def _keys(self) -> list[tuple[Authenticator, Any]]:
        keys: list[tuple[Authenticator, Any]] = []
        for auth in self.configured:
            if auth.algorithm == "HS256":
                keys.append((auth, auth.secret))
            else:
                keys.append((auth, Path(auth.public_key).read_text()))
        return keys

    def claims(self, token: str) -> Mapping[str, Any]:
        """The claims of a token one authenticator accepts; ApiError 401 otherwise."""
        if not self.configured:
            raise ApiError(401, "no authenticator is configured (web.authenticators)")
        reasons = []
        for auth, key in self._keys:
            try:
                return dict(
                    jwt.decode(
                        token,
                        key,
                        algorithms=[auth.algorithm],
                        audience=auth.audience or None,
                        issuer=auth.issuer or None,
                        options={"require": ["exp"], "verify_aud": bool(auth.audience)},
                    )
                )
            except jwt.PyJWTError as exc:
                reasons.append(f"{auth.name}: {exc}")
        raise ApiError(401, "invalid token (" + "; ".join(reasons) + ")")

    def authorize(self, request: Request, tenant: str | None) -> Mapping[str, Any]:
        """The bearer's claims, if the bearer may act on ``tenant`` (None: any valid token)."""
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "an admin token is required (Authorization: Bearer <JWT>)")
        claims = self.claims(token.strip())
        if tenant is None:
            return claims
        zuul = claims.get("zuul")
        admin = zuul.get("admin", []) if isinstance(zuul, dict) else []
        if not isinstance(admin, list) or (tenant not in admin and "*" not in admin):
            raise ApiError(403, f"the token does not make its bearer an admin of {tenant!r}")
        log.info("admin %s acts on tenant %s", claims.get("sub", "?"), tenant)
        return claims

    def describe(self) -> dict[str, Any]:
        """The ``auth`` capability of ``/api/info``."""
        realms = {
            a.name: {"authority": a.issuer, "client_id": a.audience, "type": "JWT"}
            for a in self.configured
        }
        default = self.configured[0].name if self.configured else None
        return {"realms": realms, "default_realm": default}
