"""End-to-end: a real uvicorn server on 127.0.0.1, a real HTTP client, both engines.

Each test that takes the ``gateway`` fixture (or ``engine_kind``) runs twice: on the embedded
engine and on a real OPA server, both deciding with the shipped policies (plus the data
overlay for the test tools, see conftest.py).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import jwt
import pytest
from jsonschema import Draft202012Validator

from gateway.audit import AuditTrail, MemorySink
from gateway.cli import main as cli_main
from gateway.policy import EmbeddedEngine, PolicyAuthorizer
from gateway.server import Authenticator, Gateway, GatewayApp, GatewayMetrics, parse_config
from gateway.server._openapi import openapi_document
from gateway.service._auth import API_KEYS_ONLY
from gateway.service._middleware import API_KEY_CHALLENGE
from gateway.testing import RecordingAuthorizer, RecordingTool
from tests.server.conftest import (
    ALICE,
    API_KEYS,
    AUDIENCE,
    BOB,
    BOOM,
    BOOM_TEXT,
    CAROL,
    EC_KID,
    ECHO,
    FAIL,
    ISSUER,
    PRIVATE_CAUSE,
    PUBLIC_FAILURE,
    RSA_KID,
    TESS,
    GatewayFactory,
    JwtKeys,
    RunningGateway,
    bearer,
    call_body,
    claims,
    hmac_token,
    key,
    key_digest,
    serve,
    start_opa,
    tampered,
    unsigned_token,
)

BIG: Final = "123456789012345678901234567890"
PAYMENT: Final = {"from_account": "acct-acme-001", "to_account": "acct-x", "amount": 5}
HEX_ID: Final = re.compile(r"[0-9a-f]{32}")
OPENAPI: Final = openapi_document()
ERROR_SCHEMA: Final = Draft202012Validator(OPENAPI["components"]["schemas"]["Error"])
# The document's own "#/components/..." references resolve inside this wrapper.
RESULT_SCHEMA: Final = Draft202012Validator(
    {"components": OPENAPI["components"], "$ref": "#/components/schemas/Result"}
)
CALL_RESPONSES: Final = OPENAPI["paths"]["/v1/calls"]["post"]["responses"]
NO_DECISION: Final = "no policy decision could be made; the call was not run"


async def post_call(
    client: httpx.AsyncClient, api_key: str | None, body: object, **headers: str
) -> httpx.Response:
    """POST a call with an API key (or none)."""
    sent = dict(headers)
    if api_key is not None:
        sent["X-API-Key"] = api_key
    return await client.post("/v1/calls", json=body, headers=sent)


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The response is the structured error with this status and code, as documented."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    ERROR_SCHEMA.validate(body)
    assert str(status) in CALL_RESPONSES
    assert set(body) == {"code", "message", "decision_id", "request_id"}, body
    assert body["code"] == code, body
    assert isinstance(body["message"], str)
    assert body["message"]
    assert body["request_id"] == response.headers["x-request-id"]
    return body


@pytest.fixture
async def client(gateway: RunningGateway) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the standard service (per engine)."""
    async with gateway.client() as http:
        yield http


# -- 200 ------------------------------------------------------------------------------------


async def test_allowed_call_returns_the_tool_output(client: httpx.AsyncClient) -> None:
    response = await post_call(client, ALICE, call_body("add", {"a": 2, "b": 3}, "c-1"))
    assert response.status_code == 200, response.text
    body = response.json()
    RESULT_SCHEMA.validate(body)
    assert body["id"] == "c-1"
    assert body["status"] == "ok"
    assert body["is_error"] is False
    assert body["output"]["text"] == "5"
    assert body["output"]["content"] == [{"type": "text", "text": "5"}]
    assert isinstance(body["decision_id"], str)
    assert body["decision_id"]
    assert body["request_id"] == response.headers["x-request-id"]


async def test_arguments_may_be_json_text(client: httpx.AsyncClient) -> None:
    response = await post_call(client, ALICE, call_body("add", '{"a": 40, "b": 2}'))
    assert response.status_code == 200, response.text
    assert response.json()["output"]["text"] == "42"


async def test_tool_failure_is_a_marked_200_without_its_cause(client: httpx.AsyncClient) -> None:
    before = FAIL.calls
    response = await post_call(client, TESS, call_body("fail", {}))
    assert response.status_code == 200, response.text
    body = response.json()
    RESULT_SCHEMA.validate(body)
    assert body["status"] == "tool_failed"
    assert body["is_error"] is True
    assert body["output"]["text"] == PUBLIC_FAILURE
    assert isinstance(body["decision_id"], str)
    assert PRIVATE_CAUSE not in response.text
    assert "ValueError" not in response.text
    assert FAIL.calls == before + 1


