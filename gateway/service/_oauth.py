"""OAuth 2.1 resource server: protected resource metadata, challenges and signing keys.

The gateway is a protected resource (the MCP authorization specification, RFC 9728): it
publishes ``/.well-known/oauth-protected-resource`` naming its resource identifier, the
authorization servers that issue tokens for it and the scopes it knows; every 401 carries
the challenge ``Bearer resource_metadata="<that URL>"`` so that a client that speaks
only OAuth can discover where to get a token. Access tokens are JWTs validated by
:class:`gateway.service.Authenticator` for this resource as audience (RFC 8707), the
issuer, ``exp``, ``nbf`` and a maximum lifetime; their keys come from a JWKS document, a
file, or a URL fetched through :class:`JwksCache` (cached, refetched on an unknown ``kid``
at most once per ``min_refetch_s``, and failing closed when it cannot be fetched).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import jwt

#: Where RFC 9728 puts the metadata of a protected resource.
METADATA_PATH: Final = "/.well-known/oauth-protected-resource"
DEFAULT_JWKS_MAX_AGE_S: Final = 300.0
DEFAULT_JWKS_MIN_REFETCH_S: Final = 10.0
DEFAULT_JWKS_TIMEOUT_S: Final = 2.0
DEFAULT_JWKS_MAX_BYTES: Final = 256 * 1024

#: Fetches a JWKS URL: returns the body, raises ``OSError`` (or ``ValueError``) on failure.
Fetch = Callable[[str, float, int], bytes]


class KeysUnavailableError(Exception):
    """The signing keys could not be fetched or read (the token is then refused)."""


def _fetch(url: str, timeout_s: float, max_bytes: int) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 - http(s) checked by JwksCache
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
        if response.status != 200:
            raise ValueError(f"JWKS URL answered HTTP {response.status}")
        body: bytes = response.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise ValueError("JWKS document too large")
    return body


def read_jwks(document: bytes | str) -> dict[str | None, Any]:
    """The keys of a JWKS document by ``kid`` (the only key also under ``None``).

    Raises:
        KeysUnavailableError: not a JWKS document with at least one usable key.
    """
    try:
        jwks = jwt.PyJWKSet.from_json(document if isinstance(document, str) else document.decode())
    except (jwt.PyJWKSetError, jwt.InvalidKeyError, ValueError, TypeError, UnicodeError):
        raise KeysUnavailableError("the JWKS document has no usable key") from None
    keys: dict[str | None, Any] = {entry.key_id: entry.key for entry in jwks.keys}
    if len(jwks.keys) == 1:
        keys[None] = jwks.keys[0].key
    return keys


class JwksCache:
    """The signing keys behind a JWKS URL, cached and rotated, failing closed.

    Args:
        url: the ``https`` (or loopback ``http``) URL of the JWKS document.
        max_age_s: how long fetched keys are used before they are fetched again.
        min_refetch_s: the least time between two fetches (an unknown ``kid`` triggers a
            refetch, at most this often, so a flood of made-up ``kid`` values costs one
            fetch per interval).
        timeout_s: the deadline of one fetch.
        max_bytes: the largest JWKS document accepted.
        clock: a monotonic clock (inject one in tests).
        fetch: fetches the document (default: ``urllib``).
    """

    def __init__(
        self,
        url: str,
        *,
        max_age_s: float = DEFAULT_JWKS_MAX_AGE_S,
        min_refetch_s: float = DEFAULT_JWKS_MIN_REFETCH_S,
        timeout_s: float = DEFAULT_JWKS_TIMEOUT_S,
        max_bytes: int = DEFAULT_JWKS_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
        fetch: Fetch = _fetch,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        loopback = parsed.hostname in ("127.0.0.1", "::1", "localhost")
        if parsed.scheme != "https" and not (parsed.scheme == "http" and loopback):
            raise ValueError("the JWKS URL must be https (or http on loopback)")
        if not (max_age_s > 0 and min_refetch_s >= 0 and timeout_s > 0 and max_bytes > 0):
            raise ValueError("max_age_s, timeout_s and max_bytes must be positive")
        self._url = url
        self._max_age = max_age_s
        self._min_refetch = min_refetch_s
        self._timeout = timeout_s
        self._max_bytes = max_bytes
        self._clock = clock
        self._fetch = fetch
        self._lock = threading.Lock()
        self._keys: dict[str | None, Any] = {}
        self._fetched: float | None = None
        self._attempted: float | None = None
        #: How many fetches were made (for tests and metrics).
        self.fetches = 0

    def _refresh(self, now: float) -> None:
        # Caller holds the lock. A failed fetch drops nothing it did not have to, but keys
        # older than max_age are never used: fail closed.
        self._attempted = now
        self.fetches += 1
        try:
            keys = read_jwks(self._fetch(self._url, self._timeout, self._max_bytes))
        except (OSError, ValueError, KeysUnavailableError):
            if self._fetched is None or now - self._fetched >= self._max_age:
                self._keys = {}
            raise KeysUnavailableError("the signing keys could not be fetched") from None
        self._keys = keys
        self._fetched = now

    def key(self, kid: str | None) -> Any:
        """The key for ``kid``.

        Raises:
            KeysUnavailableError: the keys cannot be fetched, or no key has this ``kid``
                (after at most one refetch per ``min_refetch_s``).
        """
        with self._lock:
            now = self._clock()
            may_fetch = self._attempted is None or now - self._attempted >= self._min_refetch
            stale = self._fetched is None or now - self._fetched >= self._max_age
            if stale:
                if not may_fetch:
                    raise KeysUnavailableError("the signing keys are not available")
                self._refresh(now)
            found = self._keys.get(kid)
            if found is None and may_fetch and not stale:
                self._refresh(now)  # rotation: a new kid
                found = self._keys.get(kid)
            if found is None:
                raise KeysUnavailableError("no signing key has this kid")
            return found


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceServer:
    """This gateway as an OAuth protected resource (RFC 9728).

    Attributes:
        resource: the resource identifier (an ``https`` URL): what tokens must name as
            their audience (RFC 8707).
        authorization_servers: the issuers clients get tokens from.
        scopes_supported: the scopes the policies know.
        metadata_url: where the metadata is served (default: the well-known URL of
            ``resource``).
    """

    resource: str
    authorization_servers: Sequence[str]
    scopes_supported: Sequence[str] = ()
    metadata_url: str | None = None

    def metadata(self) -> dict[str, Any]:
        """The protected resource metadata document."""
        document: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": list(self.authorization_servers),
            "bearer_methods_supported": ["header"],
        }
        if self.scopes_supported:
            document["scopes_supported"] = list(self.scopes_supported)
        return document

    def metadata_body(self) -> bytes:
        """The metadata as JSON bytes."""
        return json.dumps(self.metadata(), separators=(",", ":")).encode()

    @property
    def where(self) -> str:
        """The metadata URL named in every challenge."""
        if self.metadata_url is not None:
            return self.metadata_url
        parsed = urllib.parse.urlsplit(self.resource)
        suffix = parsed.path.rstrip("/")
        return urllib.parse.urlunsplit(
            (parsed.scheme, parsed.netloc, METADATA_PATH + suffix, "", "")
        )

    @property
    def metadata_paths(self) -> frozenset[str]:
        """The request paths the metadata is served at (with and without the resource path)."""
        return frozenset({METADATA_PATH, urllib.parse.urlsplit(self.where).path})

    def challenge(self, *, error: str | None = None, scope: str | None = None) -> str:
        """The challenge of a refusal (the value of the 401's authenticate header)."""
        parts = []
        if error is not None:
            parts.append(f'error="{error}"')
        if scope is not None:
            parts.append(f'scope="{scope}"')
        parts.append(f'resource_metadata="{self.where}"')
        return "Bearer " + ", ".join(parts)
