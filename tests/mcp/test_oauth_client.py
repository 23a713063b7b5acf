"""An MCP client that speaks only OAuth (the MCP Python SDK's client-credentials provider)
against the gateway: from the 401 to a listed tool, step by step.

The authorization server is a minimal one served here on loopback (RFC 8414 metadata, a
JWKS, a client-credentials token endpoint that mints RS256 tokens for the RFC 8707
``resource`` asked for); the gateway validates its tokens through the JWKS URL.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import time
from typing import Any, Final

import httpx2
import jwt
import uvicorn
from mcp import Client
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway import ToolOutput
from gateway.mcp import McpFront
from gateway.policy import DEFAULT_VISIBILITY_PATH, PolicyAuthorizer, ToolVisibility
from gateway.service import Authenticator, Gateway
from gateway.service._config import AuthConfig, JwtConfig
from gateway.service._oauth import JwksCache, ResourceServer
from gateway.testing import RecordingTool, StaticEngine
from tests.mcp.conftest import serving
from tests.service.test_oauth import KEYS, _jwk

CLIENT_ID: Final = "report-agent"
CLIENT_SECRET: Final = "s3cret-client-secret"  # noqa: S105 - the test's own client


class _Storage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def _authorization_server(issuer: list[str], seen: list[str]) -> Starlette:
    async def metadata(request: Request) -> Response:
        seen.append(f"AS GET {request.url.path}")
        return JSONResponse(
            {
                "issuer": issuer[0],
                "authorization_endpoint": f"{issuer[0]}/authorize",
                "token_endpoint": f"{issuer[0]}/token",
                "jwks_uri": f"{issuer[0]}/jwks",
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                "response_types_supported": ["code"],
            }
        )

    async def jwks(request: Request) -> Response:
        seen.append("AS GET /jwks")
        return JSONResponse({"keys": [_jwk("a")]})

    async def token(request: Request) -> Response:
        form = await request.form()
        basic = request.headers.get("authorization", "")
        expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if form.get("grant_type") != "client_credentials" or basic != f"Basic {expected}":
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        seen.append(f"AS POST /token resource={form.get('resource')} scope={form.get('scope')}")
        now = int(time.time())
        claims = {
            "iss": issuer[0],
            "sub": CLIENT_ID,
            "aud": form.get("resource"),
            "scope": form.get("scope"),
            "iat": now,
            "exp": now + 300,
        }
        access = jwt.encode(claims, KEYS["a"], algorithm="RS256", headers={"kid": "a"})
        return JSONResponse({"access_token": access, "token_type": "Bearer", "expires_in": 300})

    return Starlette(
        routes=[
            Route("/.well-known/oauth-authorization-server", metadata),
            Route("/.well-known/openid-configuration", metadata),
            Route("/jwks", jwks),
            Route("/token", token, methods=["POST"]),
        ]
    )


def _shown(document: dict[str, Any]) -> Any:
    # The agent sees "search" when its token has the scope tools.read.
    scopes = document["context"].get("scopes", [])
    return document["tool"]["name"] == "search" and "tools.read" in scopes


async def test_an_oauth_only_mcp_client_gets_from_a_401_to_its_tools() -> None:
    seen: list[str] = []
    issuer: list[str] = []
    engine = StaticEngine({DEFAULT_VISIBILITY_PATH: _shown})
    tools = [
        RecordingTool(name, {"type": "object"}, output=ToolOutput.from_text("ok"))
        for name in ("search", "delete")
    ]
    gateway = Gateway(tools, authorizer=PolicyAuthorizer(engine))
    as_server = uvicorn.Server(
        uvicorn.Config(_authorization_server(issuer, seen), log_level="warning", access_log=False)
    )
    async with serving(as_server) as as_url:
        issuer.append(as_url)

        async def gateway_log(request: httpx2.Request) -> None:
            seen.append(
                f"client {request.method} {request.url.host}:{request.url.port}{request.url.path}"
            )

        async def gateway_answer(response: httpx2.Response) -> None:
            if response.status_code == 401:
                seen.append(f"  <- 401 {response.headers.get('www-authenticate', '')}")

        # The resource is the URL the client connects to (the SDK checks the metadata's
        # resource against it): the socket is bound first, the gateway built for its port.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        resource = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        authenticator = Authenticator(
            AuthConfig(jwt=JwtConfig(algorithms=("RS256",), jwks="{}", issuer=as_url)),
            resource_server=ResourceServer(
                resource=resource, authorization_servers=[as_url], scopes_supported=["tools.read"]
            ),
            jwks=JwksCache(f"{as_url}/jwks", min_refetch_s=0),
        )
        front = McpFront(gateway, authenticator=authenticator, visibility=ToolVisibility(engine))
        mcp_server = uvicorn.Server(
            uvicorn.Config(front.http_app(), log_level="warning", ws="none", access_log=False)
        )
        task = asyncio.create_task(mcp_server.serve(sockets=[sock]))
        try:
            provider = ClientCredentialsOAuthProvider(
                server_url=resource,
                storage=_Storage(),
                client_id=CLIENT_ID,
                client_secret=CLIENT_SECRET,
                scope="tools.read",
                issuer=as_url,
            )
            async with (
                httpx2.AsyncClient(
                    auth=provider,
                    timeout=30,
                    event_hooks={"request": [gateway_log], "response": [gateway_answer]},
                ) as http,
                Client(streamable_http_client(resource, http_client=http), cache=None) as client,
            ):
                listed = [tool.name for tool in (await client.list_tools()).tools]
        finally:
            mcp_server.should_exit = True
            await task
    assert listed == ["search"]
    assert any(line.startswith("  <- 401 Bearer resource_metadata=") for line in seen), seen
    assert any("/.well-known/oauth-protected-resource" in line for line in seen), seen
    assert any(line.startswith(f"AS POST /token resource={resource}") for line in seen), seen
    print("\n".join(seen))
