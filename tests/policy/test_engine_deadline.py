"""Every engine honours its deadline, and no evaluation runs on the event loop.

A slow policy (``data.gateway.faults.slow``: quadratic in ``input.arguments.xs``) makes a
real stall on the real engines; the fake simulates one by advancing a fake clock. The only
waiting in these tests is for an engine's own deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import json
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import httpx
import pytest

from gateway import Authorization, Decision
from gateway.policy import (
    EmbeddedEngine,
    EngineAnswer,
    EngineTimeoutError,
    EngineUnavailableError,
    InputDocument,
    OpaRestEngine,
    OpaRestEngineSync,
    PolicyAuthorizer,
    PolicyEngine,
    _epoch,
)
from gateway.server import Authenticator, Gateway, GatewayApp, GatewayMetrics
from gateway.service._config import ApiKey, AuthConfig
from gateway.testing import FakeClock, LiveServer, OpaServer, RecordingTool, StaticEngine
from tests.policy.conftest import (
    DECISION,
    REGO_DIR,
    SHIPPED_BUNDLE,
    assert_no_leak,
    authorization,
    denied_without_running,
    guarded,
)

SLOW: Final = "gateway/faults/slow"
#: Far longer than SHORT on every engine and machine: the work is quadratic, and 3,000 items
#: took OPA ~4 s and its compiled wasm ~1 s on one 2-core machine but ~0.3 s on a faster one,
#: which let the wasm answer inside the deadline. 10,000 items are 11 times that work, and
#: still under the 64 KiB inline size (an engine stops at its deadline, OPA when the client
#: goes away, so the extra work is never done).
SLOW_ARGUMENTS: Final = json.dumps({"xs": list(range(10_000))}).encode()
FAST_ARGUMENTS: Final = b'{"xs": [1, 2]}'
SHORT: Final = 0.3
#: The compiled entrypoints of the test policy these tests ask.
ENTRYPOINTS: Final = (DECISION, SLOW)


def slow_document() -> InputDocument:
    return InputDocument(authorization(arguments=SLOW_ARGUMENTS))


def fast_document() -> InputDocument:
    return InputDocument(authorization(arguments=FAST_ARGUMENTS))


def embedded_engine(**options: Any) -> EmbeddedEngine:
    options.setdefault("timeout_s", SHORT)
    return EmbeddedEngine.from_directory(REGO_DIR, entrypoints=ENTRYPOINTS, **options)


@pytest.fixture
def embedded() -> Iterator[EmbeddedEngine]:
    with embedded_engine() as engine:
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
        with embedded_engine() as engine_in_process:
            yield engine_in_process
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


async def _loop_runs_during(engine: EmbeddedEngine, document: InputDocument) -> bool:
    """Whether 1000 other steps of the loop run before the evaluation ends."""
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while ticks < 1000:
            ticks += 1
            await asyncio.sleep(0)

    evaluation = asyncio.ensure_future(engine.evaluate(SLOW, document))
    ticker = asyncio.ensure_future(tick())
    done, _ = await asyncio.wait({evaluation, ticker}, return_when=asyncio.FIRST_COMPLETED)
    with contextlib.suppress(EngineTimeoutError):
        await evaluation
    await ticker
    return done == {ticker}


async def test_the_event_loop_keeps_running_while_a_slow_small_input_is_evaluated(
    embedded: EmbeddedEngine,
) -> None:
    # A 59 KB input: inline first, then on a thread once it overruns the inline budget.
    assert len(SLOW_ARGUMENTS) < 64 << 10
    assert await _loop_runs_during(embedded, slow_document())
    with pytest.raises(EngineTimeoutError):
        await embedded.evaluate(SLOW, slow_document())


async def test_an_input_above_the_inline_size_is_never_evaluated_on_the_loop() -> None:
    # An inline budget longer than the deadline: only the size can send it to a thread.
    with embedded_engine(inline_s=60.0, inline_bytes=1024) as engine:
        assert await _loop_runs_during(engine, slow_document())


async def test_an_inline_evaluation_holds_the_loop_for_its_budget() -> None:
    # The control for the two tests above: with a budget as long as the deadline, the
    # evaluation holds the loop until it ends, and the ticker cannot run.
    with embedded_engine(inline_s=SHORT) as engine:
        assert not await _loop_runs_during(engine, slow_document())


async def test_a_small_fast_input_is_answered_inline(embedded: EmbeddedEngine) -> None:
    # Answered within the task's first step: no thread hop, no second turn of the loop.
    task = asyncio.ensure_future(embedded.evaluate(SLOW, fast_document()))
    await asyncio.sleep(0)
    assert task.done()
    assert task.result().value == 2


async def test_an_overrun_inline_evaluation_is_decided_on_a_thread_within_the_deadline() -> None:
    # 1000 elements: about 0.15 s of evaluation, past the inline budget, within the deadline.
    document = InputDocument(
        authorization(arguments=json.dumps({"xs": list(range(1000))}).encode())
    )
    with embedded_engine(timeout_s=30.0) as engine:
        assert (await engine.evaluate(SLOW, document)).value == 1000


def test_the_sync_entry_point_honours_the_deadline_too(embedded: EmbeddedEngine) -> None:
    with pytest.raises(EngineTimeoutError):
        embedded.evaluate_sync(SLOW, slow_document())
    assert embedded.evaluate_sync(SLOW, fast_document()).value == 2


async def test_callers_waiting_for_a_busy_thread_are_all_answered() -> None:
    with embedded_engine(timeout_s=30.0, threads=1, inline_bytes=0) as engine:
        answers = await asyncio.gather(*(engine.evaluate(SLOW, fast_document()) for _ in range(20)))
        assert [answer.value for answer in answers] == [2] * 20


async def test_callers_queued_behind_a_slow_evaluation_time_out_on_their_own_deadline() -> None:
    with embedded_engine(threads=1, inline_bytes=0) as engine:
        outcomes = await asyncio.gather(
            engine.evaluate(SLOW, slow_document()),
            *(engine.evaluate(SLOW, fast_document()) for _ in range(3)),
            return_exceptions=True,
        )
        assert isinstance(outcomes[0], EngineTimeoutError)
        for outcome in outcomes[1:]:
            # Each either got the thread in time or was told engine_timeout: never more.
            if not isinstance(outcome, EngineTimeoutError):
                assert isinstance(outcome, EngineAnswer)
                assert outcome.value == 2


async def test_a_cancelled_caller_leaves_the_engine_usable(embedded: EmbeddedEngine) -> None:
    task = asyncio.ensure_future(embedded.evaluate(SLOW, slow_document()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await embedded.evaluate(SLOW, fast_document())).value == 2


async def test_a_closed_embedded_engine_is_unavailable() -> None:
    engine = embedded_engine()
    await engine.evaluate(DECISION, fast_document())
    engine.close()
    with pytest.raises(EngineUnavailableError):
        await engine.evaluate(DECISION, fast_document())
    with pytest.raises(EngineUnavailableError):
        await engine.evaluate(DECISION, InputDocument(authorization(arguments=SLOW_ARGUMENTS)))
    with pytest.raises(EngineUnavailableError):
        engine.evaluate_sync(DECISION, fast_document())


def _returns(action: Callable[[], object]) -> bool:
    # A deadlock detector, not a timing assertion: the action takes microseconds when it
    # does not block, and blocks forever when it does.
    worker = threading.Thread(target=action, daemon=True)
    worker.start()
    worker.join(timeout=10)
    return not worker.is_alive()


def test_stopping_a_ticker_while_its_clock_lock_is_held_does_not_block() -> None:
    # An engine's finalizer stops its ticker, and the garbage collector may run it at any
    # allocation, including one a thread starting an engine makes under the lock.
    ticker = _epoch.EpochTicker(0.0125)
    assert ticker.ticking
    with _epoch._Clock._lock:
        assert _returns(ticker.stop)
    # Queued while the lock was held; the next use of the clock applies it.
    assert not ticker.ticking


def test_an_engine_collected_under_the_clock_lock_does_not_deadlock_the_next_engine() -> None:
    engine = embedded_engine()
    gone = weakref.ref(engine)
    # Only the cycle keeps the engine alive, so only the collector frees it.
    cycle: list[object] = [engine]
    cycle.append(cycle)

    def collect_under_lock() -> None:
        with _epoch._Clock._lock:
            gc.collect()

    del engine, cycle
    assert gone() is not None
    assert _returns(collect_under_lock)
    assert gone() is None
    assert _returns(lambda: embedded_engine().close())


async def test_an_embedded_engine_that_is_collected_stops_its_deadline_clock() -> None:
    # A tick interval no other engine here uses: its clock stops with this engine.
    engine = embedded_engine(inline_bytes=0, threads=1, tick_s=0.00625)
    await engine.evaluate(DECISION, fast_document())
    ticker = engine._ticker
    assert ticker.ticking
    # The worker thread lets go of the finished job (and so of the engine) only after the
    # caller has its answer; the next job on that one worker runs after it has.
    await asyncio.wrap_future(engine._threads.submit(lambda: None))
    gone = weakref.ref(engine)
    del engine
    gc.collect()
    assert gone() is None
    assert not ticker.ticking


def test_engines_of_one_tick_interval_share_one_engine_and_one_clock() -> None:
    def clock_threads() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "wasm-epoch" and t.is_alive())

    before = clock_threads()
    engines = [embedded_engine() for _ in range(12)]
    try:
        assert len({id(engine._engine) for engine in engines}) == 1
        assert clock_threads() <= before + 1
    finally:
        for engine in engines:
            engine.close()


@pytest.mark.parametrize(
    "options",
    [
        {"timeout_s": 0},
        {"timeout_s": -1.0},
        {"timeout_s": float("nan")},
        {"threads": 0},
        {"inline_s": 0},
        {"inline_bytes": -1},
    ],
)
def test_nonsensical_embedded_settings_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"timeout|threads|inline"):
        embedded_engine(**options)


# -- the service stays responsive ----------------------------------------------------------

API_KEY: Final = "operator-key"
EXEC_SCHEMA: Final = {
    "type": "object",
    "properties": {"command": {"type": "string"}, "args": {"type": "array"}},
}
XS_SCHEMA: Final = {"type": "object", "properties": {"xs": {"type": "array"}}}


class _Announcing:
    """Delegates to the engine's authorizer; sets ``entered`` as an authorization starts."""

    def __init__(self, inner: PolicyAuthorizer) -> None:
        self._inner = inner
        self.entered = threading.Event()

    async def authorize(self, authorization: Authorization) -> Decision:
        self.entered.set()
        return await self._inner.authorize(authorization)


