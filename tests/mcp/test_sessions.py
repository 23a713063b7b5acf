"""MCP HTTP sessions belong to the principal that opened them, are capped, and are audited.

Real HTTP: the front's streamable HTTP app under uvicorn, raw JSON-RPC posts with two API
keys (and the official SDK client where a real client matters).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.audit import AuditTrail, MemorySink
from gateway.mcp import McpFront
from gateway.mcp._sessions import SessionTable, session_digest
from gateway.server import Authenticator, Gateway, api_key_digest
from gateway.service._config import ApiKey, AuthConfig, JwtConfig
from gateway.testing import FakeClock, LiveServer, RecordingAuthorizer, RecordingTool
from tests.mcp.surfaces import INITIALIZED, LEGACY_VERSION, initialize, sse_messages, tool_call

ALICE = {"subject": "alice", "roles": ["payer"], "tenant": "acme"}
BOB = {"subject": "bob", "roles": ["payer"], "tenant": "acme"}
KEYS = {"alice-key": ALICE, "alice-second-key": ALICE, "bob-key": BOB}
ACCEPT = "application/json, text/event-stream"
NOT_FOUND = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}'


class Served:
    """One front under uvicorn, with its tool, audit sink and session table."""

    def __init__(self, table: SessionTable) -> None:
        self.tool = RecordingTool("echo", {"type": "object"})
        self.sink = MemorySink()
        trail = AuditTrail(self.sink)
        authenticator = Authenticator(
            AuthConfig(
                api_keys=tuple(
                    ApiKey(sha256=api_key_digest(key), context=context)
                    for key, context in KEYS.items()
                )
            )
        )
        gateway = Gateway([self.tool], authorizer=RecordingAuthorizer(True), audit=trail)
        front = McpFront(gateway, authenticator=authenticator, audit=trail)
        self.table = table
        self.server = LiveServer(front.http_app(sessions=table)).start()
        self.http = httpx.Client(base_url=self.server.url, timeout=30)
        self._next = 10

    def post(self, key: str, body: bytes, session: str | None = None) -> httpx.Response:
        headers = {"x-api-key": key, "accept": ACCEPT, "content-type": "application/json"}
        if session is not None:
            headers |= {"mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}
        return self.http.post("/mcp", content=body, headers=headers)

    def open(self, key: str) -> str:
        response = self.post(key, initialize())
        assert response.status_code == 200, response.text
        session = response.headers["mcp-session-id"]
        assert self.post(key, INITIALIZED, session).status_code == 202
        return session

    def call(self, key: str, session: str) -> httpx.Response:
        self._next += 1
        return self.post(key, tool_call(self._next, b'{"n": 1}', name="echo"), session)

    def delete(self, key: str, session: str) -> httpx.Response:
        headers = {"x-api-key": key, "mcp-session-id": session}
        return self.http.delete("/mcp", headers={**headers, "mcp-protocol-version": LEGACY_VERSION})

    def listen(self, key: str, session: str) -> httpx.Response:
        # Only the status and the first bytes: a stream that was let open would never end.
        headers = {"x-api-key": key, "mcp-session-id": session, "accept": "text/event-stream"}
        headers["mcp-protocol-version"] = LEGACY_VERSION
        with self.http.stream("GET", "/mcp", headers=headers) as response:
            if response.status_code == 200:
                return httpx.Response(200, content=b"a stream of the session was opened")
            return httpx.Response(response.status_code, content=response.read())

    def sessions(self) -> list[tuple[str, str | None, str | None, str | None]]:
        return [
            (r["event"], r["subject"], r["reason"], r["session"])
            for r in self.sink.records
            if r["type"] == "session"
        ]

    def close(self) -> None:
        self.http.close()
        self.server.stop()


@pytest.fixture
def served() -> Iterator[Served]:
    front = Served(SessionTable(max_per_caller=3))
    yield front
    front.close()


def _ok(response: httpx.Response) -> bool:
    if response.status_code != 200:
        return False
    (answer,) = sse_messages(response)
    return "result" in answer and not answer["result"].get("isError")


def test_a_session_answers_another_key_as_if_it_did_not_exist(served: Served) -> None:
    session = served.open("alice-key")
    unknown = served.call("bob-key", "0" * 32)

    posted = served.call("bob-key", session)
    listened = served.listen("bob-key", session)
    deleted = served.delete("bob-key", session)

    for response in (posted, listened, deleted):
        assert response.status_code == 404
        assert response.content == unknown.content == NOT_FOUND
    assert served.tool.calls == []
    # The owner's session is untouched, even by the foreign DELETE.
    assert _ok(served.call("alice-key", session))
    assert len(served.tool.calls) == 1
    refused = [s for s in served.sessions() if s[0] == "refused"]
    assert refused == [("refused", "bob", "not_owner", session_digest(session))] * 3


def test_a_second_key_of_the_same_subject_is_another_principal(served: Served) -> None:
    session = served.open("alice-key")

    response = served.call("alice-second-key", session)

    assert response.status_code == 404
    assert served.tool.calls == []


def test_the_owner_deletes_its_session_and_then_no_one_can_use_it(served: Served) -> None:
    session = served.open("alice-key")

    deleted = served.delete("alice-key", session)
    after = served.call("alice-key", session)

    assert deleted.status_code == 200
    assert after.status_code == 404
    assert served.table.count(served_principal(served, "alice-key")) == 0
    assert served.sessions() == [
        ("opened", "alice", None, session_digest(session)),
        ("closed", "alice", "deleted", session_digest(session)),
    ]


def served_principal(served: Served, key: str) -> str:
    authenticator = Authenticator(
        AuthConfig(api_keys=(ApiKey(sha256=api_key_digest(key), context=KEYS[key]),))
    )
    return authenticator.identify({"x-api-key": key}).principal


def test_a_caller_at_its_limit_that_opens_one_more_ends_its_longest_idle_session(
    served: Served,
) -> None:
    # A client that never sends DELETE (the Inspector CLI) cannot lock its principal out.
    opened = [served.open("alice-key") for _ in range(3)]
    assert _ok(served.call("alice-key", opened[0]))  # opened[1] is now the longest idle

    newest = served.open("alice-key")
    bob = served.open("bob-key")  # the limit is per principal

    assert served.call("alice-key", opened[1]).status_code == 404
    assert served.delete("alice-key", opened[1]).status_code == 404
    for session in (opened[0], opened[2], newest):
        assert _ok(served.call("alice-key", session))
    assert bob
    assert served.table.count(served_principal(served, "alice-key")) == 3
    assert [(e, s, r) for e, s, r, _ in served.sessions()] == [
        ("opened", "alice", None),
        ("opened", "alice", None),
        ("opened", "alice", None),
        ("closed", "alice", "evicted"),
        ("opened", "alice", None),
        ("opened", "bob", None),
    ]
    assert served.sessions()[3][3] == session_digest(opened[1])


def test_a_session_ended_to_make_room_is_ended_in_the_sdk_too(served: Served) -> None:
    opened = [served.open("alice-key") for _ in range(3)]
    served.open("alice-key")
    # Past the gateway's table, the SDK no longer knows it either: a request the table let
    # through (as if it were still the owner's) is answered 404 by the SDK itself.
    served.table.open(opened[0], served_principal(served, "alice-key"), "alice")
    served.table.leave(opened[0])
    assert served.call("alice-key", opened[0]).status_code == 404


def test_a_caller_whose_every_session_is_in_use_is_refused_with_429_and_nothing_ends(
    served: Served,
) -> None:
    opened = [served.open("alice-key") for _ in range(3)]
    headers = {"x-api-key": "alice-key", "accept": "text/event-stream"}
    headers["mcp-protocol-version"] = LEGACY_VERSION
    with contextlib.ExitStack() as streams:
        for session in opened:
            # A GET stream held open: a request in flight on each session.
            response = streams.enter_context(
                served.http.stream("GET", "/mcp", headers={**headers, "mcp-session-id": session})
            )
            assert response.status_code == 200
        over = served.post("alice-key", initialize(request_id=7))
    assert over.status_code == 429
    body = over.json()
    assert body["id"] == 7
    assert body["error"]["code"] == -32000
    assert "mcp-session-id" not in over.headers
    for session in opened:
        assert _ok(served.call("alice-key", session))
    assert [(e, r) for e, _, r, _ in served.sessions()] == [
        ("opened", None),
        ("opened", None),
        ("opened", None),
        ("refused", "session_limit"),
    ]


def test_an_idle_session_expires_and_frees_its_slot() -> None:
    clock = FakeClock()
    served = Served(SessionTable(max_per_caller=1, idle_timeout=60, clock=clock))
    try:
        session = served.open("alice-key")
        clock.advance(59)
        assert _ok(served.call("alice-key", session))  # activity restarts the idle period
        clock.advance(59)
        assert served.table.count(served_principal(served, "alice-key")) == 1
        clock.advance(1)

        expired = served.call("alice-key", session)
        renewed = served.open("alice-key")
    finally:
        served.close()

    assert expired.status_code == 404
    assert renewed != session
    assert [(e, r) for e, _, r, _ in served.sessions()] == [
        ("opened", None),
        ("closed", "expired"),
        ("opened", None),
    ]


def test_a_session_whose_opening_cannot_be_audited_is_never_handed_out(served: Served) -> None:
    served.sink.failing = True

    response = served.post("alice-key", initialize())

    assert response.status_code == 503
    assert "mcp-session-id" not in response.headers
    assert served.table.count(served_principal(served, "alice-key")) == 0


def test_a_request_in_flight_keeps_its_session_from_expiring() -> None:
    clock = FakeClock()
    table = SessionTable(max_per_caller=1, idle_timeout=60, clock=clock)
    table.open("s1", "api-key:alice", "alice")  # its opening request is in flight
    table.leave("s1")
    table.enter("s1")  # a GET stream that stays open for an hour
    clock.advance(3600)
    alive = table.owner("s1")
    table.leave("s1")
    clock.advance(59)
    still = table.owner("s1")
    clock.advance(1)
    gone = table.owner("s1")

    assert alive == still == "api-key:alice"
    assert gone is None
    assert table.count("api-key:alice") == 0
    assert table.take_expired() == [("s1", "api-key:alice", "alice")]


async def test_the_sdk_clients_session_is_refused_to_another_key_and_keeps_working() -> None:
    served = Served(SessionTable())
    seen: list[str] = []

    async def capture(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            seen.append(response.headers["mcp-session-id"])

    try:
        async with (
            httpx2.AsyncClient(
                timeout=30,
                headers={"x-api-key": "alice-key"},
                event_hooks={"response": [capture]},
            ) as http,
            Client(
                streamable_http_client(f"{served.server.url}/mcp", http_client=http),
                mode="legacy",
                cache=None,
                read_timeout_seconds=30,
            ) as client,
        ):
            first = await client.call_tool("echo", {"n": 1})
            async with httpx.AsyncClient(base_url=served.server.url, timeout=30) as bob:
                stolen = await bob.post(
                    "/mcp",
                    content=tool_call(99, b'{"n": 2}', name="echo"),
                    headers={
                        "x-api-key": "bob-key",
                        "accept": ACCEPT,
                        "content-type": "application/json",
                        "mcp-session-id": seen[0],
                        "mcp-protocol-version": LEGACY_VERSION,
                    },
                )
                killed = await bob.delete(
                    "/mcp", headers={"x-api-key": "bob-key", "mcp-session-id": seen[0]}
                )
            second = await client.call_tool("echo", {"n": 3})
    finally:
        served.close()

    assert not first.is_error
    assert not second.is_error
    assert (stolen.status_code, killed.status_code) == (404, 404)
    assert served.tool.calls == [b'{"n":1}', b'{"n":3}']  # the bytes the client sent
    events = [(e, s, r) for e, s, r, _ in served.sessions()]
    assert events[0] == ("opened", "alice", None)
    assert ("refused", "bob", "not_owner") in events
    assert events[-1] == ("closed", "alice", "deleted")


def _token(secret: str, subject: str, exp: int, **claims: Any) -> str:
    payload = {"sub": subject, "iss": "https://issuer", "aud": "gateway", "exp": exp, **claims}
    return jwt.encode(payload, secret, algorithm="HS256")


def test_a_renewed_token_is_the_same_principal_and_another_subject_is_not() -> None:
    secret = "s" * 32
    authenticator = Authenticator(
        AuthConfig(
            jwt=JwtConfig(
                secret=secret.encode(),
                algorithms=("HS256",),
                issuer="https://issuer",
                audience="gateway",
            )
        )
    )

    def principal(token: str) -> str:
        return authenticator.identify({"authorization": f"Bearer {token}"}).principal

    first = principal(_token(secret, "alice", 4_000_000_000))
    renewed = principal(_token(secret, "alice", 4_000_000_100, roles=["x"]))
    other = principal(_token(secret, "bob", 4_000_000_000))
    by_key = served_principal_for_key()

    assert first == renewed
    assert other != first
    assert by_key.startswith("api-key:")
    assert first.startswith("jwt:")
    assert secret not in first
    assert "alice" not in first


def served_principal_for_key() -> str:
    authenticator = Authenticator(
        AuthConfig(api_keys=(ApiKey(sha256=api_key_digest("alice-key"), context=ALICE),))
    )
    principal = authenticator.identify({"x-api-key": "alice-key"}).principal
    assert "alice-key" not in principal
    return principal
