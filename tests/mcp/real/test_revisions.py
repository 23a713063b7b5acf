"""Protocol revisions on the wire: raw JSON-RPC to ``gateway mcp`` over stdio and HTTP.

The gateway is dual-era (MCP 2026-07-28, "Versioning and Compatibility"):

- legacy revisions (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25) are negotiated by the
  ``initialize`` handshake: the server answers the revision the client asked for when it
  supports it, else its latest handshake revision (2025-11-25); over HTTP every later
  request carries ``MCP-Protocol-Version`` (absent means 2025-03-26; an unsupported value
  is 400 Bad Request);
- the current revision, 2026-07-28, has no handshake: every request carries its revision in
  ``_meta`` (and over HTTP in ``MCP-Protocol-Version``, which must match, as must
  ``Mcp-Method``/``Mcp-Name``); an unsupported revision is ``UnsupportedProtocolVersion``
  (-32022) listing the supported ones, a mismatch is ``HeaderMismatch`` (-32020), both HTTP
  400, and ``server/discover`` tells the supported revisions.

The real SDK clients cover the revisions they can choose (test_fidelity: the Python client
at 2025-11-25 and 2026-07-28, the TypeScript client at 2025-11-25, the Inspector legacy and
modern); the revisions no installed client can ask for are driven here, and each one serves
an allowed call and refuses a denied one before it reaches the upstream.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.mcp.real.conftest import (
    API_KEY,
    Compiled,
    HttpGateway,
    Peers,
    Upstreams,
    gateway_stdio,
    make_upstreams,
    running_http,
    write_gateway_config,
)

LEGACY = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN = "2026-07-28"
LATEST_HANDSHAKE = "2025-11-25"
PV = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO = {"name": "raw-json-rpc", "version": "1.0.0"}


def modern_meta(version: str = MODERN) -> dict[str, Any]:
    return {
        PV: version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }


def initialize(version: str, request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT_INFO},
    }


def call(request_id: int, name: str, arguments: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, **params},
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class RawStdio:
    """``gateway mcp`` over stdio, spoken to line by line."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request; its response (notifications and server requests are passed over)."""
        self.send(message)
        while True:
            line = self._lines.get(timeout=120)
            assert line, "the gateway closed stdout"
            answer: dict[str, Any] = json.loads(line)
            if answer.get("id") == message["id"] and "method" not in answer:
                return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(30)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture(scope="module")
def lean(
    peers: Peers, compiled: Compiled, tmp_path_factory: pytest.TempPathFactory, world: Any
) -> tuple[Upstreams, list[str]]:
    """One real upstream (server-everything, recorded) behind the gateway: quick to start."""
    tmp = tmp_path_factory.mktemp("revisions")
    upstreams = make_upstreams(tmp, compiled.tenants)
    config = write_gateway_config(
        tmp, peers, upstreams, names=("everything",), bundle=compiled.bundle
    )
    return upstreams, gateway_stdio(config)


@pytest.fixture
def stdio(lean: tuple[Upstreams, list[str]]) -> Iterator[RawStdio]:
    """A fresh process: a handshake is once per stdio connection."""
    gateway = RawStdio(lean[1])
    try:
        yield gateway
    finally:
        gateway.close()


@pytest.fixture(scope="module")
def modern_stdio(lean: tuple[Upstreams, list[str]]) -> Iterator[RawStdio]:
    """One process for the 2026-07-28 requests: each stands alone (no handshake)."""
    gateway = RawStdio(lean[1])
    try:
        yield gateway
    finally:
        gateway.close()


def _ok(answer: dict[str, Any], text: str) -> None:
    result = answer["result"]
    assert result["_meta"]["gateway/code"] == "ok", answer
    assert result["content"] == [{"type": "text", "text": text}]


def _denied(answer: dict[str, Any]) -> None:
    result = answer["result"]
    assert result["isError"] is True
    assert result["_meta"]["gateway/code"] == "denied"


def _reached(upstreams: Upstreams, marker: str) -> bool:
    return any(marker in json.dumps(c) for c in upstreams.calls("everything"))