def _app(tool: RecordingTool, authorizer: _Announcing) -> GatewayApp:
    key = ApiKey(
        sha256=hashlib.sha256(API_KEY.encode()).hexdigest(),
        context={"subject": "olivia", "roles": ["operator"], "tenant": "acme"},
    )

    async def ready() -> bool:
        return True

    return GatewayApp(
        Gateway([tool], authorizer=authorizer),
        authenticator=Authenticator(AuthConfig(api_keys=(key,))),
        ready=ready,
        metrics=GatewayMetrics(None),
        max_body_bytes=4 << 20,
    )


async def test_healthz_answers_while_a_slow_policy_is_being_decided() -> None:
    # Tens of seconds of evaluation against a 2 s deadline: the call ends in engine_timeout,
    # and /healthz is answered while it runs.
    arguments = {"xs": list(range(20_000))}
    with embedded_engine(timeout_s=2.0) as engine:
        authorizer = _Announcing(PolicyAuthorizer(engine, path=SLOW))
        tool = RecordingTool("count_pairs", XS_SCHEMA)
        with LiveServer(_app(tool, authorizer)) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:
                call = asyncio.ensure_future(
                    client.post(
                        "/v1/calls",
                        json={"id": "c1", "name": "count_pairs", "arguments": arguments},
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
    assert response.status_code == 503
    assert response.json()["code"] == "engine_timeout"


def _big_exec_arguments() -> dict[str, Any]:
    # ~900 KB of arguments for the shipped exec module to check, one by one.
    return {"command": "ls", "args": ["-l" + "x" * 10] * 64_000}


async def test_a_900_kb_exec_call_on_the_shipped_bundle_is_refused_and_never_runs() -> None:
    arguments = _big_exec_arguments()
    assert len(json.dumps(arguments)) > 900_000
    with EmbeddedEngine.from_bundle(SHIPPED_BUNDLE, timeout_s=10.0) as engine:
        authorizer = _Announcing(PolicyAuthorizer(engine))
        tool = RecordingTool("run_command", EXEC_SCHEMA)
        with LiveServer(_app(tool, authorizer)) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=60.0) as client:
                response = await client.post(
                    "/v1/calls",
                    json={"id": "c1", "name": "run_command", "arguments": arguments},
                    headers={"X-API-Key": API_KEY},
                )
                assert (await client.get("/healthz")).status_code == 200
    assert tool.count == 0
    # Denied by the policy, or (past the memory cap of its instance) refused for no decision.
    assert response.status_code in (403, 503)
    if response.status_code == 503:
        assert response.json()["code"] in ("engine_error", "engine_timeout")
