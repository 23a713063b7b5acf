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

import anyio.to_thread
import jwt

from gateway.policy import CallerContext, InvalidContextError
from gateway.service._config import AuthConfig, JwtConfig
from gateway.service._oauth import JwksCache, KeysUnavailableError, ResourceServer

_MAX_CREDENTIAL: Final = 8192
#: Refusals without a token to call invalid (RFC 6750: then the challenge has no error).
_NO_TOKEN: Final = frozenset({"no credentials"})


#: What a caller who sent a bearer token is told where only API keys are accepted.
API_KEYS_ONLY: Final = "this gateway takes an API key in the X-API-Key header, not a bearer token"


class AuthFailure(Exception):  # noqa: N818 - a refusal, not a fault
    """Why a request was not authenticated.

    ``code`` and ``hint`` are public (``hint``: what the caller should do instead, when the
    refusal is about the kind of credential rather than the credential); ``detail`` is for
    logs.
    """

    def __init__(self, code: str, detail: str, *, hint: str | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.hint = hint

    @property
    def error(self) -> str | None:
        """The RFC 6750 error of the challenge: ``invalid_token`` for a bad token."""
        return None if self.detail in _NO_TOKEN else "invalid_token"


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
    """Turns request headers into a caller context, or refuses.

    Args:
        config: API keys, JWT settings and the OAuth resource server (``[auth]``); the
            arguments below override what it says.
        resource_server: this gateway as an OAuth protected resource: tokens must then
            name its ``resource`` as their audience (RFC 8707), every 401 names its
            metadata, and the middleware serves the metadata.
        jwks: signing keys from a JWKS URL (instead of the config's key source).
        max_lifetime_s: the longest ``exp - iat`` a token may have (``iat`` is then
            required).
    """

    def __init__(
        self,
        config: AuthConfig,
        *,
        resource_server: ResourceServer | None = None,
        jwks: JwksCache | None = None,
        max_lifetime_s: float | None = None,
    ) -> None:
        self._keys = [
            (bytes.fromhex(key.sha256), CallerContext(dict(key.context))) for key in config.api_keys
        ]
        self._jwt = config.jwt
        if jwks is None and config.jwt is not None and config.jwt.jwks_url is not None:
            jwks = JwksCache(
                config.jwt.jwks_url,
                max_age_s=config.jwt.jwks_max_age_s,
                min_refetch_s=config.jwt.jwks_min_refetch_s,
            )
        if max_lifetime_s is None and config.jwt is not None:
            max_lifetime_s = config.jwt.max_lifetime_s
        resource_server = resource_server if resource_server is not None else config.oauth
        self._jwks = jwks
        self._jwt_keys = _jwt_keys(config.jwt) if config.jwt is not None and jwks is None else None
        self._resource_server = resource_server
        if max_lifetime_s is not None and not max_lifetime_s > 0:
            raise ValueError("max_lifetime_s must be positive")
        self._max_lifetime = max_lifetime_s

    @property
    def accepts_bearer(self) -> bool:
        """Whether bearer tokens (JWT) are accepted at all; else only API keys are."""
        return self._jwt is not None

    @property
    def resource_server(self) -> ResourceServer | None:
        """This gateway as an OAuth protected resource, if configured."""
        return self._resource_server

    def challenge(self, *, error: str | None = None, scope: str | None = None) -> str | None:
        """The challenge of a refusal naming the resource metadata (``None``: the default)."""
        if self._resource_server is None:
            return None
        return self._resource_server.challenge(error=error, scope=scope)

    async def identify_async(self, headers: Mapping[str, str]) -> Identity:
        """:meth:`identify`, off the event loop when it may fetch signing keys.

        With a JWKS URL a token may need a fetch (first use, expiry, a new ``kid``), which
        blocks for up to its timeout: it runs on a worker thread then, so that the loop
        goes on serving (the authorization server may even be served by this process).
        """
        if self._jwks is None or "authorization" not in headers:
            return self.identify(headers)
        return await anyio.to_thread.run_sync(self.identify, headers)

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
                hint = None if self.accepts_bearer else API_KEYS_ONLY
                raise AuthFailure(
                    "unauthenticated", "Authorization header is not a bearer token", hint=hint
                )
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

    def _key_for(self, token: str) -> Any:
        header = jwt.get_unverified_header(token)
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise AuthFailure("unauthenticated", "token kid is not a string")
        if self._jwks is not None:
            try:
                return self._jwks.key(kid)
            except KeysUnavailableError as exc:
                raise AuthFailure("unauthenticated", str(exc)) from None
        assert self._jwt_keys is not None  # noqa: S101 - checked by _bearer
        key = self._jwt_keys.get(kid) or self._jwt_keys.get(None)
        if key is None:
            raise AuthFailure("unauthenticated", "unknown signing key")
        return key

    def _bearer(self, token: str) -> Identity:
        if self._jwt is None or (self._jwt_keys is None and self._jwks is None):
            raise AuthFailure(
                "unauthenticated", "bearer tokens are not accepted here", hint=API_KEYS_ONLY
            )
        if len(token) > _MAX_CREDENTIAL:
            raise AuthFailure("unauthenticated", "token too long")
        config = self._jwt
        audience = (
            self._resource_server.resource if self._resource_server is not None else config.audience
        )
        required = ["exp", "iss", "aud"] + (["iat"] if self._max_lifetime is not None else [])
        try:
            key = self._key_for(token)
            claims = jwt.decode(
                token,
                key=key,
                algorithms=list(config.algorithms),
                audience=audience,
                issuer=config.issuer,
                leeway=config.leeway_s,
                options={"require": required, "verify_iat": True},
            )
        except AuthFailure:
            raise
        except jwt.ExpiredSignatureError:
            raise AuthFailure("token_expired", "token expired") from None
        except (jwt.PyJWTError, TypeError, ValueError) as exc:
            # Not only InvalidTokenError: a token whose alg does not fit the selected key
            # (ES256 under an RSA key's kid) fails in PyJWT's key preparation with
            # InvalidKeyError or TypeError. Any of these is the caller's bad token, not a 500.
            raise AuthFailure("unauthenticated", f"invalid token: {type(exc).__name__}") from None
        self._check_lifetime(claims)
        context: dict[str, Any] = {}
        for field, claim in config.claims.items():
            if claim in claims:
                context[field] = claims[claim]
        if not isinstance(context.get("subject"), str) or not context["subject"]:
            raise AuthFailure("unauthenticated", "token has no subject")
        scopes = _scopes(claims)
        if scopes is not None:
            context["scopes"] = scopes
        if "act" in claims:
            context["actor"] = _actor(claims["act"])
        try:
            caller = CallerContext(context)
        except InvalidContextError:
            raise AuthFailure("unauthenticated", "token claims are not a valid context") from None
        return Identity(caller, _fingerprint("jwt", str(claims.get("iss")), context["subject"]))

    def _check_lifetime(self, claims: Mapping[str, Any]) -> None:
        if self._max_lifetime is not None:
            lifetime = _number(claims.get("exp")) - _number(claims.get("iat"))
            if not lifetime <= self._max_lifetime:
                raise AuthFailure("unauthenticated", "token lifetime exceeds the maximum")


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AuthFailure("unauthenticated", "token times are not numbers")
    return float(value)


def _scopes(claims: Mapping[str, Any]) -> list[str] | None:
    # OAuth's "scope" (RFC 8693, RFC 9068: space-separated text), or "scp" (an array).
    if "scope" in claims:
        scope = claims["scope"]
        if not isinstance(scope, str):
            raise AuthFailure("unauthenticated", "token scope is not a string")
        return sorted(set(scope.split()))
    if "scp" in claims:
        scp = claims["scp"]
        if not isinstance(scp, list) or not all(isinstance(s, str) and s for s in scp):
            raise AuthFailure("unauthenticated", "token scp is not an array of strings")
        return sorted(set(scp))
    return None


def _actor(act: Any) -> dict[str, Any]:
    # RFC 8693 delegation: "act" names the current actor; a nested "act" inside it names the
    # actors before it, kept as "delegated_by" (most recent first) for the audit trail.
    if not isinstance(act, dict) or not isinstance(act.get("sub"), str) or not act["sub"]:
        raise AuthFailure("unauthenticated", "token act claim has no subject")
    actor: dict[str, Any] = {"subject": act["sub"]}
    chain: list[str] = []
    prior = act.get("act")
    while prior is not None:
        if not isinstance(prior, dict) or not isinstance(prior.get("sub"), str) or len(chain) > 8:
            raise AuthFailure("unauthenticated", "token act claim is malformed")
        chain.append(prior["sub"])
        prior = prior.get("act")
    if chain:
        actor["delegated_by"] = chain
    return actor


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