# --- stdio ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", LEGACY)
def test_stdio_initialize_answers_the_earlier_revision_asked_for_and_serves_calls_at_it(
    version: str, stdio: RawStdio, lean: tuple[Upstreams, list[str]]
) -> None:
    answer = stdio.request(initialize(version))
    assert answer["result"]["protocolVersion"] == version
    assert answer["result"]["capabilities"]["tools"] is not None
    stdio.send(INITIALIZED)
    listed = stdio.request({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert "echo" in {tool["name"] for tool in listed["result"]["tools"]}
    _ok(stdio.request(call(3, "echo", {"message": f"at {version}"})), f"Echo: at {version}")
    _denied(stdio.request(call(4, "get-env", {"marker": f"stdio-{version}"})))
    assert _reached(lean[0], f"at {version}")
    assert not _reached(lean[0], f"stdio-{version}")


@pytest.mark.parametrize("version", ["1900-01-01", MODERN, "not-a-version"])
def test_stdio_initialize_with_a_revision_it_does_not_handshake_is_answered_with_its_latest(
    version: str, stdio: RawStdio
) -> None:
    answer = stdio.request(initialize(version))
    assert answer["result"]["protocolVersion"] == LATEST_HANDSHAKE
    stdio.send(INITIALIZED)
    _ok(stdio.request(call(2, "echo", {"message": "fallback"})), "Echo: fallback")


def test_stdio_serves_2026_07_28_per_request_without_a_handshake(
    modern_stdio: RawStdio, lean: tuple[Upstreams, list[str]]
) -> None:
    meta = modern_meta()
    discovered = modern_stdio.request(
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}
    )["result"]
    # Every revision served: per request and through the handshake, newest first.
    assert discovered["supportedVersions"] == [MODERN, *reversed(LEGACY)]
    assert discovered["capabilities"]["tools"] is not None
    listed = modern_stdio.request(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}}
    )["result"]
    assert listed["resultType"] == "complete"
    assert "echo" in {tool["name"] for tool in listed["tools"]}
    answer = modern_stdio.request(call(3, "echo", {"message": "modern"}, _meta=meta))
    _ok(answer, "Echo: modern")
    assert answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "gateway"
    _denied(modern_stdio.request(call(4, "get-env", {"marker": "stdio-modern"}, _meta=meta)))
    assert not _reached(lean[0], "stdio-modern")


@pytest.mark.parametrize("version", ["1900-01-01", "2025-11-25", "2026-01-01"])
def test_stdio_a_request_at_an_unsupported_revision_is_refused_with_the_supported_ones(
    version: str, modern_stdio: RawStdio, lean: tuple[Upstreams, list[str]]
) -> None:
    marker = f"stdio-unsupported-{version}"
    answer = modern_stdio.request(call(1, "echo", {"message": marker}, _meta=modern_meta(version)))
    error = answer["error"]
    assert error["code"] == -32022
    assert error["data"]["requested"] == version
    assert MODERN in error["data"]["supported"]
    assert not _reached(lean[0], marker)


# --- streamable HTTP ------------------------------------------------------------------------

