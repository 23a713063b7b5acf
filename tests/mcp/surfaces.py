"""Three real surfaces over one kind of gateway, each sending raw argument bytes.

- the HTTP API (``POST /v1/calls``) under uvicorn, the arguments as JSON text (the exact
  bytes reach admission) or inline in the body;
- MCP streamable HTTP under uvicorn, raw JSON-RPC posts in one legacy session;
- MCP stdio: :meth:`McpFront.serve_streams` on OS pipes in its own thread and event loop.

Every surface has its own gateway with the same ``pay`` tool and the same deciding
authorizer: it allows a payment unless it goes to ``mallory``.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from anyio.streams.file import FileReadStream, FileWriteStream

from gateway import _json
from gateway._authorization import Authorization
from gateway.mcp import McpFront
from gateway.policy import CallerContext
from gateway.server import Authenticator, Gateway, GatewayApp, api_key_digest
from gateway.service._config import ApiKey, AuthConfig
from gateway.service._metrics import GatewayMetrics
from gateway.testing import LiveServer, RecordingAuthorizer, RecordingTool

PAY_SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "maximum": 100},
        "to": {"type": "string"},
        "memo": {},
    },
    "required": ["amount"],
    "additionalProperties": False,
}
KEY = "differential-key"
CONTEXT = {"subject": "alice", "roles": ["payer"], "tenant": "acme"}
LEGACY_VERSION = "2025-06-18"


@dataclass(frozen=True)
class Outcome:
    """What one surface made of one argument document."""

    admitted: bool
    code: str
    ran: bool


def _decide(authorization: Authorization) -> bool:
    value = _json.parse(authorization.arguments)
    return not (isinstance(value, dict) and value.get("to") == "mallory")


def make_gateway() -> tuple[Gateway, RecordingTool]:
    """A gateway with the ``pay`` tool behind the deciding authorizer."""
    tool = RecordingTool("pay", PAY_SCHEMA)
    return Gateway([tool], authorizer=RecordingAuthorizer(_decide)), tool


def authenticator() -> Authenticator:
    """Accepts ``KEY`` as alice."""
    return Authenticator(
        AuthConfig(api_keys=(ApiKey(sha256=api_key_digest(KEY), context=CONTEXT),))
    )


def _outcome(code: str, tool: RecordingTool, before: int) -> Outcome:
    admitted = code not in {"invalid_arguments", "malformed_request", "unknown_tool", "parse_error"}
    return Outcome(admitted, code, tool.count > before)


class HttpApi:
    """The HTTP API under uvicorn."""

    def __init__(self) -> None:
        self.gateway, self.tool = make_gateway()
        app = GatewayApp(
            self.gateway,
            authenticator=authenticator(),
            ready=_ready,
            metrics=GatewayMetrics(None),
        )
        self._server = LiveServer(app).start()
        self._http = httpx.Client(base_url=self._server.url, headers={"x-api-key": KEY}, timeout=30)

    def _post(self, body: bytes) -> Outcome:
        before = self.tool.count
        response = self._http.post(
            "/v1/calls", content=body, headers={"content-type": "application/json"}
        )
        data = response.json()
        code = "ok" if response.status_code == 200 and not data.get("is_error") else data["code"]
        return _outcome(code, self.tool, before)

    def as_text(self, arguments: bytes) -> Outcome:
        """The arguments as a JSON string: admission gets exactly these bytes."""
        text = arguments.decode("utf-8")
        return self._post(json.dumps({"id": "c1", "name": "pay", "arguments": text}).encode())

    def inline(self, arguments: bytes) -> Outcome:
        """The arguments as the body's ``arguments`` member, byte for byte."""
        return self._post(b'{"id": "c1", "name": "pay", "arguments": ' + arguments + b"}")

    def close(self) -> None:
        self._http.close()
        self._server.stop()


async def _ready() -> bool:
    return True


def tool_call(request_id: int, arguments: bytes, name: str = "pay") -> bytes:
    """A ``tools/call`` request whose ``arguments`` member is exactly ``arguments``."""
    head = f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
    return (head + f'"params": {{"name": "{name}", "arguments": ').encode() + arguments + b"}}"


