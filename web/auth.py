"""Tokens: JWTs as Zuul checks them, for admin verbs and protected reads.

A request carries ``Authorization: Bearer <JWT>``. The token must verify
against one of ``web.authenticators`` (HS256 with a shared secret, RS256
with a public key), carry ``exp`` and be unexpired, and match the
authenticator's ``issuer``/``audience`` when set. An authenticator's
``skew`` (seconds) is the leeway of every time check (``exp``, ``nbf``,
an ``iat`` in the future); with ``max_validity_time`` (seconds) the token
must carry ``iat``, and one issued longer ago than that, or made to last
longer (``exp - iat``), is refused whatever its ``exp``. Zuul's claim
layout names the tenants the bearer administers::

    {"sub": "alice", "exp": ..., "zuul": {"admin": ["tenant-a", "tenant-b"]}}

``"*"`` in ``zuul.admin`` means every tenant. Those are also the tenants
the token reads when ``web.protect_reads`` is on. Without a token the
answer is 401, with a valid token that does not name the tenant 403. With
no authenticator configured every admin verb is refused (401): the API
never runs open by accident.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import jwt
from starlette.requests import Request

from scheduler.settings.sections import Authenticator
from web.errors import ApiError

ALL = "*"

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
                return _checked(auth, key, token)
            except jwt.PyJWTError as exc:
                reasons.append(f"{auth.name}: {exc}")
        raise ApiError(401, "invalid token (" + "; ".join(reasons) + ")")

    def authenticate(self, request: Request, admin: bool = False) -> Mapping[str, Any]:
        """The claims of the request's bearer token; ApiError 401 without a valid one."""
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            which = "an admin token" if admin else "a token"
            raise ApiError(401, f"{which} is required (Authorization: Bearer <JWT>)")
        return self.claims(token.strip())

    def authorize(
        self, request: Request, tenant: str | None, admin: bool = True
    ) -> Mapping[str, Any]:
        """The bearer's claims, if the bearer may act on (``admin``) or read ``tenant``.

        ``tenant`` is the raw value of the path, checked against the token
        before anything validates it; ``"*"``: the token must name every
        tenant; None: any valid token.
        """
        claims = self.authenticate(request, admin)
        if tenant is None:
            return claims
        if not allows(claims, tenant):
            shown = tenant[:80]
            if admin:
                raise ApiError(403, f"the token does not make its bearer an admin of {shown!r}")
            if tenant == ALL:
                raise ApiError(403, "reading this needs a token for every tenant ('*')")
            raise ApiError(403, f"the token does not let its bearer read tenant {shown!r}")
        if admin:
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


def tenants_of(claims: Mapping[str, Any]) -> list[str]:
    """The tenants a token's ``zuul.admin`` claim names (``"*"``: every one)."""
    zuul = claims.get("zuul")
    admin = zuul.get("admin", []) if isinstance(zuul, dict) else []
    return [t for t in admin if isinstance(t, str)] if isinstance(admin, list) else []


def allows(claims: Mapping[str, Any], tenant: str) -> bool:
    """Whether a token with ``claims`` may act on (or read) ``tenant``."""
    named = tenants_of(claims)
    return ALL in named or tenant in named


def _number(claims: Mapping[str, Any], name: str) -> float:
    try:
        return float(claims[name])
    except (TypeError, ValueError, OverflowError):
        raise jwt.InvalidTokenError(f"the {name!r} claim is not a number") from None


def _checked(auth: Authenticator, key: Any, token: str) -> Mapping[str, Any]:
    """The claims of ``token`` if ``auth`` accepts it; jwt.PyJWTError otherwise."""
    limit = auth.max_validity_time
    required = ["exp", "iat"] if limit else ["exp"]
    claims = dict(
        jwt.decode(
            token,
            key,
            algorithms=[auth.algorithm],
            audience=auth.audience or None,
            issuer=auth.issuer or None,
            leeway=auth.skew,
            options={"require": required, "verify_aud": bool(auth.audience)},
        )
    )
    if limit:
        issued = _number(claims, "iat")
        if _number(claims, "exp") - issued > limit:
            raise jwt.InvalidTokenError(f"the token lasts longer than {limit:g} s (exp - iat)")
        if time.time() - issued > limit:
            raise jwt.InvalidTokenError(f"the token was issued more than {limit:g} s ago")
    return claims
