"""The OPA REST engines against real processes: a real OPA, and a tiny misbehaving HTTP server.

Every fault ends the same way for the caller: an AuthorizationError with the fault's own
code, nothing executed behind the Guard, and no engine text in what the caller sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final

import pytest

from gateway import AuthorizationError
from gateway.policy import (
    DecisionCache,
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    InputDocument,
    OpaRestEngine,
    OpaRestEngineSync,
    PolicyAuthorizer,
    caller_context,
    read_decision,
)
from gateway.policy._rest import read_response, request_body, revision_from
from gateway.testing import FakeClock, OpaServer
from tests.policy.conftest import (
    DECISION,
    DENY_MESSAGE,
    REGO_DIR,
    assert_no_leak,
    authorization,
    call,
    denied_without_running,
    guarded,
    paused,
)

#: Text only a (misbehaving) OPA ever says; it must never reach a caller.
MARKER: Final = "MARKER-OPA-TEXT"
#: Short deadline for the timeout faults.
SHORT: Final = 0.3
#: Scheduling slack on a loaded 2-core machine, added to every deadline we wait on.
SLACK: Final = 1.5
KILL_SWITCH: Final = 'package gateway.authz\n\ndenials contains "kill switch: on"\n'


# -- a tiny HTTP/1.1 server that misbehaves on demand -----------------------------------------


@dataclass(frozen=True)
class Request:
    """One request as the server read it."""

    method: str
    target: str
    body: bytes
    #: Header names in lower case.
    headers: Mapping[str, str] = field(default_factory=dict)


#: Answers one decision request; returns whether the connection stays open (keep-alive).
Behaviour = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed the connection
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip():
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return Request(method, target, body, headers)


def _head(status: int, length: int) -> bytes:
    return (
        f"HTTP/1.1 {status} Whatever\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def _respond(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    writer.write(_head(status, len(body)) + body)
    await writer.drain()


def answer(status: int, body: bytes) -> Behaviour:
    """A complete, well-framed HTTP answer; the connection stays open."""

    async def behave(request: Request, writer: asyncio.StreamWriter) -> bool:
        await _respond(writer, status, body)
        return True

    return behave


def drip(length: int = 80, every: float = 0.05) -> Behaviour:
    """Headers at once, then the body one byte at a time (``length * every`` seconds)."""

    async def behave(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(_head(200, length))
        for _ in range(length):
            await writer.drain()
            await asyncio.sleep(every)
            writer.write(b" ")
        await writer.drain()
        return False

    return behave


def _reset(writer: asyncio.StreamWriter) -> None:
    # SO_LINGER with a zero timeout turns close() into a TCP RST.
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def reset_mid_response() -> Behaviour:
    """Headers promising 100 bytes, a piece of the body, then a TCP reset."""

    async def behave(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(_head(200, 100) + b'{"result": {"allow": tr')
        await writer.drain()
        _reset(writer)
        return False

    return behave


def reset_before_response() -> Behaviour:
    """Read the request, answer nothing, reset the connection."""

    async def behave(request: Request, writer: asyncio.StreamWriter) -> bool:
        _reset(writer)
        return False

    return behave


def hang() -> Behaviour:
    """Never answer (until the server stops)."""

    async def behave(request: Request, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return False

    return behave


class MisbehavingOpa:
    """An HTTP/1.1 server on 127.0.0.1:0 standing in for OPA.

    Revision and health requests (GET) get well-formed empty answers. Decision requests
    (POST) are answered by the behaviours in turn (the last one repeats). It counts TCP
    connections and decision requests, and stops itself on exit: every connection is
    dropped and every handler cancelled, so nothing outlives the test.
    """

    def __init__(self, *behaviours: Behaviour) -> None:
        self._behaviours: Sequence[Behaviour] = behaviours or (answer(200, b'{"result":true}'),)
        self.connections = 0
        self.decisions: list[Request] = []
        #: Every request, decisions, revision reads and health checks alike.
        self.requests: list[Request] = []
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> MisbehavingOpa:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        handlers = list(self._handlers)
        for handler in handlers:
            handler.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        self._writers.add(writer)
        self.connections += 1
        try:
            while (request := await _read_request(reader)) is not None:
                self.requests.append(request)
                if request.method != "POST":
                    await _respond(writer, 200, _GET_ANSWERS.get(request.target, b"{}"))
                    continue
                behaviour = self._behaviours[min(len(self.decisions), len(self._behaviours) - 1)]
                self.decisions.append(request)
                if not await behaviour(request, writer):
                    break
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.transport.abort()
            self._writers.discard(writer)
            self._handlers.discard(handler)


_GET_ANSWERS: Final = {
    "/v1/data/system/bundles": b'{"result":{}}',
    "/v1/policies": b'{"result":[]}',
}


@contextlib.asynccontextmanager
async def engine_for(url: str, deadline: float = 2.0) -> AsyncIterator[OpaRestEngine]:
    """An open async engine (per-request ``deadline`` in seconds), no revision watcher."""
    async with OpaRestEngine(url, timeout=deadline, revision_interval=0) as engine:
        yield engine


# -- faults of a real OPA ---------------------------------------------------------------------


async def test_real_opa_allows_and_denies(opa_server: OpaServer) -> None:
    async with engine_for(opa_server.url) as engine:
        binding, tool = guarded(PolicyAuthorizer(engine))
        with caller_context(subject="alice"):
            await call(binding, '{"text": "hi"}')
        assert tool.count == 1
        decision = await PolicyAuthorizer(engine).authorize(authorization())
        assert decision.allowed is False
        assert decision.message == DENY_MESSAGE


async def test_opa_down_is_engine_unavailable(opa_server: OpaServer) -> None:
    url = opa_server.url
    opa_server.kill()
    async with engine_for(url) as engine:
        assert engine.revision() == "unknown"  # could not be read at open
        binding, tool = guarded(PolicyAuthorizer(engine))
        with caller_context(subject="alice"):
            error = await denied_without_running(binding, tool)
    assert error.code == "engine_unavailable"
    assert isinstance(error.cause, EngineUnavailableError)
    assert error.cause.detail
    assert_no_leak(error, "refused", "Connect", "Errno", str(opa_server.port))


async def test_opa_killed_under_a_pooled_connection_then_restarted(
    opa_server: OpaServer,
) -> None:
    async with engine_for(opa_server.url) as engine:
        binding, tool = guarded(PolicyAuthorizer(engine))
        with caller_context(subject="alice"):
            await call(binding)
            assert tool.count == 1
            opa_server.kill()
            for _ in range(2):  # the stale pooled connection, then a refused one
                with pytest.raises(AuthorizationError) as caught:
                    await call(binding)
                assert caught.value.code == "engine_unavailable"
            assert tool.count == 1
            await asyncio.to_thread(opa_server.restart)
            await call(binding)
        assert tool.count == 2


async def test_opa_paused_past_the_timeout_is_engine_timeout(opa_server: OpaServer) -> None:
    async with engine_for(opa_server.url, deadline=SHORT) as engine:
        binding, tool = guarded(PolicyAuthorizer(engine))
        with caller_context(subject="alice"):
            await call(binding)  # a pooled connection exists when OPA freezes
            paused(opa_server)
            try:
                started = time.monotonic()
                with pytest.raises(AuthorizationError) as caught:
                    await call(binding)
                elapsed = time.monotonic() - started
            finally:
                opa_server.resume()
            assert tool.count == 1  # only the call before the pause ran
            error = caught.value
            assert error.code == "engine_timeout"
            assert isinstance(error.cause, EngineTimeoutError)
            assert_no_leak(error, "Timeout", "aiohttp")
            assert elapsed < SHORT + SLACK
            await call(binding)  # OPA answers again once resumed
        assert tool.count == 2


async def test_opa_500_is_engine_error_with_opa_code_only_in_detail(
    opa_server: OpaServer,
) -> None:
    async with engine_for(opa_server.url) as engine:
        authorizer = PolicyAuthorizer(engine, path="gateway/faults/conflict")
        binding, tool = guarded(authorizer)
        error = await denied_without_running(binding, tool)
    assert error.code == "engine_error"
    cause = error.cause
    assert isinstance(cause, EngineError)
    assert cause.detail is not None
    assert cause.detail.startswith("500 internal_error")
    assert "internal_error" not in str(cause)
    assert_no_leak(error, "internal_error", "conflict", "error(s) occurred", "eval_")


async def test_decision_ids_are_those_opa_logged(opa_server: OpaServer) -> None:
    async with engine_for(opa_server.url) as engine:
        with caller_context(subject="alice"):
            decision = await PolicyAuthorizer(engine).authorize(authorization())
    assert decision.decision_id
    deadline = time.monotonic() + 5.0
    while decision.decision_id not in opa_server.read_log():
        assert time.monotonic() < deadline, "OPA never logged the decision id"
        await asyncio.sleep(0.02)


# -- faults of a misbehaving server -----------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "code"),
    [
        pytest.param(answer(200, MARKER.encode() + b" {not json"), "engine_error", id="garbage"),
        pytest.param(answer(200, f'[1, "{MARKER}"]'.encode()), "engine_error", id="array"),
        pytest.param(answer(200, f'"{MARKER}"'.encode()), "engine_error", id="string-body"),
        pytest.param(answer(200, b""), "engine_error", id="empty-body"),
        pytest.param(
            answer(200, b'{"result": true, "result": false}'), "engine_error", id="dup-keys"
        ),
        pytest.param(
            answer(200, f'{{"result": "{MARKER}"}}'.encode()), "malformed_decision", id="str"
        ),
        pytest.param(answer(200, b'{"result": 1}'), "malformed_decision", id="number-result"),
        pytest.param(answer(200, b'{"decision_id": "x"}'), "undefined_decision", id="no-result"),
        pytest.param(
            answer(500, f'{{"code": "internal_error", "message": "{MARKER}"}}'.encode()),
            "engine_error",
            id="500",
        ),
        pytest.param(answer(502, MARKER.encode()), "engine_error", id="502"),
        pytest.param(answer(504, MARKER.encode()), "engine_error", id="504"),
        pytest.param(answer(404, MARKER.encode()), "engine_error", id="404"),
        pytest.param(drip(), "engine_timeout", id="slow-drip"),
        pytest.param(hang(), "engine_timeout", id="no-answer"),
        pytest.param(reset_mid_response(), "engine_unavailable", id="reset-mid-response"),
        pytest.param(reset_before_response(), "engine_unavailable", id="reset-before-response"),
    ],
)
async def test_misbehaving_server_denies_with_its_own_code(behaviour: Behaviour, code: str) -> None:
    async with MisbehavingOpa(behaviour) as server, engine_for(server.url, SHORT) as engine:
        binding, tool = guarded(PolicyAuthorizer(engine))
        started = time.monotonic()
        error = await denied_without_running(binding, tool)
        elapsed = time.monotonic() - started
        assert len(server.decisions) == 1, "a decision request was retried"
    assert error.code == code
    assert elapsed < SHORT + SLACK, "the deadline is not a hard one"
    assert_no_leak(error, MARKER, "Whatever", "result", "aiohttp", "Payload")


@pytest.mark.parametrize(
    "behaviour",
    [
        pytest.param(answer(500, b'{"code":"internal_error"}'), id="500"),
        pytest.param(answer(502, b"bad gateway"), id="502"),
        pytest.param(answer(503, b"unavailable"), id="503"),
        pytest.param(answer(504, b"gateway timeout"), id="504"),
        pytest.param(reset_mid_response(), id="reset-mid-response"),
        pytest.param(reset_before_response(), id="reset-before-response"),
    ],
)
async def test_decision_requests_are_never_retried(behaviour: Behaviour) -> None:
    ok = answer(200, b'{"result": true}')
    # A good answer first, so the failure also hits a reused keep-alive connection.
    async with MisbehavingOpa(ok, behaviour) as server, engine_for(server.url) as engine:
        authorizer = PolicyAuthorizer(engine)
        assert (await authorizer.authorize(authorization())).allowed is True
        for attempt in range(1, 4):
            with pytest.raises((EngineError, EngineUnavailableError)):
                await authorizer.authorize(authorization())
            assert len(server.decisions) == 1 + attempt


async def test_sync_decision_requests_are_never_retried() -> None:
    behaviours = [
        answer(500, b"{}"),
        answer(502, b""),
        answer(504, b""),
        reset_before_response(),
        reset_mid_response(),
    ]
    expected_errors: list[type[Exception]] = [
        EngineError,
        EngineError,
        EngineError,
        EngineUnavailableError,
        EngineUnavailableError,
    ]
    async with MisbehavingOpa(*behaviours) as server:
        with OpaRestEngineSync(server.url, timeout=2.0) as engine:
            document = InputDocument(authorization())
            for attempt, expected in enumerate(expected_errors, start=1):
                with pytest.raises(expected):
                    await asyncio.to_thread(engine.evaluate_sync, DECISION, document)
                assert len(server.decisions) == attempt


async def test_keep_alive_reuses_one_connection() -> None:
    async with MisbehavingOpa(answer(200, b'{"result": true}')) as server:
        async with engine_for(server.url) as engine:
            authorizer = PolicyAuthorizer(engine)
            for _ in range(50):
                assert (await authorizer.authorize(authorization())).allowed is True
        assert len(server.decisions) == 50
        assert server.connections == 1


async def test_sync_keep_alive_reuses_one_connection() -> None:
    async with MisbehavingOpa(answer(200, b'{"result": false}')) as server:
        with OpaRestEngineSync(server.url) as engine:
            document = InputDocument(authorization())

            def fifty() -> None:
                for _ in range(50):
                    assert engine.evaluate_sync(DECISION, document).value is False

            await asyncio.to_thread(fifty)
        assert len(server.decisions) == 50
        assert server.connections == 1


async def test_provenance_is_asked_for_only_when_configured() -> None:
    async with MisbehavingOpa() as server:
        async with OpaRestEngine(server.url, revision_interval=0, provenance=True) as engine:
            await engine.evaluate(DECISION, InputDocument(authorization()))
        (request,) = server.decisions
    assert request.target == f"/v1/data/{DECISION}?provenance=true"


async def test_request_carries_the_input_document_exactly() -> None:
    async with MisbehavingOpa() as server, engine_for(server.url) as engine:
        with caller_context(subject="alice", roles=["a", "b"]):
            document = InputDocument(authorization("big", b'{"n": 9007199254740993.50}'))
            await engine.evaluate(DECISION, document)
        (request,) = server.decisions
    assert request.target == f"/v1/data/{DECISION}"
    assert request.body == request_body(document)
    assert b"9007199254740993.50" in request.body
    sent = json.loads(request.body)
    assert sent["input"]["context"] == {"roles": ["a", "b"], "subject": "alice"}
    assert sent["input"]["tool"]["name"] == "big"


#: Health, decision and both revision reads: every kind of request an engine sends.
EVERY_TARGET: Final = ["/health", f"/v1/data/{DECISION}", "/v1/data/system/bundles", "/v1/policies"]


async def test_the_bearer_token_goes_with_every_request_of_the_async_engine() -> None:
    async with MisbehavingOpa() as server:
        async with OpaRestEngine(
            server.url,
            token="tok-1",  # noqa: S106 - a test credential
            revision_interval=0,
        ) as engine:
            await engine.evaluate(DECISION, InputDocument(authorization()))
            assert await engine.healthy() is True
        targets = sorted({request.target for request in server.requests})
        tokens = {request.headers.get("authorization") for request in server.requests}
    assert targets == EVERY_TARGET
    assert tokens == {"Bearer tok-1"}


async def test_the_bearer_token_goes_with_every_request_of_the_sync_engine() -> None:
    async with MisbehavingOpa() as server:
        with OpaRestEngineSync(server.url, token="tok-2") as engine:  # noqa: S106 - test credential

            def use() -> None:
                engine.refresh_revision()
                engine.evaluate_sync(DECISION, InputDocument(authorization()))
                assert engine.healthy() is True

            await asyncio.to_thread(use)
        targets = sorted({request.target for request in server.requests})
        tokens = {request.headers.get("authorization") for request in server.requests}
    assert targets == EVERY_TARGET
    assert tokens == {"Bearer tok-2"}


async def test_without_a_token_no_authorization_header_is_sent() -> None:
    async with MisbehavingOpa() as server:
        async with engine_for(server.url) as engine:
            await engine.evaluate(DECISION, InputDocument(authorization()))
        with OpaRestEngineSync(server.url) as sync_engine:
            await asyncio.to_thread(
                sync_engine.evaluate_sync, DECISION, InputDocument(authorization())
            )
        headers = [request.headers for request in server.requests]
    assert len(headers) == 4
    assert [name for each in headers for name in each if name == "authorization"] == []


@pytest.mark.parametrize(
    ("url", "base"),
    [
        pytest.param("http://opa.internal", "http://opa.internal:8181", id="no-port"),
        pytest.param("https://opa.internal/", "https://opa.internal:443", id="https-no-port"),
        pytest.param("http://127.0.0.1:9191", "http://127.0.0.1:9191", id="port"),
        pytest.param("http://[::1]:9191", "http://[::1]:9191", id="ipv6"),
        pytest.param("http://[::1]", "http://[::1]:8181", id="ipv6-no-port"),
    ],
)
def test_decisions_and_health_checks_go_to_one_base_url(url: str, base: str) -> None:
    engines = (OpaRestEngine(url, revision_interval=0), OpaRestEngineSync(url))

    assert [engine._base for engine in engines] == [base, base]
    assert [engine._root for engine in engines] == [f"{base}/v1", f"{base}/v1"]


# -- the sync engine against a real OPA --------------------------------------------------------


def test_sync_engine_allows_and_denies(opa_server: OpaServer) -> None:
    with OpaRestEngineSync(opa_server.url, timeout=5.0) as engine:
        revision = engine.refresh_revision()
        assert revision.startswith("policies:")
        assert engine.healthy() is True
        with caller_context(subject="alice"):
            allowed = engine.evaluate_sync(DECISION, InputDocument(authorization()))
        with caller_context(subject="mallory"):
            denied = engine.evaluate_sync(DECISION, InputDocument(authorization()))
    first = read_decision(allowed.value, decision_id=allowed.decision_id)
    second = read_decision(denied.value)
    assert first.allowed is True
    assert first.decision_id
    assert allowed.revision == revision
    assert second.allowed is False
    assert second.message == DENY_MESSAGE


async def test_sync_engine_behind_a_guard(opa_server: OpaServer) -> None:
    with OpaRestEngineSync(opa_server.url, timeout=5.0) as engine:
        engine.refresh_revision()
        binding, tool = guarded(PolicyAuthorizer(engine, cache=DecisionCache()))
        with caller_context(subject="bob"):
            await call(binding)
            await call(binding)
        assert tool.count == 2
        error = await denied_without_running(*guarded(PolicyAuthorizer(engine, path="x/y")))
        assert error.code == "undefined_decision"


def test_sync_engine_down_is_engine_unavailable(opa_server: OpaServer) -> None:
    with OpaRestEngineSync(opa_server.url, timeout=2.0) as engine:
        assert engine.evaluate_sync(DECISION, InputDocument(authorization())).defined
        opa_server.kill()
        assert engine.healthy() is False
        for _ in range(2):  # the stale pooled connection, then a refused one
            with pytest.raises(EngineUnavailableError) as caught:
                engine.evaluate_sync(DECISION, InputDocument(authorization()))
            assert "refused" not in str(caught.value)


async def test_sync_engine_down_behind_a_guard(opa_server: OpaServer) -> None:
    opa_server.kill()
    with OpaRestEngineSync(opa_server.url, timeout=2.0) as engine:
        error = await denied_without_running(*guarded(PolicyAuthorizer(engine)))
    assert error.code == "engine_unavailable"
    assert_no_leak(error, "refused", "Errno", "HTTPConnectionPool")


async def test_sync_engine_slow_drip_is_engine_timeout() -> None:
    async with MisbehavingOpa(drip(length=12, every=0.05)) as server:
        with OpaRestEngineSync(server.url, timeout=SHORT) as engine:
            document = InputDocument(authorization())
            with pytest.raises(EngineTimeoutError):
                await asyncio.to_thread(engine.evaluate_sync, DECISION, document)


async def test_sync_engine_paused_is_engine_timeout(opa_server: OpaServer) -> None:
    with OpaRestEngineSync(opa_server.url, timeout=SHORT) as engine:
        binding, tool = guarded(PolicyAuthorizer(engine))
        paused(opa_server)
        try:
            started = time.monotonic()
            error = await denied_without_running(binding, tool)
            elapsed = time.monotonic() - started
        finally:
            opa_server.resume()
        assert error.code == "engine_timeout"
        assert elapsed < SHORT + SLACK
        assert_no_leak(error, "Read timed out", "HTTPConnectionPool")
        with caller_context(subject="alice"):
            await call(binding)
        assert tool.count == 1


# -- revision watching ------------------------------------------------------------------------


async def test_policy_change_flips_a_cached_decision_within_the_bound(
    opa_server: OpaServer,
) -> None:
    interval, timeout = 0.2, 1.0
    changes: list[str] = []
    async with OpaRestEngine(
        opa_server.url,
        timeout=timeout,
        revision_interval=interval,
        on_revision_change=changes.append,
    ) as engine:
        authorizer = PolicyAuthorizer(engine, cache=DecisionCache())
        before = engine.revision()
        assert before.startswith("policies:")
        with caller_context(subject="alice"):
            first = await authorizer.authorize(authorization())
            second = await authorizer.authorize(authorization())
            assert first.allowed is True
            assert second.cached is True
            assert changes == [before]

            await asyncio.to_thread(opa_server.put_policy, "kill_switch.rego", KILL_SWITCH)
            changed_at = time.monotonic()
            deadline = changed_at + interval + timeout + SLACK
            while (decision := await authorizer.authorize(authorization())).allowed:
                assert decision.cached is True  # only a stale cache entry may still allow
                assert time.monotonic() < deadline, "the decision did not flip in time"
                await asyncio.sleep(0.02)
        flipped_after = time.monotonic() - changed_at
        assert decision.reasons == ("kill switch: on",)
        assert decision.cached is False
        assert engine.revision() != before
        assert changes == [before, engine.revision()]
        assert decision.revision == engine.revision()
    # Documented bound: revision_interval + timeout (+ scheduling slack).
    assert flipped_after < interval + timeout + SLACK


#: Each way OPA's data API can revoke alice's grant (the test policy allows data subjects).
REVOCATIONS: Final[dict[str, Callable[[OpaServer], None]]] = {
    "put": lambda opa: opa.put_data("gateway/authz/subjects", ["bob"]),
    "patch": lambda opa: opa.patch_data("gateway/authz/subjects", [{"op": "remove", "path": "/0"}]),
    "delete": lambda opa: opa.delete_data("gateway/authz/subjects"),
    "put-root": lambda opa: opa.put_data("", {"gateway": {"authz": {"subjects": []}}}),
}


@pytest.mark.parametrize("revoke", list(REVOCATIONS.values()), ids=list(REVOCATIONS))
@pytest.mark.parametrize("interval", [0.5, 0.0], ids=["watched", "unwatched"])
async def test_a_grant_revoked_through_the_data_api_is_not_served_from_cache_past_the_bound(
    opa_server: OpaServer, revoke: Callable[[OpaServer], None], interval: float
) -> None:
    # The policy asks for a 30 s TTL, the cache allows 60 s; OPA's data API changes no
    # revision. The bound must still be revision_interval + timeout (the default
    # interval when the watcher is off).
    timeout = 0.5
    bound = (interval or 5.0) + timeout
    clock = FakeClock()
    cache = DecisionCache(max_ttl=60, clock=clock)
    async with OpaRestEngine(opa_server.url, timeout=timeout, revision_interval=interval) as engine:
        assert engine.max_decision_age == bound
        authorizer = PolicyAuthorizer(engine, cache=cache)
        with caller_context(subject="alice"):
            assert (await authorizer.authorize(authorization())).allowed is True
            await asyncio.to_thread(revoke, opa_server)
            assert (await engine.refresh_revision()) == engine.revision()
            clock.advance(bound - 0.001)
            stale = await authorizer.authorize(authorization())
            clock.advance(0.001)
            fresh = await authorizer.authorize(authorization())
    assert (stale.allowed, stale.cached) == (True, True)  # within the documented bound
    assert (fresh.allowed, fresh.cached) == (False, False)


def test_the_sync_engine_bounds_the_reuse_of_a_decision_the_same_way(
    opa_server: OpaServer,
) -> None:
    clock = FakeClock()
    with OpaRestEngineSync(opa_server.url, timeout=0.5) as engine:
        assert engine.max_decision_age == 5.5
        authorizer = PolicyAuthorizer(engine, cache=DecisionCache(clock=clock))

        async def scenario() -> tuple[bool, bool, bool]:
            with caller_context(subject="alice"):
                first = await authorizer.authorize(authorization())
                await asyncio.to_thread(opa_server.put_data, "gateway/authz/subjects", [])
                clock.advance(engine.max_decision_age)
                second = await authorizer.authorize(authorization())
            return first.allowed, second.allowed, second.cached

        assert asyncio.run(scenario()) == (True, False, False)


async def test_a_policy_change_is_bounded_even_without_the_revision_watcher(
    opa_server: OpaServer,
) -> None:
    clock = FakeClock()
    async with OpaRestEngine(opa_server.url, timeout=0.5, revision_interval=0) as engine:
        authorizer = PolicyAuthorizer(engine, cache=DecisionCache(clock=clock))
        with caller_context(subject="alice"):
            assert (await authorizer.authorize(authorization())).allowed is True
            await asyncio.to_thread(opa_server.put_policy, "kill_switch.rego", KILL_SWITCH)
            clock.advance(engine.max_decision_age)
            decision = await authorizer.authorize(authorization())
    assert decision.reasons == ("kill switch: on",)


@pytest.mark.parametrize("age", [0.0, 2.0, 600.0])
async def test_an_explicit_max_decision_age_is_the_reuse_bound(
    opa_server: OpaServer, age: float
) -> None:
    clock = FakeClock()
    async with OpaRestEngine(opa_server.url, revision_interval=0, max_decision_age=age) as engine:
        authorizer = PolicyAuthorizer(engine, cache=DecisionCache(max_ttl=3600, clock=clock))
        with caller_context(subject="alice"):
            await authorizer.authorize(authorization())
            clock.advance(min(age, 30.0) * 0.999)
            again = await authorizer.authorize(authorization())
    # The policy's own TTL (30 s) still applies below the engine's bound.
    assert again.cached is (age > 0)


@pytest.mark.parametrize("age", [-1.0, float("nan")])
def test_a_negative_max_decision_age_is_refused(age: float) -> None:
    with pytest.raises(ValueError, match="max_decision_age"):
        OpaRestEngine("http://127.0.0.1:8181", max_decision_age=age)
    with pytest.raises(ValueError, match="max_decision_age"):
        OpaRestEngineSync("http://127.0.0.1:8181", max_decision_age=age)


async def test_engine_helpers_push_policy_and_data(opa_server: OpaServer) -> None:
    async with engine_for(opa_server.url) as engine:
        assert await engine.healthy() is True
        await engine.wait_until_ready(within=2.0)
        before = engine.revision()
        await engine.put_data("gateway/authz/subjects", ["carol"])
        assert engine.revision() == before  # data is not policy
        with caller_context(subject="carol"):
            assert (await PolicyAuthorizer(engine).authorize(authorization())).allowed is True
        await engine.put_policy("extra/kill switch.rego", KILL_SWITCH)
        assert engine.revision() != before
        with caller_context(subject="carol"):
            decision = await PolicyAuthorizer(engine).authorize(authorization())
        assert decision.reasons == ("kill switch: on",)
        with pytest.raises(EngineError) as caught:
            await engine.put_policy("broken.rego", "package broken\n\nx := \n")
        assert caught.value.detail
        assert "rego_parse_error" not in str(caught.value)


async def test_revision_is_the_same_for_the_same_policies(opa_binary: str) -> None:
    with (
        OpaServer(binary=opa_binary, policy_paths=[REGO_DIR]) as one,
        OpaServer(binary=opa_binary, policy_paths=[REGO_DIR]) as two,
    ):
        async with engine_for(one.url) as first, engine_for(two.url) as second:
            assert first.revision() == second.revision()
            assert first.identity != second.identity


async def test_health_and_readiness_of_a_dead_server(opa_server: OpaServer) -> None:
    opa_server.kill()
    async with engine_for(opa_server.url) as engine:
        assert await engine.healthy() is False
        with pytest.raises(EngineUnavailableError):
            await engine.wait_until_ready(within=0.3, poll=0.05)


async def test_engine_not_open_is_unavailable() -> None:
    engine = OpaRestEngine("http://127.0.0.1:9", revision_interval=0)
    with pytest.raises(EngineUnavailableError):
        await engine.evaluate(DECISION, InputDocument(authorization()))
    await engine.close()  # closing a never-opened engine is harmless


@pytest.mark.parametrize(
    "url",
    ["ftp://127.0.0.1:8181", "127.0.0.1:8181", "http://127.0.0.1:8181/v1", "http://u@h:1", ""],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="OPA URL"):
        OpaRestEngine(url)
    with pytest.raises(ValueError, match="OPA URL"):
        OpaRestEngineSync(url)


def test_non_positive_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="timeout"):
        OpaRestEngine("http://127.0.0.1:8181", timeout=0)


# -- the I/O-free readers ---------------------------------------------------------------------


def test_read_response_defined_and_undefined() -> None:
    answer_ = read_response(200, b'{"decision_id": "d1", "result": {"allow": true}}', revision="r")
    assert answer_.defined is True
    assert answer_.value == {"allow": True}
    assert answer_.decision_id == "d1"
    assert answer_.revision == "r"
    undefined = read_response(200, b'{"decision_id": "d2"}', revision="r")
    assert undefined.defined is False
    assert undefined.decision_id == "d2"
    null = read_response(200, b'{"result": null}', revision="r")
    assert null.defined is True
    assert null.value is None
    odd_id = read_response(200, b'{"decision_id": 7, "result": true}', revision="r")
    assert odd_id.decision_id is None


def test_read_response_keeps_numbers_exact() -> None:
    answer_ = read_response(200, b'{"result": {"n": 9007199254740993, "x": 0.1}}', revision="r")
    assert answer_.value["n"] == 9007199254740993
    assert str(answer_.value["x"]) == "0.1"


def test_read_response_takes_bundle_revisions_from_provenance() -> None:
    body = {
        "result": True,
        "provenance": {"bundles": {"b": {"revision": "2"}, "a": {"revision": "1"}}},
    }
    answer_ = read_response(200, json.dumps(body).encode(), revision="policies:x")
    assert answer_.revision == "bundles:a=1,b=2"


@pytest.mark.parametrize(
    ("status", "body", "detail"),
    [
        (500, b'{"code": "internal_error", "message": "boom"}', "500 internal_error: boom"),
        (400, b'{"code": "invalid_parameter"}', "400 invalid_parameter: None"),
        (502, b"<html>", "502 None: None"),
        (200, b"[1]", "[1]"),
        (200, b"not json", "not json"),
        (200, b'{"result": 1, "result": 2}', '{"result": 1, "result": 2}'),
    ],
)
def test_read_response_errors(status: int, body: bytes, detail: str) -> None:
    with pytest.raises(EngineError) as caught:
        read_response(status, body, revision="r")
    assert caught.value.detail == detail
    assert "boom" not in str(caught.value)


def test_read_response_detail_is_bounded() -> None:
    with pytest.raises(EngineError) as caught:
        read_response(500, json.dumps({"message": "x" * 10_000}).encode(), revision="r")
    assert caught.value.detail is not None
    assert len(caught.value.detail) <= 500


def test_revision_from_policies_is_an_order_independent_digest() -> None:
    policies = [{"id": "b.rego", "raw": "package b"}, {"id": "a.rego", "raw": "package a"}]
    one = revision_from(b'{"result": {}}', json.dumps({"result": policies}).encode())
    two = revision_from(b'{"result": {}}', json.dumps({"result": policies[::-1]}).encode())
    changed = revision_from(
        b'{"result": {}}',
        json.dumps({"result": [*policies[:1], {"id": "a.rego", "raw": "package a\n"}]}).encode(),
    )
    assert one == two
    assert one.startswith("policies:")
    assert changed != one


def test_revision_from_bundles() -> None:
    bundles = {"result": {"main": {"manifest": {"revision": "42"}}, "extra": {"manifest": {}}}}
    assert revision_from(json.dumps(bundles).encode(), None) == "bundles:extra=,main=42"


def test_revision_from_garbage_is_still_a_revision() -> None:
    assert revision_from(b"garbage", b"garbage").startswith("policies:")