def initialize(request_id: int = 0) -> bytes:
    """A legacy ``initialize`` request."""
    params = {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "differential", "version": "1"},
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}
    return json.dumps(message).encode()


INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'


def mcp_outcome(answer: dict[str, Any], tool: RecordingTool, before: int) -> Outcome:
    """The outcome of a JSON-RPC answer to a tool call."""
    if "error" in answer:
        code = "parse_error" if answer["error"]["code"] == -32700 else "protocol_error"
        return Outcome(False, code, tool.count > before)
    return _outcome(answer["result"]["_meta"]["gateway/code"], tool, before)


def sse_messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE or JSON response."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return [response.json()]
    messages = []
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            messages.append(json.loads(line[5:]))
    return messages


class McpHttp:
    """MCP streamable HTTP under uvicorn, one legacy session opened with raw posts."""

    def __init__(self) -> None:
        self.gateway, self.tool = make_gateway()
        front = McpFront(self.gateway, authenticator=authenticator())
        self._server = LiveServer(front.http_app()).start()
        self.http = httpx.Client(
            base_url=self._server.url,
            headers={"x-api-key": KEY, "accept": "application/json, text/event-stream"},
            timeout=30,
        )
        opened = self.post(initialize())
        self.session = opened.headers["mcp-session-id"]
        self.post(INITIALIZED, session=True)
        self._next = 1

    def post(self, body: bytes, *, session: bool = False) -> httpx.Response:
        headers = {"content-type": "application/json"}
        if session:
            headers |= {"mcp-session-id": self.session, "mcp-protocol-version": LEGACY_VERSION}
        return self.http.post("/mcp", content=body, headers=headers)

    def call(self, arguments: bytes) -> Outcome:
        before = self.tool.count
        self._next += 1
        response = self.post(tool_call(self._next, arguments), session=True)
        if response.status_code == 400:
            return mcp_outcome(response.json(), self.tool, before)
        (answer,) = [m for m in sse_messages(response) if m.get("id") == self._next]
        return mcp_outcome(answer, self.tool, before)

    def close(self) -> None:
        self.http.close()
        self._server.stop()


class McpStdio:
    """The stdio transport on OS pipes, served in its own thread."""

    def __init__(self) -> None:
        self.gateway, self.tool = make_gateway()
        self._front = McpFront(self.gateway, stdio_context=CallerContext(CONTEXT))
        server_in, self._to_server = os.pipe()
        self._from_server, server_out = os.pipe()
        self._server_files = (os.fdopen(server_in, "rb", 0), os.fdopen(server_out, "wb", 0))
        self._writer = os.fdopen(self._to_server, "wb", 0)
        self._reader = os.fdopen(self._from_server, "rb")
        self._thread = threading.Thread(target=self._run, name="mcp-stdio", daemon=True)
        self._thread.start()
        self._next = 1
        self.send(initialize())
        self.answer(0)
        self.send(INITIALIZED)

    def _run(self) -> None:
        stdin, stdout = self._server_files

        async def main() -> None:
            await self._front.serve_streams(FileReadStream(stdin), FileWriteStream(stdout))

        anyio.run(main)
        stdout.close()

    def send(self, line: bytes) -> None:
        self._writer.write(line + b"\n")

    def answer(self, request_id: int | None) -> dict[str, Any]:
        while True:
            line = self._reader.readline()
            assert line, "the stdio server closed its output"
            message: dict[str, Any] = json.loads(line)
            if "method" in message:
                continue
            if message.get("id") == request_id or ("error" in message and message["id"] is None):
                return message

    def call(self, arguments: bytes) -> Outcome:
        before = self.tool.count
        self._next += 1
        line = tool_call(self._next, arguments)
        self.send(line)
        answer = self.answer(self._next)
        return mcp_outcome(answer, self.tool, before)

    def close(self) -> None:
        self._writer.close()
        self._thread.join(30)
        self._reader.close()
        self._server_files[0].close()
