"""One authentication middleware in front of both HTTP surfaces: request id, 401, scope."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from gateway import ToolDefinition, ToolOutput
from gateway.audit import AuditTrail, MemorySink
from gateway.mcp import McpFront
from gateway.policy import CallerContext
from gateway.server import GatewayApp
from gateway.service import (
    CALLER_SCOPE_KEY,
    PRINCIPAL_SCOPE_KEY,
    REQUEST_ID_SCOPE_KEY,
    ApiKey,
    AuthConfig,
    AuthenticationMiddleware,
    Authenticator,
    Gateway,
    GatewayMetrics,
    api_key_digest,
    request_id_of,
)
from gateway.service._auth import API_KEYS_ONLY
from gateway.service._config import JwtConfig
from gateway.service._middleware import (
    API_KEY_CHALLENGE,
    REQUEST_ID_PATTERN,
    WWW_AUTHENTICATE,
    new_request_id,
)
from gateway.testing import RecordingAuthorizer

PACKAGE = Path(__file__).resolve().parents[2] / "gateway"
ALICE = {"subject": "alice", "roles": ["reader"], "tenant": "acme"}


def _authenticator() -> Authenticator:
    return Authenticator(
        AuthConfig(api_keys=(ApiKey(sha256=api_key_digest("alice-key"), context=ALICE),))
    )


class _Echo:
    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            "echo",
            {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
        )

    async def call(self, invocation: Any) -> ToolOutput:
        return ToolOutput.from_text("echoed")


async def _ready() -> bool:
    return True


def _http_app(gateway: Gateway) -> GatewayApp:
    return GatewayApp(
        gateway, authenticator=_authenticator(), ready=_ready, metrics=GatewayMetrics(None)
    )


def _mcp_app(gateway: Gateway) -> Any:
    return McpFront(gateway, authenticator=_authenticator()).http_app()


async def _post(app: Any, path: str, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.post(path, json={"id": "c-1", "name": "echo"}, headers=headers)


async def test_both_surfaces_refuse_without_credentials_with_the_same_401() -> None:
    gateway = Gateway([_Echo()], authorizer=RecordingAuthorizer(True))
    sent = {"x-request-id": "req-7", "accept": "application/json, text/event-stream"}

    http = await _post(_http_app(gateway), "/v1/calls", sent)
    mcp = await _post(_mcp_app(gateway), "/mcp", sent)

    for response in (http, mcp):
        assert response.status_code == 401
        # Only API keys are configured: the challenge names the header, not a bearer scheme.
        assert response.headers["www-authenticate"] == API_KEY_CHALLENGE
        assert response.headers["x-request-id"] == "req-7"
        assert response.json() == {
            "code": "unauthenticated",
            "message": "authentication required",
            "decision_id": None,
            "request_id": "req-7",
        }


async def test_the_http_api_hands_the_policy_the_caller_context_and_the_trail_the_request_id() -> (
    None
):
    authorizer = RecordingAuthorizer(True)
    sink = MemorySink()
    gateway = Gateway([_Echo()], authorizer=authorizer, audit=AuditTrail(sink))
    app = _http_app(gateway)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.post(
            "/v1/calls",
            json={"id": "c-1", "name": "echo", "arguments": {"text": "hi"}},
            headers={"x-api-key": "alice-key", "x-request-id": "req-8"},
        )

    assert response.status_code == 200, response.text
    assert response.json()["request_id"] == "req-8"
    assert [context for _, context in authorizer.calls] == [CallerContext(ALICE)]
    decision = next(record for record in sink.records if record["type"] == "decision")
    assert decision["context"] == {**ALICE, "request_id": "req-8"}


async def test_the_middleware_puts_identity_and_request_id_beside_each_other_in_the_scope() -> None:
    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(dict(scope))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = AuthenticationMiddleware(app, _authenticator(), new_id=lambda: "fresh")
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        await client.get("/x", headers={"x-api-key": "alice-key", "x-request-id": "bad id!"})

    caller = seen[0][CALLER_SCOPE_KEY]
    assert caller == CallerContext(ALICE)
    assert caller.get("request_id") is None
    assert seen[0][REQUEST_ID_SCOPE_KEY] == "fresh"
    assert seen[0][PRINCIPAL_SCOPE_KEY].startswith("api-key:")


async def test_paths_outside_the_authenticated_ones_pass_with_only_a_request_id() -> None:
    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(dict(scope))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    refused: list[str] = []
    middleware = AuthenticationMiddleware(
        app,
        _authenticator(),
        paths={"/v1/calls"},
        on_refusal=lambda scope: refused.append(scope["path"]),
    )
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        open_answer = await client.get("/healthz")
        closed_answer = await client.post("/v1/calls")

    assert (open_answer.status_code, closed_answer.status_code) == (204, 401)
    assert CALLER_SCOPE_KEY not in seen[0]
    assert REQUEST_ID_SCOPE_KEY in seen[0]
    assert refused == ["/v1/calls"]


@given(st.text(max_size=200))
def test_a_request_id_is_kept_exactly_when_it_fits_the_pattern_and_always_fits(
    given_id: str,
) -> None:
    chosen = request_id_of({"x-request-id": given_id}, new_id=lambda: "fresh")

    assert REQUEST_ID_PATTERN.fullmatch(chosen)
    assert (chosen == given_id) == bool(REQUEST_ID_PATTERN.fullmatch(given_id))


def _string_constants(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_the_challenge_the_401_message_and_the_request_id_pattern_are_written_once() -> None:
    written: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for text in _string_constants(path):
            for needle in ('Bearer realm="gateway"', "A-Za-z0-9._:-", "WWW-Authenticate"):
                if needle in text:
                    written.setdefault(needle, set()).add(str(path.relative_to(PACKAGE)))

    assert written == {
        'Bearer realm="gateway"': {"service/_middleware.py"},
        "A-Za-z0-9._:-": {"service/_middleware.py"},
        "WWW-Authenticate": {"service/_middleware.py"},
    }


async def test_a_bearer_token_where_only_api_keys_are_taken_is_told_to_send_an_api_key() -> None:
    gateway = Gateway([_Echo()], authorizer=RecordingAuthorizer(True))
    for app, path in ((_http_app(gateway), "/v1/calls"), (_mcp_app(gateway), "/mcp")):
        for header in ("Bearer alice-key", "Basic YWxpY2U6eA==", "Token alice-key"):
            response = await _post(
                app,
                path,
                {"authorization": header, "accept": "application/json, text/event-stream"},
            )
            assert response.status_code == 401
            assert response.json()["message"] == API_KEYS_ONLY
            assert response.headers["www-authenticate"] == API_KEY_CHALLENGE
        # A wrong API key is not told anything about the kind of credential.
        wrong = await _post(app, path, {"x-api-key": "alice-kex", "accept": "application/json"})
        assert wrong.json()["message"] == "authentication required"


async def test_where_bearer_tokens_are_taken_the_challenge_is_bearer() -> None:
    jwt_config = JwtConfig(
        algorithms=("HS256",), secret=b"s" * 32, issuer="https://issuer.test", audience="gw"
    )
    authenticator = Authenticator(AuthConfig(jwt=jwt_config))
    app = GatewayApp(
        Gateway([_Echo()], authorizer=RecordingAuthorizer(True)),
        authenticator=authenticator,
        ready=_ready,
        metrics=GatewayMetrics(None),
    )
    response = await _post(app, "/v1/calls", {"authorization": "Bearer not.a.token"})

    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith(WWW_AUTHENTICATE)
    assert response.json()["message"] == "authentication required"


def test_fresh_request_ids_are_32_hex_digits_and_distinct() -> None:
    ids = {new_request_id() for _ in range(10_000)}

    assert len(ids) == 10_000
    assert all(re.fullmatch(r"[0-9a-f]{32}", found) for found in ids)


def test_a_forked_process_does_not_repeat_its_parents_request_ids() -> None:
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        os.write(writer, new_request_id().encode())
        os._exit(0)
    os.close(writer)
    os.waitpid(child, 0)
    theirs = os.read(reader, 64).decode()
    os.close(reader)

    assert theirs != new_request_id()
