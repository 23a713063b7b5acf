"""Every engine honours its deadline, and no evaluation runs on the event loop.

A slow policy (``data.gateway.faults.slow``: quadratic in ``input.arguments.xs``) makes a
real stall on the real engines; the fake simulates one by advancing a fake clock. The only
waiting in these tests is for an engine's own deadline.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import os
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import httpx
import pytest

from gateway import Authorization, Decision
from gateway.policy import (
    EmbeddedEngine,
    EngineTimeoutError,
    EngineUnavailableError,
    InputDocument,
    OpaRestEngine,
    OpaRestEngineSync,
    PolicyAuthorizer,
    PolicyEngine,
)
from gateway.server import Authenticator, Gateway, GatewayApp, GatewayMetrics
from gateway.server._config import ApiKey, AuthConfig
from gateway.testing import FakeClock, LiveServer, OpaServer, RecordingTool, StaticEngine
from tests.policy.conftest import (
    DECISION,
    REGO_DIR,
    REPO_ROOT,
    assert_no_leak,
    authorization,
    denied_without_running,
    guarded,
)

SLOW: Final = "gateway/faults/slow"
#: Seconds of evaluation on every engine (regorus ~3 s, OPA ~4 s on the reference machine).
SLOW_ARGUMENTS: Final = json.dumps({"xs": list(range(3000))}).encode()
FAST_ARGUMENTS: Final = b'{"xs": [1, 2]}'
SHORT: Final = 0.3


def slow_document() -> InputDocument:
    return InputDocument(authorization(arguments=SLOW_ARGUMENTS))


def fast_document() -> InputDocument:
    return InputDocument(authorization(arguments=FAST_ARGUMENTS))


@pytest.fixture
def embedded() -> Iterator[EmbeddedEngine]:
    with EmbeddedEngine.from_directory(REGO_DIR, timeout=SHORT, workers=1) as engine:
        yield engine


# -- every engine --------------------------------------------------------------------------


@pytest.fixture(params=["rest", "rest-sync", "embedded", "static"])
async def slow_engine(request: pytest.FixtureRequest) -> AsyncIterator[PolicyEngine]:
    """Each engine with a SHORT deadline, serving a policy slower than that."""
    if request.param == "rest":
        server: OpaServer = request.getfixturevalue("opa_server")
        async with OpaRestEngine(server.url, timeout=SHORT, revision_interval=0) as engine:
            yield engine
    elif request.param == "rest-sync":
        server = request.getfixturevalue("opa_server")
        with OpaRestEngineSync(server.url, timeout=SHORT) as sync_engine:
            yield sync_engine
    elif request.param == "embedded":
        with EmbeddedEngine.from_directory(REGO_DIR, timeout=SHORT) as embedded_engine:
            yield embedded_engine
    else:
        clock = FakeClock()

        def slow(document: dict[str, Any]) -> Any:
            clock.advance(SHORT * len(document["arguments"]["xs"]) / 100)
            return len(document["arguments"]["xs"])

        yield StaticEngine({SLOW: slow}, timeout=SHORT, clock=clock)


async def test_an_evaluation_past_the_deadline_is_engine_timeout(
    slow_engine: PolicyEngine,
) -> None:
    with pytest.raises(EngineTimeoutError):
        await slow_engine.evaluate(SLOW, slow_document())
    # The engine still answers what it can answer in time.
    answer = await slow_engine.evaluate(SLOW, fast_document())
    assert answer.value == 2


async def test_a_late_decision_denies_behind_a_guard_and_says_nothing(
    slow_engine: PolicyEngine,
) -> None:
    binding, tool = guarded(PolicyAuthorizer(slow_engine, path=SLOW))
    error = await denied_without_running(binding, tool, SLOW_ARGUMENTS.decode())
    assert error.code == "engine_timeout"
    assert_no_leak(error, "2999", "xs", "timed out")


def test_the_static_engine_refuses_a_nonsensical_timeout() -> None:
    with pytest.raises(ValueError, match="timeout"):
        StaticEngine({}, timeout=0)


# -- the embedded engine -------------------------------------------------------------------


async def test_the_event_loop_keeps_running_while_the_embedded_engine_evaluates(
    embedded: EmbeddedEngine,
) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while ticks < 1000:
            ticks += 1
            await asyncio.sleep(0)

    evaluation = asyncio.ensure_future(embedded.evaluate(SLOW, slow_document()))
    ticker = asyncio.ensure_future(tick())
    done, _ = await asyncio.wait({evaluation, ticker}, return_when=asyncio.FIRST_COMPLETED)
    assert done == {ticker}, "the loop ran nothing else while the policy was evaluated"
    with pytest.raises(EngineTimeoutError):
        await evaluation


def test_the_sync_entry_point_honours_the_deadline_too(embedded: EmbeddedEngine) -> None:
    with pytest.raises(EngineTimeoutError):
        embedded.evaluate_sync(SLOW, slow_document())
    assert embedded.evaluate_sync(SLOW, fast_document()).value == 2


async def test_a_worker_past_its_deadline_is_killed_and_replaced(
    embedded: EmbeddedEngine,
) -> None:
    await embedded.evaluate(SLOW, fast_document())
    (before,) = embedded.worker_pids()
    with pytest.raises(EngineTimeoutError):
        await embedded.evaluate(SLOW, slow_document())
    assert embedded.live_workers == 0
    with pytest.raises(ProcessLookupError):
        os.kill(before, 0)  # the runaway evaluation holds no process any more
    assert (await embedded.evaluate(SLOW, fast_document())).value == 2
    assert embedded.worker_pids() != [before]


async def test_a_saturated_embedded_engine_refuses_new_calls_at_once() -> None:
    with EmbeddedEngine.from_directory(REGO_DIR, timeout=SHORT, workers=1, max_waiting=0) as engine:
        stalled = asyncio.ensure_future(engine.evaluate(SLOW, slow_document()))
        await asyncio.sleep(0)  # let it take the only worker
        with pytest.raises(EngineUnavailableError):
            await engine.evaluate(SLOW, fast_document())
        assert not stalled.done(), "the refusal waited for the stalled evaluation"
        with pytest.raises(EngineTimeoutError):
            await stalled


async def test_callers_waiting_for_a_busy_worker_are_answered_in_order() -> None:
    with EmbeddedEngine.from_directory(REGO_DIR, timeout=5.0, workers=1) as engine:
        answers = await asyncio.gather(*(engine.evaluate(SLOW, fast_document()) for _ in range(20)))
        assert [answer.value for answer in answers] == [2] * 20
        assert engine.live_workers == 1


async def test_a_cancelled_caller_leaves_the_engine_usable(embedded: EmbeddedEngine) -> None:
    task = asyncio.ensure_future(embedded.evaluate(SLOW, slow_document()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await embedded.evaluate(SLOW, fast_document())).value == 2


async def test_a_closed_embedded_engine_is_unavailable_and_has_no_workers() -> None:
    engine = EmbeddedEngine.from_directory(REGO_DIR)
    await engine.evaluate(DECISION, fast_document())
    (pid,) = engine.worker_pids()
    engine.close()
    assert engine.live_workers == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(EngineUnavailableError):
        await engine.evaluate(DECISION, fast_document())
    with pytest.raises(EngineUnavailableError):
        engine.evaluate_sync(DECISION, fast_document())


async def test_an_embedded_engine_that_is_collected_ends_its_workers() -> None:
    engine = EmbeddedEngine.from_directory(REGO_DIR)
    await engine.evaluate(DECISION, fast_document())
    (pid,) = engine.worker_pids()
    gone = weakref.ref(engine)
    del engine
    gc.collect()
    assert gone() is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize(
    "options",
    [{"timeout": 0}, {"timeout": -1.0}, {"timeout": float("nan")}, {"workers": 0}],
)
def test_nonsensical_embedded_settings_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"timeout|workers"):
        EmbeddedEngine.from_directory(REGO_DIR, **options)


# -- the service stays responsive ----------------------------------------------------------

SHIPPED: Final = REPO_ROOT / "policies"
API_KEY: Final = "operator-key"
EXEC_SCHEMA: Final = {
    "type": "object",
    "properties": {"command": {"type": "string"}, "args": {"type": "array"}},
}


class _Announcing:
    """Delegates to the engine's authorizer; sets ``entered`` as an authorization starts."""

    def __init__(self, inner: PolicyAuthorizer) -> None:
        self._inner = inner
        self.entered = threading.Event()

    async def authorize(self, authorization: Authorization) -> Decision:
        self.entered.set()
        return await self._inner.authorize(authorization)


