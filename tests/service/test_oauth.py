"""The OAuth 2.1 resource server: audience, issuer, times, keys from a JWKS URL, challenges.

Tokens are minted here with PyJWT; the JWKS is served by a real HTTP server on loopback.
"""

from __future__ import annotations

import http.server
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.service import AuthenticationMiddleware, Authenticator, AuthFailure
from gateway.service._auth import Identity
from gateway.service._config import AuthConfig, JwtConfig
from gateway.service._middleware import CALLER_SCOPE_KEY
from gateway.service._oauth import JwksCache, ResourceServer
from gateway.testing import FakeClock

RESOURCE: Final = "https://gateway.example.com/mcp"
ISSUER: Final = "https://auth.example.com"
KEYS: Final = {kid: rsa.generate_private_key(public_exponent=65537, key_size=2048) for kid in "ab"}


def _jwk(kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEYS[kid].public_key()))
    return {**jwk, "kid": kid, "alg": "RS256", "use": "sig"}


class _Jwks:
    """A JWKS server on loopback whose key set and health the test controls."""

    def __init__(self) -> None:
        self.kids: list[str] = ["a"]
        self.up = True
        self.hits = 0
        jwks = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks.hits += 1
                if not jwks.up:
                    self.send_response(503)
                    self.end_headers()
                    return
                body = json.dumps({"keys": [_jwk(kid) for kid in jwks.kids]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jwks() -> Iterator[_Jwks]:
    server = _Jwks()
    yield server
    server.close()


@pytest.fixture(scope="module")
def shared_jwks() -> Iterator[_Jwks]:
    server = _Jwks()
    yield server
    server.close()


def _authenticator(jwks: _Jwks, clock: FakeClock | None = None, **options: Any) -> Authenticator:
    config = AuthConfig(jwt=JwtConfig(algorithms=("RS256",), jwks="{}", issuer=ISSUER))
    cache = JwksCache(jwks.url, clock=clock or FakeClock(), min_refetch_s=10, max_age_s=300)
    server = ResourceServer(
        resource=RESOURCE, authorization_servers=[ISSUER], scopes_supported=["tools.read"]
    )
    return Authenticator(config, resource_server=server, jwks=cache, **options)


def _token(kid: str = "a", **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "iat": now, "exp": now + 300}
    body.update(claims)
    body = {key: value for key, value in body.items() if value is not None}
    return jwt.encode(body, KEYS[kid], algorithm="RS256", headers={"kid": kid})


def _unknown_kid() -> str:
    return jwt.encode({"sub": "x"}, KEYS["a"], headers={"kid": "z"}, algorithm="RS256")


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_a_token_for_this_resource_authenticates_with_its_scopes(jwks: _Jwks) -> None:
    identity = _authenticator(jwks).identify(_bearer(_token(scope="tools.read tools.write")))
    assert identity.context.get("subject") == "alice"
    assert identity.context.get("scopes") == ["tools.read", "tools.write"]


def test_an_act_claim_puts_the_user_and_the_acting_agent_in_the_context(jwks: _Jwks) -> None:
    token = _token(act={"sub": "report-bot", "act": {"sub": "planner"}})
    context = _authenticator(jwks).identify(_bearer(token)).context
    assert context.get("subject") == "alice"
    assert context.get("actor") == {"subject": "report-bot", "delegated_by": ["planner"]}


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"aud": "https://other.example.com/mcp"}, id="other-audience"),
        pytest.param({"aud": None}, id="no-audience"),
        pytest.param({"iss": "https://evil.example.com"}, id="other-issuer"),
        pytest.param({"exp": int(time.time()) - 10}, id="expired"),
        pytest.param({"exp": None}, id="no-exp"),
        # A year ahead: the parameter is made when the suite is collected, and a suite can
        # run for longer than minutes before it reaches this test.
        pytest.param({"nbf": int(time.time()) + 365 * 86400}, id="not-yet-valid"),
        pytest.param({"sub": None}, id="no-subject"),
        pytest.param({"act": {"client": "x"}}, id="act-without-subject"),
        pytest.param({"act": "report-bot"}, id="act-not-an-object"),
        pytest.param({"scope": ["tools.read"]}, id="scope-not-a-string"),
    ],
)
def test_a_token_not_fit_for_this_resource_is_refused(jwks: _Jwks, claims: dict[str, Any]) -> None:
    with pytest.raises(AuthFailure):
        _authenticator(jwks).identify(_bearer(_token(**claims)))


def test_a_token_living_longer_than_the_maximum_is_refused(jwks: _Jwks) -> None:
    now = int(time.time())
    authenticator = _authenticator(jwks, max_lifetime_s=600)
    authenticator.identify(_bearer(_token(iat=now, exp=now + 600)))
    with pytest.raises(AuthFailure, match="lifetime"):
        authenticator.identify(_bearer(_token(iat=now, exp=now + 601)))
    with pytest.raises(AuthFailure):
        authenticator.identify(_bearer(_token(iat=None)))