async def test_exact_numbers_reach_the_tool_intact(
    client: httpx.AsyncClient, engine_kind: str
) -> None:
    before = ECHO.calls
    for arguments in ({"n": int(BIG), "x": 1}, f'{{"n": {BIG}, "x": 1}}'):
        # Both engines decide on the number exactly as written (OPA's own arithmetic).
        response = await post_call(client, TESS, call_body("echo", arguments))
        assert response.status_code == 200, response.text
        assert response.json()["output"]["text"].replace(" ", "") == f'{{"n":{BIG},"x":1}}'
    assert ECHO.calls == before + 2


# -- 400 ------------------------------------------------------------------------------------

MALFORMED: Final[list[tuple[str, bytes]]] = [
    ("bad JSON", b'{"id": "1", "name": "add", "arguments": {'),
    ("empty body", b""),
    ("not UTF-8", b'{"id": "1", "name": "\xff"}'),
    ("a JSON array", b'[{"id": "1", "name": "add"}]'),
    ("a JSON string", b'"add"'),
    ("null", b"null"),
    ("unknown member", b'{"id": "1", "name": "add", "arguments": {}, "tenant": "globex"}'),
    ("id not a string", b'{"id": 1, "name": "add", "arguments": {}}'),
    ("id missing", b'{"name": "add", "arguments": {}}'),
    ("name not a string", b'{"id": "1", "name": ["add"], "arguments": {}}'),
    ("arguments an array", b'{"id": "1", "name": "add", "arguments": [1, 2]}'),
    ("arguments a number", b'{"id": "1", "name": "add", "arguments": 3}'),
    ("duplicate member", b'{"id": "1", "id": "2", "name": "add", "arguments": {}}'),
]


async def test_malformed_requests_are_400_malformed_request(
    gateway: RunningGateway, client: httpx.AsyncClient
) -> None:
    for label, raw in MALFORMED:
        response = await client.post(
            "/v1/calls",
            content=raw,
            headers=key(ALICE, **{"Content-Type": "application/json"}),
        )
        body = assert_error(response, 400, "malformed_request")
        assert body["decision_id"] is None, label
    # Nothing was admitted, so nothing reached the policy or the audit trail.
    metrics = (await client.get("/metrics")).text
    assert "gateway_decision_cache_misses_total 0.0" in metrics
    gateway.stop()
    assert gateway.audit_records() == []


INVALID_ARGUMENTS: Final[list[tuple[str, object]]] = [
    ("wrong type", {"a": "two", "b": 3}),
    ("a float for an int", {"a": 1.5, "b": 3}),
    ("unknown argument", {"a": 1, "b": 2, "c": 3}),
    ("missing argument", {"a": 1}),
    ("JSON text that is not JSON", "{a: 1, b: 2}"),
    ("JSON text that is not an object", "[1, 2]"),
    ("no arguments at all", None),
]


async def test_invalid_arguments_are_400_before_any_policy(
    gateway: RunningGateway, client: httpx.AsyncClient
) -> None:
    for index, (label, arguments) in enumerate(INVALID_ARGUMENTS):
        response = await post_call(client, ALICE, call_body("add", arguments, f"bad-{index}"))
        body = assert_error(response, 400, "invalid_arguments")
        assert body["decision_id"] is None, label
    metrics = (await client.get("/metrics")).text
    assert "gateway_decision_cache_misses_total 0.0" in metrics
    assert f'gateway_calls_total{{code="invalid_arguments"}} {len(INVALID_ARGUMENTS)}.0' in metrics
    gateway.stop()
    records = gateway.audit_records()
    assert [r["call_id"] for r in records] == [f"bad-{i}" for i in range(len(INVALID_ARGUMENTS))]
    for record in records:
        assert record["type"] == "outcome"
        assert record["outcome"] == "invalid"
        assert record["code"] == "invalid_arguments"
        assert record["context"]["subject"] == "alice"


# -- 401 ------------------------------------------------------------------------------------

UNAUTHENTICATED: Final[list[tuple[str, dict[str, str]]]] = [
    ("no credentials", {}),
    ("unknown API key", {"X-API-Key": "demo-key-mallory"}),
    ("API key of another case", {"X-API-Key": ALICE.upper()}),
    ("API key with a suffix", {"X-API-Key": ALICE + "x"}),
    ("empty API key", {"X-API-Key": ""}),
    ("API key too long", {"X-API-Key": "k" * 9000}),
    ("the key's SHA-256 instead of the key", {"X-API-Key": key_digest(ALICE)}),
    ("basic authorization", {"Authorization": "Basic YWxpY2U6c2VjcmV0"}),
    ("bearer without a token", {"Authorization": "Bearer"}),
    ("lower-case bearer with a junk token", {"Authorization": "bearer x"}),
    ("the API key as a bearer token", {"Authorization": f"Bearer {ALICE}"}),
    ("a scheme only", {"Authorization": "Token abc"}),
]


