"""Caller authentication: API keys (stored hashed) and JWT bearer tokens.

A request without valid credentials is answered 401 before anything else happens; no
policy is ever asked about it. A successful authentication yields the caller context the
policy sees.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import jwt

from gateway.policy import CallerContext, InvalidContextError
from gateway.service._config import AuthConfig, JwtConfig

_MAX_CREDENTIAL: Final = 8192


class AuthFailure(Exception):  # noqa: N818 - a refusal, not a fault
    """Why a request was not authenticated (``code`` is public; ``detail`` is for logs)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Identity:
    """Who authenticated: the caller context and the principal behind the credential.

    ``principal`` is an opaque, stable fingerprint of the credential's owner: which API key
    (two keys with the same context are two principals), or which issuer and subject a
    bearer token speaks for (a renewed token is the same principal). It never contains the
    credential.
    """

    context: CallerContext
    principal: str


def _fingerprint(kind: str, *parts: str | bytes) -> str:
    digest = hashlib.sha256(kind.encode())
    for part in parts:
        data = part if isinstance(part, bytes) else part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big") + data)
    return f"{kind}:{digest.hexdigest()[:32]}"


class Authenticator:
    """Turns request headers into a caller context, or refuses."""

    def __init__(self, config: AuthConfig) -> None:
        self._keys = [
            (bytes.fromhex(key.sha256), CallerContext(dict(key.context))) for key in config.api_keys
        ]
        self._jwt = config.jwt
        self._jwt_keys = _jwt_keys(config.jwt) if config.jwt is not None else None

    def authenticate(self, headers: Mapping[str, str]) -> CallerContext:
        """The caller context for these headers.

        Raises:
            AuthFailure: missing, malformed, unknown, expired or otherwise invalid credentials.
        """
        return self.identify(headers).context

    def identify(self, headers: Mapping[str, str]) -> Identity:
        """The caller context and the principal for these headers.

        Raises:
            AuthFailure: missing, malformed, unknown, expired or otherwise invalid credentials.
        """
        api_key = headers.get("x-api-key")
        authorization = headers.get("authorization")
        if api_key is not None:
            return self._api_key(api_key)
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthFailure("unauthenticated", "Authorization header is not a bearer token")
            return self._bearer(token.strip())
        raise AuthFailure("unauthenticated", "no credentials")

    def _api_key(self, presented: str) -> Identity:
        if not presented or len(presented) > _MAX_CREDENTIAL:
            raise AuthFailure("unauthenticated", "malformed API key")
        digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
        found: CallerContext | None = None
        # Compare against every key so the time taken does not say which one matched.
        for stored, context in self._keys:
            if hmac.compare_digest(stored, digest):
                found = context
        if found is None:
            raise AuthFailure("unauthenticated", "unknown API key")
        return Identity(found, _fingerprint("api-key", digest))

    def _bearer(self, token: str) -> Identity:
        if self._jwt is None or self._jwt_keys is None:
            raise AuthFailure("unauthenticated", "bearer tokens are not accepted here")
        if len(token) > _MAX_CREDENTIAL:
            raise AuthFailure("unauthenticated", "token too long")
        config = self._jwt
        try:
            header = jwt.get_unverified_header(token)
            key = self._jwt_keys.get(header.get("kid")) or self._jwt_keys.get(None)
            if key is None:
                raise AuthFailure("unauthenticated", "unknown signing key")
            claims = jwt.decode(
                token,
                key=key,
                algorithms=list(config.algorithms),
                audience=config.audience,
                issuer=config.issuer,
                leeway=config.leeway_s,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthFailure("token_expired", "token expired") from None
        except (jwt.PyJWTError, TypeError, ValueError) as exc:
            # Not only InvalidTokenError: a token whose alg does not fit the selected key
            # (ES256 under an RSA key's kid) fails in PyJWT's key preparation with
            # InvalidKeyError or TypeError. Any of these is the caller's bad token, not a 500.
            raise AuthFailure("unauthenticated", f"invalid token: {type(exc).__name__}") from None
        context: dict[str, Any] = {}
        for field, claim in config.claims.items():
            if claim in claims:
                context[field] = claims[claim]
        if not isinstance(context.get("subject"), str) or not context["subject"]:
            raise AuthFailure("unauthenticated", "token has no subject")
        try:
            caller = CallerContext(context)
        except InvalidContextError:
            raise AuthFailure("unauthenticated", "token claims are not a valid context") from None
        return Identity(caller, _fingerprint("jwt", str(claims.get("iss")), context["subject"]))


def _jwt_keys(config: JwtConfig) -> dict[str | None, Any]:
    if config.secret is not None:
        return {None: config.secret}
    if config.public_key is not None:
        return {None: config.public_key}
    keys: dict[str | None, Any] = {}
    assert config.jwks is not None  # noqa: S101 - the config requires exactly one key source
    jwks = jwt.PyJWKSet.from_json(config.jwks)
    for entry in jwks.keys:
        keys[entry.key_id] = entry.key
    if len(jwks.keys) == 1:
        keys[None] = jwks.keys[0].key
    return keys


def jwks_json(keys: Mapping[str, Any]) -> str:
    """Serialize ``{kid: public JWK dict}`` as a JWKS document (for tests and examples)."""
    return json.dumps({"keys": [{**jwk, "kid": kid} for kid, jwk in keys.items()]})