@settings(max_examples=60, deadline=None)
@given(position=st.integers(min_value=0), replacement=st.characters(codec="ascii"))
def test_any_tampered_token_is_refused(shared_jwks: _Jwks, position: int, replacement: str) -> None:
    token = _token(scope="tools.read")
    index = position % len(token)
    tampered = token[:index] + replacement + token[index + 1 :]
    if tampered == token:
        return
    authenticator = _authenticator(shared_jwks)
    outcome: Identity | AuthFailure
    try:
        outcome = authenticator.identify(_bearer(tampered))
    except AuthFailure as failure:
        outcome = failure
    if isinstance(outcome, AuthFailure):
        assert tampered not in outcome.detail
        return
    # base64url padding bits: a change that decodes to the same bytes is the same token.
    assert jwt.decode(tampered, options={"verify_signature": False}) == jwt.decode(
        token, options={"verify_signature": False}
    )
    assert outcome.context.get("subject") == "alice"


@settings(max_examples=60, deadline=None)
@given(
    audience=st.one_of(
        st.text(max_size=40),
        st.lists(st.text(max_size=40), max_size=3),
        st.sampled_from([RESOURCE + "/", RESOURCE.upper(), "https://gateway.example.com"]),
    ),
    expired_by=st.integers(min_value=1, max_value=10**9),
    which=st.sampled_from(["audience", "expiry"]),
)
def test_any_token_for_another_audience_or_expired_is_refused(
    shared_jwks: _Jwks, audience: Any, expired_by: int, which: str
) -> None:
    if which == "audience":
        if audience == RESOURCE or (isinstance(audience, list) and RESOURCE in audience):
            return
        token = _token(aud=audience)
    else:
        token = _token(exp=int(time.time()) - expired_by, iat=int(time.time()) - 2 * expired_by)
    with pytest.raises(AuthFailure) as refused:
        _authenticator(shared_jwks).identify(_bearer(token))
    assert token not in refused.value.detail


def test_a_new_kid_is_fetched_once_and_a_flood_of_unknown_kids_is_rate_limited(
    jwks: _Jwks,
) -> None:
    clock = FakeClock()
    authenticator = _authenticator(jwks, clock)
    authenticator.identify(_bearer(_token("a")))
    assert jwks.hits == 1
    jwks.kids = ["a", "b"]  # rotation: the issuer starts signing with b
    clock.advance(11)
    authenticator.identify(_bearer(_token("b")))
    assert jwks.hits == 2
    for _ in range(20):
        with pytest.raises(AuthFailure):
            authenticator.identify(_bearer(_unknown_kid()))
    assert jwks.hits == 2, "unknown kids refetched within the interval"
    clock.advance(11)
    with pytest.raises(AuthFailure):
        authenticator.identify(_bearer(_unknown_kid()))
    assert jwks.hits == 3


def test_keys_that_cannot_be_fetched_refuse_every_token(jwks: _Jwks) -> None:
    jwks.up = False
    with pytest.raises(AuthFailure, match="fetched"):
        _authenticator(jwks).identify(_bearer(_token()))


def test_keys_past_their_age_are_not_used_when_the_refetch_fails(jwks: _Jwks) -> None:
    clock = FakeClock()
    authenticator = _authenticator(jwks, clock)
    authenticator.identify(_bearer(_token()))
    jwks.up = False
    clock.advance(301)
    with pytest.raises(AuthFailure):
        authenticator.identify(_bearer(_token()))
    clock.advance(1)  # within the refetch interval: still refused, no fetch
    with pytest.raises(AuthFailure):
        authenticator.identify(_bearer(_token()))


def test_a_jwks_url_must_be_https_off_loopback() -> None:
    with pytest.raises(ValueError, match="https"):
        JwksCache("http://auth.example.com/jwks.json")


# -- over HTTP ------------------------------------------------------------------------------


async def _whoami(request: Request) -> JSONResponse:
    caller = request.scope[CALLER_SCOPE_KEY]
    return JSONResponse(json.loads(caller.json))


def _client(authenticator: Authenticator) -> httpx.AsyncClient:
    app = AuthenticationMiddleware(
        Starlette(routes=[Route("/mcp", _whoami, methods=["POST"])]), authenticator
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_every_401_names_the_resource_metadata_which_is_served_to_anyone(
    jwks: _Jwks, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    authenticator = _authenticator(jwks)
    expired = _token(exp=int(time.time()) - 5)
    async with _client(authenticator) as client:
        missing = await client.post("/mcp")
        bad = await client.post("/mcp", headers=_bearer(expired))
        metadata = await client.get("/.well-known/oauth-protected-resource/mcp")
        root = await client.get("/.well-known/oauth-protected-resource")
        ok = await client.post("/mcp", headers=_bearer(_token(scope="tools.read")))
    where = "https://gateway.example.com/.well-known/oauth-protected-resource/mcp"
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == f'Bearer resource_metadata="{where}"'
    assert bad.status_code == 401
    assert bad.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", resource_metadata="{where}"'
    )
    assert metadata.status_code == 200
    assert metadata.json() == {
        "resource": RESOURCE,
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["tools.read"],
    }
    assert root.json() == metadata.json()
    assert ok.json()["scopes"] == ["tools.read"]
    for text in (caplog.text, missing.text, bad.text):
        assert expired not in text
        assert expired.split(".")[2] not in text