async def test_unauthenticated_requests_are_401_and_never_decided(
    gateway: RunningGateway, client: httpx.AsyncClient
) -> None:
    for label, headers in UNAUTHENTICATED:
        for method, path in (("POST", "/v1/calls"), ("GET", "/v1/tools")):
            response = await client.request(
                method,
                path,
                json=call_body("add", {"a": 1, "b": 2}) if method == "POST" else None,
                headers=headers,
            )
            body = assert_error(response, 401, "unauthenticated")
            # This gateway takes API keys only: a caller who sent an Authorization header
            # is told which credential to send instead; a wrong key learns nothing.
            expected = API_KEYS_ONLY if "Authorization" in headers else "authentication required"
            assert body["message"] == expected, label
            assert body["decision_id"] is None
            assert response.headers["www-authenticate"] == API_KEY_CHALLENGE
    metrics = (await client.get("/metrics")).text
    assert "gateway_decision_cache_misses_total 0.0" in metrics
    assert "gateway_calls_total{" not in metrics
    gateway.stop()
    assert gateway.audit_records() == []


async def test_no_policy_is_asked_for_unauthenticated_requests(
    tmp_path: Path, jwt_keys: JwtKeys
) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(jwt_keys.jwks(), encoding="utf-8")
    config = parse_config(
        {
            "engine": {"kind": "opa", "url": "http://127.0.0.1:1"},
            "audit": {"enabled": False},
            "tools": {"modules": ["x:y"]},
            "auth": {
                "api_keys": [{"sha256": key_digest(TESS), "context": dict(API_KEYS[TESS])}],
                "jwt": {
                    "algorithms": ["RS256", "ES256"],
                    "jwks_file": str(jwks),
                    "issuer": ISSUER,
                    "audience": AUDIENCE,
                },
            },
        },
        base=tmp_path,
    )
    authorizer = RecordingAuthorizer(True)
    tool = RecordingTool("echo")
    metrics = GatewayMetrics()

    async def ready() -> bool:
        return True

    app = GatewayApp(
        Gateway([tool], authorizer=authorizer, metrics=metrics),
        authenticator=Authenticator(config.auth),
        ready=ready,
        metrics=metrics,
    )
    rsa_token = jwt.encode(claims(), jwt_keys.rsa_key, algorithm="RS256", headers={"kid": RSA_KID})
    refused = [headers for _, headers in UNAUTHENTICATED] + [
        bearer(jwt.encode(claims(exp=int(time.time()) - 60), jwt_keys.rsa_key, "RS256")),
        bearer(tampered(rsa_token)),
        bearer(unsigned_token({"alg": "none", "typ": "JWT"}, claims())),
        bearer(jwt.encode(claims(aud="someone-else"), jwt_keys.rsa_key, "RS256")),
    ]
    with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10.0) as http:
            for headers in refused:
                response = await http.post("/v1/calls", json=call_body("echo", {}), headers=headers)
                assert response.status_code == 401, (headers, response.text)
            assert authorizer.count == 0
            assert tool.count == 0
            # The same app asks the policy (once) as soon as the caller is authenticated.
            for headers in (key(TESS), bearer(rsa_token)):
                response = await http.post("/v1/calls", json=call_body("echo", {}), headers=headers)
                assert response.status_code == 200, response.text
    assert authorizer.count == 2
    assert tool.count == 2
    seen = [context.as_dict() for _, context in authorizer.calls]
    assert seen[0]["subject"] == "tess"
    assert seen[1] == {"subject": "alice", "roles": ["reader"], "tenant": "acme"}


def _jwt_options(jwks: Path) -> dict[str, object]:
    return {
        "algorithms": ["RS256", "ES256"],
        "jwks_file": str(jwks),
        "issuer": ISSUER,
        "audience": AUDIENCE,
    }