def _big_exec_arguments() -> dict[str, Any]:
    # ~900 KB of arguments for the shipped exec module to check, one by one.
    return {"command": "ls", "args": ["-l" + "x" * 10] * 64_000}


async def test_healthz_answers_while_a_900_kb_exec_call_is_being_decided() -> None:
    arguments = _big_exec_arguments()
    assert len(json.dumps(arguments)) > 900_000
    with EmbeddedEngine.from_directory(SHIPPED, timeout=2.0) as engine:
        authorizer = _Announcing(PolicyAuthorizer(engine))
        tool = RecordingTool("run_command", EXEC_SCHEMA)
        gateway = Gateway([tool], authorizer=authorizer)
        key = ApiKey(
            sha256=hashlib.sha256(API_KEY.encode()).hexdigest(),
            context={"subject": "olivia", "roles": ["operator"], "tenant": "acme"},
        )

        async def ready() -> bool:
            return True

        app = GatewayApp(
            gateway,
            authenticator=Authenticator(AuthConfig(api_keys=(key,))),
            ready=ready,
            metrics=GatewayMetrics(None),
            max_body_bytes=4 << 20,
        )
        with LiveServer(app) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:
                call = asyncio.ensure_future(
                    client.post(
                        "/v1/calls",
                        json={"id": "c1", "name": "run_command", "arguments": arguments},
                        headers={"X-API-Key": API_KEY},
                    )
                )
                assert await asyncio.to_thread(authorizer.entered.wait, 30.0)
                health = asyncio.ensure_future(client.get("/healthz"))
                done, _ = await asyncio.wait({call, health}, return_when=asyncio.FIRST_COMPLETED)
                assert health in done, "/healthz waited for the policy evaluation"
                assert call not in done
                assert (await health).status_code == 200
                response = await call
    assert tool.count == 0
    assert response.status_code in (403, 503)
    if response.status_code == 503:
        assert response.json()["code"] == "engine_timeout"
