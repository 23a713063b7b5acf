"""HTTP services assembled for the security tests, and a synchronous way to call them.

:func:`assemble` puts any engine and tools behind the real :class:`GatewayApp` (API-key
authentication, decision cache, audit trail on a file), so that a test can record what the
engine was asked. :class:`AsgiCaller` sends requests in process through
``httpx.ASGITransport`` from synchronous (hypothesis) tests, on one event loop of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from gateway import Tool
from gateway.audit import (
    DEFAULT_MASKED_KEYS,
    AuditSink,
    AuditTrail,
    JsonlFileSink,
    Masker,
    MemorySink,
    head_path,
    trail_files,
    verify,
)
from gateway.policy import DecisionCache, PolicyAuthorizer, PolicyEngine
from gateway.server import Authenticator, Gateway, GatewayApp, GatewayMetrics
from gateway.service._config import ApiKey, AuthConfig
from reliability.faults import NO_DECISION_CODES

#: Every (status, code) the README documents for ``POST /v1/calls``; 500 only for a tool
#: that raised, which none of the tests' tools does.
DOCUMENTED: Final[Mapping[int, frozenset[str]]] = {
    200: frozenset({"ok", "tool_failed", "tool_rejected"}),
    400: frozenset({"malformed_request", "invalid_arguments"}),
    401: frozenset({"unauthenticated", "token_expired"}),
    403: frozenset({"denied"}),
    404: frozenset({"unknown_tool"}),
    413: frozenset({"body_too_large"}),
    503: NO_DECISION_CODES,
}


def digest(key: str) -> str:
    """The SHA-256 hex a configuration stores for an API key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass
class Assembled:
    """One service and its parts."""

    app: GatewayApp
    gateway: Gateway
    sink: AuditSink
    cache: DecisionCache
    audit_path: Path | None

    def records(self) -> list[dict[str, Any]]:
        """Every audit record written so far (close a file sink first)."""
        if isinstance(self.sink, MemorySink):
            return list(self.sink.records)
        assert self.audit_path is not None
        records: list[dict[str, Any]] = []
        for file in trail_files(self.audit_path):
            records.extend(json.loads(line) for line in file.read_bytes().splitlines() if line)
        return records

    def audit_bytes(self) -> bytes:
        """The trail as written (a memory sink's records as a file sink would write them)."""
        if isinstance(self.sink, MemorySink):
            return b"".join(self.sink.lines())
        assert self.audit_path is not None
        return b"".join(file.read_bytes() for file in trail_files(self.audit_path))

    def verify(self) -> None:
        """Close the sink, then check the whole trail."""
        self.sink.close()
        if self.audit_path is not None:
            verdict = verify(trail_files(self.audit_path), head=head_path(self.audit_path))
            assert verdict.ok, verdict.error


def assemble(
    folder: Path | None,
    engine: PolicyEngine,
    tools: Iterable[Tool],
    api_keys: Mapping[str, Mapping[str, Any]],
    *,
    max_body_bytes: int = 2 * 1024 * 1024,
    masked: Iterable[str] = (),
) -> Assembled:
    """The real app around ``engine`` and ``tools``, authenticated by ``api_keys``.

    The audit trail is a file in ``folder``, or in memory when ``folder`` is ``None``.
    """
    cache = DecisionCache(max_ttl=3600)
    audit_path = None if folder is None else folder / "audit" / "audit.jsonl"
    sink: AuditSink = (
        MemorySink() if audit_path is None else JsonlFileSink(audit_path, fsync="none")
    )
    trail = AuditTrail(sink, masker=Masker(keys=DEFAULT_MASKED_KEYS | set(masked)))
    metrics = GatewayMetrics(cache)
    gateway = Gateway(
        list(tools), authorizer=PolicyAuthorizer(engine, cache=cache), audit=trail, metrics=metrics
    )
    auth = AuthConfig(
        api_keys=tuple(
            ApiKey(sha256=digest(key), context=dict(context)) for key, context in api_keys.items()
        )
    )

    async def ready() -> bool:
        return True

    app = GatewayApp(
        gateway,
        authenticator=Authenticator(auth),
        ready=ready,
        metrics=metrics,
        max_body_bytes=max_body_bytes,
    )
    return Assembled(app, gateway, sink, cache, audit_path)


class AsgiCaller:
    """Synchronous requests to an ASGI app, through ``httpx.ASGITransport``, on one loop."""

    def __init__(self, app: Any) -> None:
        self._runner = asyncio.Runner()
        self._client = self._runner.run(self._open(app))

    @staticmethod
    async def _open(app: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gateway.test"
        )

    def post(self, body: bytes, headers: Mapping[str, str]) -> httpx.Response:
        """``POST /v1/calls``."""
        return self._runner.run(self._client.post("/v1/calls", content=body, headers=headers))

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        """Any request."""
        return self._runner.run(self._client.request(method, path, **options))

    def close(self) -> None:
        """Close the client and the loop."""
        self._runner.run(self._client.aclose())
        self._runner.close()

    def __enter__(self) -> AsgiCaller:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def check_response(response: httpx.Response) -> str:
    """A documented status and code, a JSON object body; returns the code."""
    assert response.status_code != 500, response.text
    body = response.json()
    assert isinstance(body, dict), response.text
    code = body.get("status") if response.status_code == 200 else body.get("code")
    assert response.status_code in DOCUMENTED, (response.status_code, response.text)
    assert code in DOCUMENTED[response.status_code], (response.status_code, response.text)
    return str(code)