async def test_jwt_bearer_tokens(
    start_gateway: GatewayFactory, engine_kind: str, tmp_path: Path, jwt_keys: JwtKeys
) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(jwt_keys.jwks(), encoding="utf-8")
    gateway = start_gateway(engine_kind, jwt=_jwt_options(jwks))
    rsa_key, ec_key = jwt_keys.rsa_key, jwt_keys.ec_key
    rsa_kid, ec_kid = {"kid": RSA_KID}, {"kid": EC_KID}
    now = int(time.time())
    good = jwt.encode(claims(), rsa_key, "RS256", headers=rsa_kid)
    accepted = {
        "RS256": good,
        "ES256": jwt.encode(claims(), ec_key, "ES256", headers=ec_kid),
    }
    refused: dict[str, tuple[str, str]] = {
        "expired": (
            jwt.encode(claims(iat=now - 600, exp=now - 60), rsa_key, "RS256", headers=rsa_kid),
            "token_expired",
        ),
        "wrong audience": (
            jwt.encode(claims(aud="another-service"), rsa_key, "RS256", headers=rsa_kid),
            "unauthenticated",
        ),
        "wrong issuer": (
            jwt.encode(claims(iss="https://evil.test"), rsa_key, "RS256", headers=rsa_kid),
            "unauthenticated",
        ),
        "missing exp": (
            jwt.encode(claims(exp=None), rsa_key, "RS256", headers=rsa_kid),
            "unauthenticated",
        ),
        "missing aud": (
            jwt.encode(claims(aud=None), rsa_key, "RS256", headers=rsa_kid),
            "unauthenticated",
        ),
        "missing iss": (
            jwt.encode(claims(iss=None), rsa_key, "RS256", headers=rsa_kid),
            "unauthenticated",
        ),
        "missing sub": (
            jwt.encode(claims(sub=None), rsa_key, "RS256", headers=rsa_kid),
            "unauthenticated",
        ),
        "tampered signature": (tampered(good), "unauthenticated"),
        "tampered claims": (
            good.split(".")[0]
            + "."
            + jwt.encode(claims(roles=["treasurer"]), rsa_key, "RS256").split(".")[1]
            + "."
            + good.split(".")[2],
            "unauthenticated",
        ),
        "signed by a stranger": (
            jwt.encode(claims(), jwt_keys.stranger_key, "RS256", headers=rsa_kid),
            "unauthenticated",
        ),
        "alg none": (
            unsigned_token({"alg": "none", "typ": "JWT", **rsa_kid}, claims()),
            "unauthenticated",
        ),
        "alg None without kid": (
            unsigned_token({"alg": "None", "typ": "JWT"}, claims()),
            "unauthenticated",
        ),
        "HS256 keyed with the RSA public key": (
            hmac_token(
                {"alg": "HS256", "typ": "JWT", **rsa_kid},
                claims(),
                jwt_keys.rsa_public_pem().encode(),
            ),
            "unauthenticated",
        ),
        "RS512 (not configured)": (
            jwt.encode(claims(), rsa_key, "RS512", headers=rsa_kid),
            "unauthenticated",
        ),
        "ES256 under the RSA key's kid": (
            jwt.encode(claims(), ec_key, "ES256", headers=rsa_kid),
            "unauthenticated",
        ),
        "RS256 under the EC key's kid": (
            jwt.encode(claims(), rsa_key, "RS256", headers=ec_kid),
            "unauthenticated",
        ),
        "unknown kid": (
            jwt.encode(claims(), rsa_key, "RS256", headers={"kid": "rsa-2"}),
            "unauthenticated",
        ),
        "no kid with two keys": (jwt.encode(claims(), rsa_key, "RS256"), "unauthenticated"),
        "not before in the future": (
            jwt.encode(claims(nbf=now + 600), rsa_key, "RS256", headers=rsa_kid),
            "unauthenticated",
        ),
        "not a JWT": ("not.a.jwt", "unauthenticated"),
        "too long": ("a" * 9000, "unauthenticated"),
    }
    async with gateway.client() as http:
        for label, token in accepted.items():
            response = await http.post(
                "/v1/calls", json=call_body("add", {"a": 1, "b": 2}, label), headers=bearer(token)
            )
            assert response.status_code == 200, (label, response.text)
            assert response.json()["output"]["text"] == "3"
        for label, (token, code) in refused.items():
            response = await http.post(
                "/v1/calls", json=call_body("add", {"a": 1, "b": 2}), headers=bearer(token)
            )
            body = assert_error(response, 401, code)
            assert body["message"] == "authentication required", label
        # Claims become the caller context the policy sees: a reader may not pay.
        response = await http.post(
            "/v1/calls",
            json=call_body(
                "pay", {"from_account": "acct-acme-001", "to_account": "x", "amount": 5}
            ),
            headers=bearer(good),
        )
        assert_error(response, 403, "denied")
    gateway.stop()
    decisions = [r for r in gateway.audit_records() if r["type"] == "decision"]
    assert len(decisions) == 3
    assert {r["context"]["subject"] for r in decisions} == {"alice"}
    assert decisions[0]["context"]["roles"] == ["reader"]


