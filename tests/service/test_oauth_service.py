"""``[auth.oauth]`` and ``[auth.jwt] jwks_url``: one configuration, the same resource server
in front of the HTTP API and MCP; what a client that speaks only OAuth sees from a 401 on."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import jwt
import pytest

from gateway.mcp import McpService
from gateway.server import build_service, parse_config
from gateway.service import ConfigError
from tests.service.test_oauth import ISSUER, KEYS, RESOURCE, _Jwks

REPO: Final = Path(__file__).resolve().parents[2]
WELL_KNOWN: Final = "https://gateway.example.com/.well-known/oauth-protected-resource/mcp"


@pytest.fixture
def jwks() -> Iterator[_Jwks]:
    server = _Jwks()
    yield server
    server.close()


def _config(tmp_path: Path, jwks_url: str, **oauth: Any) -> dict[str, Any]:
    return {
        "engine": {"kind": "embedded", "bundle": str(REPO / "bundles" / "policies.tar.gz")},
        "audit": {"path": str(tmp_path / "audit.jsonl"), "unkeyed": True},
        "auth": {
            "jwt": {"jwks_url": jwks_url, "issuer": ISSUER, "max_lifetime_s": 3600},
            "oauth": {
                "resource": RESOURCE,
                "authorization_servers": [ISSUER],
                "scopes_supported": ["tools.read"],
                **oauth,
            },
        },
        "tools": {"modules": ["examples.example_tools:TOOLS"]},
    }


def _token(**claims: Any) -> str:
    now = int(time.time())
    body = {
        "iss": ISSUER,
        "aud": RESOURCE,
        "sub": "alice",
        "roles": ["reader"],
        "tenant": "acme",
        "scope": "tools.read",
        "iat": now,
        "exp": now + 600,
        **claims,
    }
    return jwt.encode(body, KEYS["a"], algorithm="RS256", headers={"kid": "a"})


async def test_an_oauth_only_client_discovers_the_authorization_server_from_a_401(
    tmp_path: Path, jwks: _Jwks
) -> None:
    config = parse_config(_config(tmp_path, jwks.url), base=tmp_path)
    service = build_service(config)
    transport = httpx.ASGITransport(app=service.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        # 1. A request without a token: 401, and the challenge names the metadata.
        first = await client.get("/v1/tools")
        # 2. The metadata names the authorization server and the resource (the audience).
        metadata = await client.get("/.well-known/oauth-protected-resource/mcp")
        # 3. A token from that server for that resource is accepted.
        listed = await client.get("/v1/tools", headers={"authorization": f"Bearer {_token()}"})
        # A token for another resource is refused, naming the metadata again.
        other = await client.get(
            "/v1/tools",
            headers={"authorization": f"Bearer {_token(aud='https://other.example.com')}"},
        )
    assert first.status_code == 401
    assert first.headers["www-authenticate"] == f'Bearer resource_metadata="{WELL_KNOWN}"'
    assert metadata.json()["authorization_servers"] == [ISSUER]
    assert metadata.json()["resource"] == RESOURCE
    assert listed.status_code == 200
    assert {tool["name"] for tool in listed.json()["tools"]} <= {
        "read_file",
        "search",
        "add",
        "fetch_url",
        "query_db",
    }
    assert other.status_code == 401
    assert 'error="invalid_token"' in other.headers["www-authenticate"]


async def test_mcp_over_http_has_the_same_resource_server(tmp_path: Path, jwks: _Jwks) -> None:
    config = parse_config(_config(tmp_path, jwks.url), base=tmp_path)
    service = McpService(config)
    try:
        transport = httpx.ASGITransport(app=service.front.http_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            refused = await client.post("/mcp", json={})
            metadata = await client.get("/.well-known/oauth-protected-resource/mcp")
    finally:
        await service.aclose()
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == f'Bearer resource_metadata="{WELL_KNOWN}"'
    assert metadata.json()["resource"] == RESOURCE


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"resource": "http://gateway.example.com/mcp"}, "auth.oauth.resource"),
        pytest.param({"resource": None}, "auth.oauth.resource"),
        pytest.param({"authorization_servers": []}, "auth.oauth.authorization_servers"),
        pytest.param({"scopes_supported": ['a"b']}, "auth.oauth"),
    ],
)
def test_an_oauth_table_that_cannot_protect_is_refused(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    data = _config(tmp_path, "https://auth.example.com/jwks.json")
    oauth = {**data["auth"]["oauth"], **change}
    data["auth"]["oauth"] = {key: value for key, value in oauth.items() if value is not None}
    with pytest.raises(ConfigError, match=message):
        parse_config(data, base=tmp_path)


def test_oauth_needs_jwt_and_one_audience(tmp_path: Path) -> None:
    data = _config(tmp_path, "https://auth.example.com/jwks.json")
    without = {**data, "auth": {"oauth": data["auth"]["oauth"]}}
    with pytest.raises(ConfigError, match=r"auth\.oauth: needs"):
        parse_config(without, base=tmp_path)
    data["auth"]["jwt"]["audience"] = "https://elsewhere.example.com"
    with pytest.raises(ConfigError, match=r"auth\.jwt\.audience"):
        parse_config(data, base=tmp_path)


@pytest.mark.parametrize(
    ("jwt_change", "message"),
    [
        pytest.param({"jwks_url": "http://auth.example.com/jwks.json"}, "jwks_url"),
        pytest.param({"jwks_file": "x.json"}, "exactly one"),
        pytest.param({"max_lifetime_s": 0}, "max_lifetime_s"),
    ],
)
def test_a_jwks_url_setting_that_would_not_fail_closed_is_refused(
    tmp_path: Path, jwt_change: dict[str, Any], message: str
) -> None:
    (tmp_path / "x.json").write_text('{"keys": []}')
    data = _config(tmp_path, "https://auth.example.com/jwks.json")
    data["auth"]["jwt"].update(jwt_change)
    with pytest.raises(ConfigError, match=message):
        parse_config(data, base=tmp_path)


def test_a_refused_jwks_url_is_not_quoted_in_the_error(tmp_path: Path) -> None:
    secret = hashlib.sha256(b"x").hexdigest()
    data = _config(tmp_path, f"http://auth.example.com/{secret}")
    with pytest.raises(ConfigError) as refused:
        parse_config(data, base=tmp_path)
    assert secret not in str(refused.value)
