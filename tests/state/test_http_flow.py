"""The shipped flow rules through the HTTP API: the embedded engine on the committed bundle."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from gateway.server import build_service
from gateway.service import parse_config
from tests.server.conftest import REPO_ROOT, served_client

BUNDLE: Final = REPO_ROOT / "bundles" / "policies.tar.gz"
ALICE: Final = "alice-test-key-0123456789"
MALLORY: Final = "mallory-test-key-0123456789"


def _config(folder: Path) -> dict[str, Any]:
    def key(secret: str, subject: str) -> dict[str, Any]:
        return {
            "sha256": hashlib.sha256(secret.encode()).hexdigest(),
            "context": {"subject": subject, "roles": ["agent"], "tenant": "acme"},
        }

    return {
        "engine": {"kind": "embedded", "bundle": str(BUNDLE)},
        "cache": {"enabled": True},
        "audit": {"path": str(folder / "audit.jsonl"), "fsync": "none", "unkeyed": True},
        "auth": {"api_keys": [key(ALICE, "alice"), key(MALLORY, "mallory")]},
        "tools": {"modules": ["tests.state.flow_tools:TOOLS"]},
        "state": {"tools": ["send_email", "pay_vendor"]},
    }


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    service = build_service(parse_config(_config(tmp_path), base=REPO_ROOT))
    async with served_client(service) as client:
        yield client


async def _call(
    http: httpx.AsyncClient, name: str, *, session: str | None = "s1", key: str = ALICE
) -> httpx.Response:
    headers = {"X-API-Key": key}
    if session is not None:
        headers["X-Gateway-Session"] = session
    return await http.post(
        "/v1/calls", json={"id": "1", "name": name, "arguments": {}}, headers=headers
    )


async def test_egress_after_a_secret_and_untrusted_content_is_refused_over_http(
    http: httpx.AsyncClient,
) -> None:
    assert (await _call(http, "send_email")).status_code == 200
    assert (await _call(http, "read_secret")).status_code == 200
    assert (await _call(http, "send_email")).status_code == 200
    assert (await _call(http, "fetch_page")).status_code == 200

    refused = await _call(http, "send_email")
    other_session = await _call(http, "send_email", session="s2")
    other_caller = await _call(http, "send_email", key=MALLORY)

    assert refused.status_code == 403
    assert refused.json()["code"] == "denied"
    assert "read a secret and saw untrusted content" in refused.json()["message"]
    assert other_session.status_code == other_caller.status_code == 200


async def test_egress_without_a_session_header_is_refused(http: httpx.AsyncClient) -> None:
    answer = await _call(http, "send_email", session=None)

    assert answer.status_code == 403
    assert answer.json()["message"] == "external communication needs a session"


async def test_the_session_is_never_taken_from_the_arguments(http: httpx.AsyncClient) -> None:
    await _call(http, "read_secret")
    await _call(http, "fetch_page")

    answer = await http.post(
        "/v1/calls",
        json={"id": "1", "name": "send_email", "arguments": {"session": "s9"}},
        headers={"X-API-Key": ALICE, "X-Gateway-Session": "s1"},
    )

    assert answer.status_code == 400  # send_email takes no arguments at all


async def test_concurrent_payments_over_http_never_exceed_the_policys_quota(
    http: httpx.AsyncClient,
) -> None:
    answers = await asyncio.gather(*(_call(http, "pay_vendor", session=None) for _ in range(12)))

    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 5 + [403] * 7
    assert {a.json()["message"] for a in answers if a.status_code == 403} <= {
        "the quota for this call is used up"
    }


async def test_a_session_header_that_is_not_visible_ascii_is_a_malformed_request(
    http: httpx.AsyncClient,
) -> None:
    answer = await _call(http, "read_secret", session="x" * 300)

    assert answer.status_code == 400
    assert answer.json()["code"] == "malformed_request"