async def test_hs256_tokens_with_a_secret_from_the_environment(
    start_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "a-test-secret-of-at-least-32-bytes-length"  # noqa: S105 - made for this test
    monkeypatch.setenv("GATEWAY_TEST_JWT_SECRET", secret)
    gateway = start_gateway(
        "embedded",
        jwt={
            "algorithms": ["HS256"],
            "secret_env": "GATEWAY_TEST_JWT_SECRET",
            "issuer": ISSUER,
            "audience": AUDIENCE,
            "claims": {"subject": "email", "roles": "groups", "tenant": "org"},
        },
    )
    mapped = claims(sub=None, email="alice@acme.test", groups=["reader"], org="acme")
    async with gateway.client() as http:
        ok = await http.post(
            "/v1/calls",
            json=call_body("add", {"a": 1, "b": 1}),
            headers=bearer(jwt.encode(mapped, secret, "HS256")),
        )
        assert ok.status_code == 200, ok.text
        wrong_secret = jwt.encode(mapped, "another-secret-of-at-least-32-bytes-xx", "HS256")
        assert_error(
            await http.post("/v1/calls", json=call_body("add", {}), headers=bearer(wrong_secret)),
            401,
            "unauthenticated",
        )
    gateway.stop()
    (decision,) = [r for r in gateway.audit_records() if r["type"] == "decision"]
    assert decision["context"]["subject"] == "alice@acme.test"
    assert decision["context"]["roles"] == ["reader"]
    assert decision["context"]["tenant"] == "acme"


# -- 403 ------------------------------------------------------------------------------------


async def test_denied_calls_are_403_with_the_public_message_only(
    gateway: RunningGateway, client: httpx.AsyncClient
) -> None:
    over_limit = {"from_account": "acct-globex-001", "to_account": "acct-x", "amount": 5000}
    cases = [
        # (key, call id, tool, arguments, the policy's public message)
        (BOB, "deny-limit", "pay", over_limit, "the amount exceeds what the caller's roles allow"),
        (
            ALICE,
            "deny-role",
            "pay",
            {"from_account": "acct-acme-001", "to_account": "acct-x", "amount": 5},
            "the caller's roles do not permit this tool",
        ),
        (
            ALICE,
            "deny-path",
            "read_file",
            {"path": "/srv/tenants/acme/../globex/secret.txt"},
            "path is not allowed: '.' and '..' segments are not allowed",
        ),
        (
            CAROL,
            "deny-tenant",
            "pay",
            {"from_account": "acct-globex-001", "to_account": "acct-x", "amount": 5},
            "the requested resource is not available to the caller's tenant",
        ),
    ]
    for api_key, call_id, tool, arguments, message in cases:
        response = await post_call(client, api_key, call_body(tool, arguments, call_id))
        body = assert_error(response, 403, "denied")
        assert body["message"] == message
        assert isinstance(body["decision_id"], str)
        assert "reason" not in response.text
        # Audit-only words of the reasons never reach the caller.
        for leak in ("rbac:", "limits:", "paths:", "tenancy:", "globex", "10000", "treasurer"):
            assert leak not in body["message"], (call_id, leak)
    gateway.stop()
    decisions = {r["call_id"]: r for r in gateway.audit_records() if r["type"] == "decision"}
    outcomes = {r["call_id"]: r for r in gateway.audit_records() if r["type"] == "outcome"}
    for _, call_id, _, _, message in cases:
        assert decisions[call_id]["result"] == "deny"
        assert decisions[call_id]["message"] == message
        assert decisions[call_id]["reasons"], "the audit trail keeps the reasons"
        assert outcomes[call_id]["code"] == "denied"
        assert outcomes[call_id]["decision_id"] == decisions[call_id]["decision_id"]


# -- 404 ------------------------------------------------------------------------------------


async def test_unknown_tools_are_404(gateway: RunningGateway, client: httpx.AsyncClient) -> None:
    for name in ("delete_everything", "", "ADD", "add "):
        response = await post_call(client, ALICE, call_body(name, {}, f"unknown-{name}"))
        body = assert_error(response, 404, "unknown_tool")
        assert body["decision_id"] is None
    gateway.stop()
    records = gateway.audit_records()
    assert len(records) == 4
    assert {(r["type"], r["outcome"], r["code"]) for r in records} == {
        ("outcome", "invalid", "unknown_tool")
    }


# -- 413 ------------------------------------------------------------------------------------


async def test_bodies_over_the_limit_are_413(
    start_gateway: GatewayFactory, engine_kind: str
) -> None:
    gateway = start_gateway(engine_kind, max_body_bytes=1024)
    padded = json.dumps(call_body("add", {"a": 1, "b": 2})).encode()
    at_limit = padded + b" " * (1024 - len(padded))
    over_limit = at_limit + b" "

    async def chunks(total: int) -> AsyncIterator[bytes]:
        yield padded
        for _ in range((total - len(padded)) // 256 + 1):
            yield b" " * 256

    async with gateway.client() as http:
        headers = key(ALICE, **{"Content-Type": "application/json"})
        response = await http.post("/v1/calls", content=at_limit, headers=headers)
        assert response.status_code == 200, response.text
        response = await http.post("/v1/calls", content=over_limit, headers=headers)
        assert response.request.headers["content-length"] == "1025"
        body = assert_error(response, 413, "body_too_large")
        assert "1024" in body["message"]
        # Chunked: no Content-Length to trust, so the limit is enforced while reading.
        response = await http.post("/v1/calls", content=chunks(64 * 1024), headers=headers)
        assert "content-length" not in response.request.headers
        assert response.request.headers["transfer-encoding"] == "chunked"
        assert_error(response, 413, "body_too_large")
        # Small chunked bodies are fine.
        response = await http.post("/v1/calls", content=chunks(600), headers=headers)
        assert response.status_code == 200, response.text
        # Authentication comes first: an oversized anonymous body is 401.
        response = await http.post("/v1/calls", content=over_limit)
        assert_error(response, 401, "unauthenticated")
        # The server stays healthy afterwards.
        assert (await http.get("/healthz")).status_code == 200


# -- 500 ------------------------------------------------------------------------------------


async def test_a_tool_crash_is_500_without_its_text(
    gateway: RunningGateway, client: httpx.AsyncClient
) -> None:
    before = BOOM.calls
    response = await post_call(client, TESS, call_body("boom", {"x": 1}, "crash"))
    body = assert_error(response, 500, "tool_error")
    assert body["message"] == "the tool failed"
    assert isinstance(body["decision_id"], str)
    assert BOOM_TEXT not in response.text
    assert "RuntimeError" not in response.text
    assert "Traceback" not in response.text
    assert BOOM.calls == before + 1
    gateway.stop()
    (outcome,) = [r for r in gateway.audit_records() if r["type"] == "outcome"]
    assert (outcome["outcome"], outcome["code"]) == ("failed", "tool_error")
    assert BOOM_TEXT not in json.dumps(gateway.audit_records())


# -- 503 ------------------------------------------------------------------------------------


@pytest.fixture
def undefined_decision_gateway(
    start_gateway: GatewayFactory,
    engine_kind: str,
    undefined_policy_dir: Path,
    opa_binary: str,
) -> Iterator[RunningGateway]:
    """A service whose policy has no decision for any test caller."""
    if engine_kind == "embedded":
        yield start_gateway("embedded", policies=undefined_policy_dir)
        return
    opa = start_opa(opa_binary, [undefined_policy_dir])
    try:
        yield start_gateway("opa", opa_url=opa.url)
    finally:
        opa.close()


async def test_no_decision_is_503_and_nothing_runs(
    undefined_decision_gateway: RunningGateway,
) -> None:
    gateway = undefined_decision_gateway
    before = ECHO.calls
    async with gateway.client() as http:
        response = await post_call(http, TESS, call_body("echo", {"x": 1}, "undefined"))
        body = assert_error(response, 503, "undefined_decision")
        assert body["message"] == NO_DECISION
        assert body["decision_id"] is None
        assert ECHO.calls == before
        assert (await http.get("/readyz")).status_code == 200
    gateway.stop()
    (decision,) = [r for r in gateway.audit_records() if r["type"] == "decision"]
    assert (decision["result"], decision["code"]) == ("error", "undefined_decision")


async def test_opa_going_away_is_503_engine_unavailable(
    start_gateway: GatewayFactory, opa_binary: str
) -> None:
    opa = start_opa(opa_binary)
    try:
        gateway = start_gateway("opa", opa_url=opa.url)
        async with gateway.client() as http:
            assert (await http.get("/readyz")).json() == {"ready": True}
            response = await post_call(http, TESS, call_body("echo", {"n": 1}))
            assert response.status_code == 200, response.text
            before = ECHO.calls
            opa.kill()
            ready = await http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json() == {"ready": False}
            response = await post_call(http, TESS, call_body("echo", {"n": 2}))
            body = assert_error(response, 503, "engine_unavailable")
            assert body["message"] == NO_DECISION
            assert ECHO.calls == before
            # A decision made before OPA went away may still be served from the cache.
            response = await post_call(http, TESS, call_body("echo", {"n": 1}))
            assert response.status_code == 200, response.text
            opa.restart()
            assert (await http.get("/readyz")).status_code == 200
            response = await post_call(http, TESS, call_body("echo", {"n": 3}))
            assert response.status_code == 200, response.text
    finally:
        opa.close()


async def test_an_unreachable_opa_is_not_ready_and_decides_nothing(
    start_gateway: GatewayFactory,
) -> None:
    # Nothing listens on port 1: the service still starts, but is not ready.
    gateway = start_gateway("opa", opa_url="http://127.0.0.1:1")
    async with gateway.client() as http:
        assert (await http.get("/healthz")).status_code == 200
        ready = await http.get("/readyz")
        assert (ready.status_code, ready.json()) == (503, {"ready": False})
        response = await post_call(http, ALICE, call_body("add", {"a": 1, "b": 2}))
        assert_error(response, 503, "engine_unavailable")
        assert "127.0.0.1:1" not in response.text


async def test_an_audit_failure_is_503_and_nothing_runs(policy_dir: Path) -> None:
    sink = MemorySink()
    tool = RecordingTool("echo")
    metrics = GatewayMetrics()
    engine = EmbeddedEngine.from_directory(policy_dir)
    gateway = Gateway(
        [tool],
        authorizer=PolicyAuthorizer(engine),
        audit=AuditTrail(sink),
        metrics=metrics,
    )
    auth = parse_config(
        {
            "engine": {"kind": "embedded", "policies": str(policy_dir)},
            "audit": {"enabled": False},
            "tools": {"modules": ["x:y"]},
            "auth": {"api_keys": [{"sha256": key_digest(TESS), "context": dict(API_KEYS[TESS])}]},
        },
        base=policy_dir,
    ).auth

    async def ready() -> bool:
        return True

    app = GatewayApp(gateway, authenticator=Authenticator(auth), ready=ready, metrics=metrics)
    with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10.0) as http:
            response = await post_call(http, TESS, call_body("echo", {"n": 1}))
            assert response.status_code == 200, response.text
            assert tool.count == 1
            sink.failing = True
            response = await post_call(http, TESS, call_body("echo", {"n": 2}))
            body = assert_error(response, 503, "audit_failed")
            assert body["message"] == "the call could not be audited; it was not run"
            assert tool.count == 1
            metrics_text = (await http.get("/metrics")).text
            assert 'gateway_calls_total{code="audit_failed"} 1.0' in metrics_text


# -- request ids ----------------------------------------------------------------------------


async def test_request_ids_are_echoed_replaced_and_audited(
    gateway: RunningGateway, client: httpx.AsyncClient
) -> None:
    arguments = {"a": 1, "b": 2}
    valid = ["req-1", "a.b:c_d-e", "x" * 128]
    invalid = [b"x" * 129, b"x" * 200, b"has space", b"semi;colon", "ünïcode".encode(), b""]
    sent_and_echoed: dict[str, str] = {}
    for index, request_id in enumerate(valid):
        response = await post_call(
            client,
            ALICE,
            call_body("add", arguments, f"valid-{index}"),
            **{"X-Request-ID": request_id},
        )
        assert response.status_code == 200, response.text
        assert response.headers["x-request-id"] == request_id
        assert response.json()["request_id"] == request_id
        sent_and_echoed[f"valid-{index}"] = request_id
    for index, bad_id in enumerate(invalid):
        response = await client.post(
            "/v1/calls",
            json=call_body("add", arguments, f"invalid-{index}"),
            headers={b"X-API-Key": ALICE.encode(), b"X-Request-ID": bad_id},
        )
        assert response.status_code == 200, response.text
        replaced = response.headers["x-request-id"]
        assert HEX_ID.fullmatch(replaced), replaced
        assert response.json()["request_id"] == replaced
        sent_and_echoed[f"invalid-{index}"] = replaced
    # Errors carry the request id too, and a missing one is generated.
    response = await post_call(
        client, ALICE, call_body("nope", {}, "err"), **{"X-Request-ID": "err-1"}
    )
    assert_error(response, 404, "unknown_tool")
    assert response.headers["x-request-id"] == "err-1"
    sent_and_echoed["err"] = "err-1"
    response = await post_call(client, ALICE, call_body("add", arguments, "none"))
    assert HEX_ID.fullmatch(response.headers["x-request-id"])
    sent_and_echoed["none"] = response.headers["x-request-id"]
    response = await post_call(
        client, None, call_body("add", arguments), **{"X-Request-ID": "anon"}
    )
    assert_error(response, 401, "unauthenticated")
    assert response.headers["x-request-id"] == "anon"
    assert len(set(sent_and_echoed.values())) == len(sent_and_echoed)
    gateway.stop()
    # Decision records and refusals carry the caller context, request id included; outcome
    # records of executed calls link to their decision record by decision_id.
    records = gateway.audit_records()
    with_context = [r for r in records if "context" in r]
    for record in with_context:
        assert record["context"]["request_id"] == sent_and_echoed[record["call_id"]], record
    assert {r["call_id"] for r in with_context} == set(sent_and_echoed)
    decision_ids = {r["decision_id"] for r in with_context}
    assert all(r["decision_id"] in decision_ids for r in records)


# -- health, readiness, metrics, OpenAPI, tool listing --------------------------------------


async def test_health_readiness_and_openapi(client: httpx.AsyncClient) -> None:
    health = await client.get("/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"ready": True})
    document = await client.get("/openapi.json")
    assert document.status_code == 200
    spec = json.loads(document.content)
    assert spec["openapi"].startswith("3.")
    assert "post" in spec["paths"]["/v1/calls"]
    assert "get" in spec["paths"]["/v1/tools"]
    for path in ("/healthz", "/readyz", "/metrics"):
        assert path in spec["paths"]
    # Only the documented methods.
    assert (await client.get("/v1/calls", headers=key(ALICE))).status_code == 405


async def test_metrics_count_calls_by_code_and_the_decision_cache(
    client: httpx.AsyncClient,
) -> None:
    same = call_body("add", {"a": 1, "b": 2})
    for _ in range(3):  # one miss, then hits: the request id is not part of the decision
        assert (await post_call(client, ALICE, same)).status_code == 200
    assert (await post_call(client, ALICE, call_body("pay", PAYMENT))).status_code == 403
    assert (await post_call(client, ALICE, call_body("nope", {}))).status_code == 404
    assert (await post_call(client, ALICE, call_body("add", {"a": "x"}))).status_code == 400
    assert (await post_call(client, None, same)).status_code == 401
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for line in (
        'gateway_calls_total{code="ok"} 3.0',
        'gateway_calls_total{code="denied"} 1.0',
        'gateway_calls_total{code="unknown_tool"} 1.0',
        'gateway_calls_total{code="invalid_arguments"} 1.0',
        'gateway_http_requests_total{route="calls",status="200"} 3.0',
        'gateway_http_requests_total{route="calls",status="401"} 1.0',
        "gateway_decision_cache_hits_total 2.0",
        "gateway_decision_cache_misses_total 2.0",
        "gateway_decision_cache_entries 1.0",  # pay decisions have a TTL of 0
    ):
        assert line in text, line
    assert re.search(r'gateway_call_seconds_bucket\{code="ok",le="\+Inf"\} 3\.0', text)
    assert "gateway_decision_cache_evictions_total 0.0" in text


async def test_the_tool_list_shows_each_caller_what_its_roles_grant_with_schemas(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/v1/tools", headers=key(BOB, **{"X-Request-ID": "list-1"}))
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "list-1"
    assert [tool["name"] for tool in response.json()["tools"]] == ["pay"]
    response = await client.get("/v1/tools", headers=key(TESS))
    tools = {tool["name"]: tool for tool in response.json()["tools"]}
    assert set(tools) == {"add", "echo", "fail", "boom"}
    assert tools["add"]["input_schema"]["required"] == ["a", "b"]
    assert tools["add"]["description"] == "Add two integers."
    response = await client.get("/v1/tools", headers=key(ALICE))
    assert {tool["name"] for tool in response.json()["tools"]} == {
        "add",
        "fetch_url",
        "query_db",
        "read_file",
        "search",
    }


async def test_a_tool_not_listed_for_a_caller_is_still_decided_at_call_time(
    client: httpx.AsyncClient,
) -> None:
    listed = await client.get("/v1/tools", headers=key(BOB))
    assert "add" not in {tool["name"] for tool in listed.json()["tools"]}
    response = await client.post(
        "/v1/calls", headers=key(BOB), json=call_body("add", {"a": 1, "b": 2}, "x")
    )
    assert response.status_code == 403
    assert response.json()["code"] == "denied"


# -- the audit trail of a session -----------------------------------------------------------


async def test_the_audit_trail_of_a_session_verifies(
    gateway: RunningGateway, client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = [
        (ALICE, call_body("add", {"a": 1, "b": 2}, "allowed"), 200),
        (TESS, call_body("fail", {}, "failed"), 200),
        (ALICE, call_body("pay", PAYMENT, "denied"), 403),
        (ALICE, call_body("add", {"a": "x", "b": 2}, "invalid"), 400),
        (ALICE, call_body("nope", {}, "unknown"), 404),
        (TESS, call_body("boom", {}, "crashed"), 500),
    ]
    for api_key, body, status in calls:
        assert (await post_call(client, api_key, body)).status_code == status
    gateway.stop()
    capsys.readouterr()
    verify_keyed = ["audit", "verify", "--config", str(gateway.config_path)]
    assert cli_main(verify_keyed) == 0
    assert capsys.readouterr().out.startswith(f"ok: {gateway.audit_path}: 10 records")
    records = gateway.audit_records()
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    by_call: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_call.setdefault(record["call_id"], []).append(record)
    expected = {
        "allowed": [("decision", "allow"), ("outcome", "executed")],
        "failed": [("decision", "allow"), ("outcome", "failed")],
        "denied": [("decision", "deny"), ("outcome", "rejected")],
        "crashed": [("decision", "allow"), ("outcome", "failed")],
        "invalid": [("outcome", "invalid")],
        "unknown": [("outcome", "invalid")],
    }
    for call_id, shape in expected.items():
        got = [
            (r["type"], r["result"] if r["type"] == "decision" else r["outcome"])
            for r in by_call[call_id]
        ]
        assert got == shape, (call_id, got)
        if len(by_call[call_id]) == 2:
            decision, outcome = by_call[call_id]
            assert decision["decision_id"] == outcome["decision_id"]
    # Tampering with one record breaks verification.
    lines = gateway.audit_path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = lines[2].replace('"executed"', '"rejected"', 1).replace('"allow"', '"deny"', 1)
    gateway.audit_path.write_text("".join(lines), encoding="utf-8")
    assert cli_main(verify_keyed) == 1