HEADERS = {
    "X-API-Key": API_KEY,
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def _body(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response (plain JSON or one SSE ``data:`` event)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        messages = [json.loads(d) for d in data if d]
        answers = [m for m in messages if "method" not in m]
        assert len(answers) == 1, response.text
        answer: dict[str, Any] = answers[0]
        return answer
    parsed: dict[str, Any] = response.json()
    return parsed


@pytest.fixture(scope="module")
def lean_http(lean: tuple[Upstreams, list[str]]) -> Iterator[HttpGateway]:
    config = lean[1][lean[1].index("--config") + 1]
    from pathlib import Path

    with running_http(Path(config)) as gateway:
        yield gateway


@pytest.fixture
def http(lean_http: HttpGateway) -> Iterator[httpx.Client]:
    base = lean_http.url.removesuffix("/mcp")
    with httpx.Client(base_url=base, headers=HEADERS, timeout=60) as client:
        yield client


def _session(http: httpx.Client, version: str) -> dict[str, str]:
    response = http.post("/mcp", json=initialize(version))
    assert response.status_code == 200, response.text
    assert _body(response)["result"]["protocolVersion"] == version
    headers = {"Mcp-Session-Id": response.headers["mcp-session-id"]}
    assert http.post("/mcp", json=INITIALIZED, headers=headers).status_code == 202
    return headers


@pytest.mark.parametrize("version", LEGACY)
def test_http_initialize_answers_the_earlier_revision_asked_for_and_serves_calls_at_it(
    version: str, http: httpx.Client, lean: tuple[Upstreams, list[str]]
) -> None:
    session = _session(http, version)
    with_version = {**session, "MCP-Protocol-Version": version}
    answer = http.post(
        "/mcp", json=call(2, "echo", {"message": f"http {version}"}), headers=with_version
    )
    assert answer.status_code == 200
    _ok(_body(answer), f"Echo: http {version}")
    refused = call(3, "get-env", {"m": f"http-{version}"})
    denied = http.post("/mcp", json=refused, headers=with_version)
    _denied(_body(denied))
    assert not _reached(lean[0], f"http-{version}")
    http.delete("/mcp", headers=session)


def test_http_a_request_without_the_version_header_is_served_as_2025_03_26(
    http: httpx.Client,
) -> None:
    session = _session(http, "2025-03-26")
    answer = http.post("/mcp", json=call(2, "echo", {"message": "no header"}), headers=session)
    assert answer.status_code == 200
    _ok(_body(answer), "Echo: no header")
    http.delete("/mcp", headers=session)


@pytest.mark.parametrize("header", ["1900-01-01", "garbage", "2025-13-45"])
def test_http_a_request_with_an_unsupported_version_header_is_400_and_never_reaches_the_upstream(
    header: str, http: httpx.Client, lean: tuple[Upstreams, list[str]]
) -> None:
    session = _session(http, "2025-06-18")
    marker = f"bad-header-{header}"
    answer = http.post(
        "/mcp",
        json=call(2, "echo", {"message": marker}),
        headers={**session, "MCP-Protocol-Version": header},
    )
    assert answer.status_code == 400
    assert "error" in _body(answer)
    assert not _reached(lean[0], marker)
    http.delete("/mcp", headers=session)


def test_http_initialize_with_a_revision_it_does_not_handshake_is_answered_with_its_latest(
    http: httpx.Client,
) -> None:
    response = http.post("/mcp", json=initialize("1900-01-01"))
    assert _body(response)["result"]["protocolVersion"] == LATEST_HANDSHAKE
    http.delete("/mcp", headers={"Mcp-Session-Id": response.headers["mcp-session-id"]})


def _modern_headers(method: str, name: str | None = None, version: str = MODERN) -> dict[str, str]:
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def test_http_serves_2026_07_28_per_request_without_a_session(
    http: httpx.Client, lean: tuple[Upstreams, list[str]]
) -> None:
    meta = modern_meta()
    discovered = http.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}},
        headers=_modern_headers("server/discover"),
    )
    assert discovered.status_code == 200
    assert _body(discovered)["result"]["supportedVersions"] == [MODERN, *reversed(LEGACY)]
    answer = http.post(
        "/mcp",
        json=call(2, "echo", {"message": "http modern"}, _meta=meta),
        headers=_modern_headers("tools/call", "echo"),
    )
    assert answer.status_code == 200
    assert "mcp-session-id" not in answer.headers
    _ok(_body(answer), "Echo: http modern")
    denied = http.post(
        "/mcp",
        json=call(3, "get-env", {"m": "http-modern-denied"}, _meta=meta),
        headers=_modern_headers("tools/call", "get-env"),
    )
    _denied(_body(denied))
    assert not _reached(lean[0], "http-modern-denied")


@pytest.mark.parametrize(
    ("headers", "case"),
    [
        (_modern_headers("tools/call", "get-sum"), "name"),
        (_modern_headers("tools/call"), "no-name"),
        (_modern_headers("tools/list", "echo"), "method"),
        (_modern_headers("tools/call", "echo", version="1900-01-01"), "version"),
    ],
)
def test_http_a_2026_07_28_request_whose_headers_do_not_match_its_body_is_400_header_mismatch(
    headers: dict[str, str], case: str, http: httpx.Client, lean: tuple[Upstreams, list[str]]
) -> None:
    marker = f"mismatch-{case}"
    answer = http.post(
        "/mcp", json=call(1, "echo", {"message": marker}, _meta=modern_meta()), headers=headers
    )
    assert answer.status_code == 400
    assert _body(answer)["error"]["code"] == -32020
    assert not _reached(lean[0], marker)


@pytest.mark.parametrize("version", ["1900-01-01", "2026-01-01"])
def test_http_a_request_at_an_unsupported_revision_is_400_with_the_supported_ones(
    version: str, http: httpx.Client, lean: tuple[Upstreams, list[str]]
) -> None:
    marker = f"http-unsupported-{version}"
    answer = http.post(
        "/mcp",
        json=call(1, "echo", {"message": marker}, _meta=modern_meta(version)),
        headers=_modern_headers("tools/call", "echo", version=version),
    )
    assert answer.status_code == 400
    error = _body(answer)["error"]
    assert error["code"] == -32022
    assert error["data"]["requested"] == version
    assert MODERN in error["data"]["supported"]
    assert not _reached(lean[0], marker)
