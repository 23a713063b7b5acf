"""Step-up authorization: a refusal for missing OAuth scopes names them (decision member
``step_up``), the HTTP API answers 403 with ``insufficient_scope`` and the scopes, MCP puts
them in the result's ``_meta``."""

from __future__ import annotations

import json
from typing import Any, Final

import httpx
import pytest

from gateway import ToolOutput
from gateway.mcp import to_call_result
from gateway.policy import MalformedDecisionError, PolicyAuthorizer, read_decision
from gateway.server import GatewayApp, GatewayMetrics
from gateway.service import Authenticator, CallResult, Gateway, ResultCode, api_key_digest
from gateway.service._config import ApiKey, AuthConfig
from gateway.service._oauth import ResourceServer
from gateway.testing import RecordingTool, StaticEngine

STEP_UP: Final = {
    "allow": False,
    "message": "the caller's token lacks a required scope",
    "step_up": {"scopes": ["files.write", "files.read", "files.read"]},
}


def test_a_refusal_names_the_scopes_it_needs_sorted_and_unique() -> None:
    assert read_decision(STEP_UP).required_scopes == ("files.read", "files.write")


@pytest.mark.parametrize(
    "step_up",
    [
        pytest.param({"scopes": []}, id="empty"),
        pytest.param({"scopes": "files.read"}, id="not-an-array"),
        pytest.param({"scopes": ["has space"]}, id="space"),
        pytest.param({"scopes": ['quo"te']}, id="quote"),
        pytest.param({"scopes": ["back\\slash"]}, id="backslash"),
        pytest.param({"scopes": [1]}, id="number"),
        pytest.param({"scopes": ["a"] * 17}, id="too-many"),
        pytest.param({"scopes": ["a"], "extra": 1}, id="extra-member"),
        pytest.param(["a"], id="not-an-object"),
    ],
)
def test_a_malformed_step_up_is_a_malformed_decision(step_up: Any) -> None:
    with pytest.raises(MalformedDecisionError):
        read_decision({**STEP_UP, "step_up": step_up})


def test_an_allowed_decision_cannot_ask_for_a_step_up() -> None:
    with pytest.raises(MalformedDecisionError):
        read_decision({"allow": True, "step_up": {"scopes": ["a"]}})


def _app(resource_server: ResourceServer | None) -> tuple[GatewayApp, RecordingTool]:
    tool = RecordingTool("write_file", {"type": "object"}, output=ToolOutput.from_text("ok"))
    engine = StaticEngine({"gateway/authz/decision": STEP_UP})
    gateway = Gateway([tool], authorizer=PolicyAuthorizer(engine))
    authenticator = Authenticator(
        AuthConfig(api_keys=(ApiKey(sha256=api_key_digest("k"), context={"subject": "a"}),)),
        resource_server=resource_server,
    )

    async def ready() -> bool:
        return True

    app = GatewayApp(gateway, authenticator=authenticator, ready=ready, metrics=GatewayMetrics())
    return app, tool


@pytest.mark.parametrize("oauth", [True, False])
async def test_the_http_api_answers_insufficient_scope_with_the_scopes(oauth: bool) -> None:
    server = (
        ResourceServer(resource="https://gw.example.com/", authorization_servers=["https://as"])
        if oauth
        else None
    )
    app, tool = _app(server)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post(
            "/v1/calls",
            headers={"x-api-key": "k"},
            json={"id": "1", "name": "write_file", "arguments": {}},
        )
    assert response.status_code == 403
    assert response.json()["code"] == "denied"
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope", scope="files.read files.write"')
    assert ("resource_metadata=" in challenge) is oauth
    assert tool.calls == []


def test_an_mcp_refusal_carries_the_required_scopes_in_its_meta() -> None:
    result = CallResult.of(
        ResultCode.DENIED, "no", None, "d-1", required_scopes=("files.read", "files.write")
    )
    listed = to_call_result(result)
    assert listed.is_error
    meta = json.loads(listed.model_dump_json(by_alias=True))["_meta"]
    assert meta["gateway/required_scope"] == "files.read files.write"
