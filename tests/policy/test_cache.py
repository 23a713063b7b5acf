"""The decision cache and CachingAuthorizer: keys, TTLs, coalescing, invalidation, threads."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway import (
    Authorization,
    AuthorizationError,
    Binding,
    Decision,
    Guard,
    Invocation,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    bind,
)
from gateway.policy import (
    CacheStats,
    CachingAuthorizer,
    CallerContext,
    CoalescedEvaluationError,
    DecisionCache,
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    InputDocument,
    MalformedDecisionError,
    UndefinedDecisionError,
    caller_context,
)
from gateway.testing import FakeClock, RecordingTool
from tests.helpers import IJSON_CHARACTERS

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "additionalProperties": True,
}
SEARCH = ToolDefinition("search", SEARCH_SCHEMA)
ALLOW_30S = Decision(True, cache_ttl=30)

Answer = Callable[[InputDocument], object]


class Decide:
    """A decision function that counts evaluations, optionally holding each one open.

    ``answer`` maps the document to what to return; an exception instance is raised.
    ``gate`` (read when an evaluation starts) holds that evaluation until it is set.
    """

    def __init__(self, answer: object = ALLOW_30S, *, gate: asyncio.Event | None = None):
        self.answer: Answer = answer if callable(answer) else (lambda _document: answer)
        self.gate = gate
        self.documents: list[InputDocument] = []
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.documents)

    async def __call__(self, document: InputDocument) -> Decision | bool:
        with self._lock:
            self.documents.append(document)
        gate = self.gate
        if gate is not None:
            await gate.wait()
        result = self.answer(document)
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[return-value]


def caching(
    decide: Decide,
    cache: DecisionCache | None,
    *,
    engine: str = "engine-a",
    path: str = "gateway/authz/decision",
    revision: Callable[[], str] = lambda: "rev-1",
) -> CachingAuthorizer:
    return CachingAuthorizer(decide, engine=engine, path=path, revision=revision, cache=cache)


def authorization(arguments: str = '{"query":"scope"}') -> Authorization:
    return Authorization(SEARCH, arguments.encode())


def guarded(authorizer: CachingAuthorizer) -> tuple[RecordingTool, Binding, Invocation]:
    tool = RecordingTool("search", SEARCH_SCHEMA)
    binding = bind(Guard(tool=tool, authorizer=authorizer))
    return tool, binding, binding.prepare(ToolCall("call-1", "search", '{"query":"scope"}'))


async def settle(condition: Callable[[], bool]) -> None:
    """Yield to the event loop (no timed sleep) until ``condition`` holds."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def outcomes(tasks: list[asyncio.Task[Any]]) -> list[object]:
    return list(await asyncio.gather(*tasks, return_exceptions=True))


# --- hits ----------------------------------------------------------------------------------


async def test_cache_hit_returns_the_decision_marked_cached_without_evaluating() -> None:
    decide = Decide()
    authorizer = caching(decide, DecisionCache(clock=FakeClock()))

    first = await authorizer.authorize(authorization())
    second = await authorizer.authorize(authorization())

    assert (first, second) == (ALLOW_30S, dataclasses.replace(ALLOW_30S, cached=True))
    assert decide.count == 1


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(Decision(True, cache_ttl=30), id="allow"),
        pytest.param(Decision(False, cache_ttl=30), id="deny"),
        pytest.param(
            Decision(
                False,
                message="public",
                reasons=("audit",),
                decision_id="d-1",
                revision="rev-9",
                cache_ttl=30,
                engine="opa",
            ),
            id="deny-with-every-field",
        ),
    ],
)
async def test_allow_and_deny_decisions_are_both_cached_with_all_their_fields(
    answer: Decision,
) -> None:
    decide = Decide(answer)
    authorizer = caching(decide, DecisionCache(clock=FakeClock()))

    await authorizer.authorize(authorization())
    hit = await authorizer.authorize(authorization())

    assert hit == dataclasses.replace(answer, cached=True)
    assert decide.count == 1


async def test_boolean_answers_become_decisions_carrying_the_engine() -> None:
    authorizer = caching(Decide(False), None, engine="engine-x")

    actual = await authorizer.authorize(authorization())

    assert actual == Decision(False, engine="engine-x")


async def test_cache_stats_count_hits_and_misses() -> None:
    cache = DecisionCache(clock=FakeClock())
    authorizer = caching(Decide(), cache)

    for _ in range(3):
        await authorizer.authorize(authorization())
    await authorizer.authorize(authorization('{"query":"other"}'))

    assert cache.stats() == CacheStats(hits=2, misses=2, coalesced=0, evictions=0, size=2)


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"query":"scope","limit":3}', id="same"),
        pytest.param('{"limit":3,"query":"scope"}', id="member-order"),
        pytest.param(' {\n "query" : "scope" , "limit" : 3 }\n', id="whitespace"),
    ],
)
async def test_member_order_and_whitespace_of_arguments_do_not_change_the_entry(
    arguments: str,
) -> None:
    decide = Decide()
    authorizer = caching(decide, DecisionCache(clock=FakeClock()))
    await authorizer.authorize(authorization('{"query":"scope","limit":3}'))

    actual = await authorizer.authorize(authorization(arguments))

    assert (actual.cached, decide.count) == (True, 1)


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"query":"scopf","limit":3}', id="string-value"),
        pytest.param('{"query":"scope","limit":4}', id="number-value"),
        pytest.param('{"query":"scope","limit":3.0}', id="number-literal"),
        pytest.param('{"query":"scope"}', id="member-removed"),
    ],
)
async def test_different_argument_values_are_different_entries(arguments: str) -> None:
    decide = Decide()
    authorizer = caching(decide, DecisionCache(clock=FakeClock()))
    await authorizer.authorize(authorization('{"query":"scope","limit":3}'))

    actual = await authorizer.authorize(authorization(arguments))

    assert (actual.cached, decide.count) == (False, 2)


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"engine": "engine-b"}, id="engine"),
        pytest.param({"path": "gateway/authz/other"}, id="path"),
        pytest.param({"revision": lambda: "rev-2"}, id="revision"),
    ],
)
async def test_engine_path_and_revision_are_part_of_the_key(other: dict[str, Any]) -> None:
    cache = DecisionCache(clock=FakeClock())
    decide = Decide()
    await caching(decide, cache).authorize(authorization())

    actual = await caching(decide, cache, **other).authorize(authorization())

    assert (actual.cached, decide.count) == (False, 2)


async def test_authorizers_with_the_same_engine_path_and_revision_share_one_cache() -> None:
    cache = DecisionCache(clock=FakeClock())
    decide = Decide()
    await caching(decide, cache).authorize(authorization())

    actual = await caching(decide, cache).authorize(authorization())

    assert (actual.cached, decide.count) == (True, 1)


async def test_revision_change_is_a_miss() -> None:
    revision = ["rev-1"]
    decide = Decide()
    authorizer = caching(decide, DecisionCache(clock=FakeClock()), revision=lambda: revision[0])
    await authorizer.authorize(authorization())

    revision[0] = "rev-2"
    actual = await authorizer.authorize(authorization())

    assert (actual.cached, decide.count) == (False, 2)


async def test_without_a_cache_every_call_is_evaluated() -> None:
    decide = Decide()
    authorizer = caching(decide, None)

    await authorizer.authorize(authorization())
    actual = await authorizer.authorize(authorization())

    assert (actual.cached, decide.count, authorizer.cache) == (False, 2, None)


# --- caller context in the key (hypothesis) -------------------------------------------------

JSON_TEXT = st.text(alphabet=IJSON_CHARACTERS, max_size=6)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | JSON_TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(JSON_TEXT, children, max_size=3)
    ),
    max_leaves=10,
)
CONTEXTS = st.dictionaries(JSON_TEXT, JSON_VALUES, max_size=5)


def as_json(value: dict[str, Any]) -> str:
    """An independent oracle for "these two contexts are different JSON"."""
    return json.dumps(value, sort_keys=True)


@st.composite
def differing_contexts(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A context and a copy that differs in exactly one field (changed, added or removed)."""
    first = draw(CONTEXTS)
    second = dict(first)
    change = draw(st.sampled_from(["change", "add", "remove"] if first else ["add"]))
    if change == "remove":
        del second[draw(st.sampled_from(sorted(first)))]
    elif change == "change":
        key = draw(st.sampled_from(sorted(first)))
        second[key] = draw(
            JSON_VALUES.filter(lambda value: as_json({"v": value}) != as_json({"v": first[key]}))
        )
    else:
        second[draw(JSON_TEXT.filter(lambda key: key not in first))] = draw(JSON_VALUES)
    return first, second


def authorize_as(authorizer: CachingAuthorizer, contexts: list[dict[str, Any]]) -> list[Decision]:
    async def scenario() -> list[Decision]:
        decisions = []
        for context in contexts:
            with caller_context(context):
                decisions.append(await authorizer.authorize(authorization()))
        return decisions

    return asyncio.run(scenario())


@given(pair=differing_contexts())
def test_calls_whose_caller_contexts_differ_in_any_field_never_share_an_entry(
    pair: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    first, second = pair
    assert as_json(first) != as_json(second)
    decide = Decide()
    authorizer = caching(decide, DecisionCache(clock=FakeClock()))

    decisions = authorize_as(authorizer, [first, second, first, second])

    assert decide.count == 2
    assert [decision.cached for decision in decisions] == [False, False, True, True]
    assert [document.context for document in decide.documents] == [
        CallerContext(first),
        CallerContext(second),
    ]


@given(context=CONTEXTS, randoms=st.data())
def test_calls_with_the_same_caller_context_share_an_entry(
    context: dict[str, Any], randoms: st.DataObject
) -> None:
    reordered = {key: context[key] for key in randoms.draw(st.permutations(list(context)))}
    decide = Decide()
    authorizer = caching(decide, DecisionCache(clock=FakeClock()))

    decisions = authorize_as(authorizer, [context, reordered])

    assert (decide.count, decisions[1].cached) == (1, True)


# --- TTL -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elapsed", "expected_evaluations"),
    [
        pytest.param(0.0, 1, id="immediately"),
        pytest.param(9.999, 1, id="just-before-ttl"),
        pytest.param(10.0, 2, id="at-ttl"),
        pytest.param(11.0, 2, id="after-ttl"),
    ],
)
async def test_cached_decision_is_served_before_its_ttl_and_never_from_it(
    elapsed: float, expected_evaluations: int
) -> None:
    clock = FakeClock()
    decide = Decide(Decision(True, cache_ttl=10))
    authorizer = caching(decide, DecisionCache(clock=clock))
    await authorizer.authorize(authorization())

    clock.advance(elapsed)
    actual = await authorizer.authorize(authorization())

    assert (decide.count, actual.cached) == (expected_evaluations, expected_evaluations == 1)


@pytest.mark.parametrize(
    ("elapsed", "expected_evaluations"),
    [
        pytest.param(29.999, 1, id="before-max-ttl"),
        pytest.param(30.0, 2, id="at-max-ttl"),
    ],
)
async def test_ttl_is_clamped_to_the_configured_maximum(
    elapsed: float, expected_evaluations: int
) -> None:
    clock = FakeClock()
    decide = Decide(Decision(True, cache_ttl=3600))
    authorizer = caching(decide, DecisionCache(clock=clock, max_ttl=30))
    await authorizer.authorize(authorization())

    clock.advance(elapsed)
    await authorizer.authorize(authorization())

    assert decide.count == expected_evaluations


@given(
    ttl=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    max_ttl=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    max_age=st.none() | st.floats(min_value=0, max_value=1e6, allow_nan=False),
    elapsed=st.floats(min_value=0, max_value=2e6, allow_nan=False),
)
async def test_a_decision_is_never_served_at_or_past_the_least_of_its_three_limits(
    ttl: float, max_ttl: float, max_age: float | None, elapsed: float
) -> None:
    clock = FakeClock()
    decide = Decide(Decision(True, cache_ttl=ttl))
    authorizer = CachingAuthorizer(
        decide,
        engine="e",
        path="p",
        cache=DecisionCache(clock=clock, max_ttl=max_ttl),
        max_age=max_age,
    )
    await authorizer.authorize(authorization())
    clock.advance(elapsed)
    again = await authorizer.authorize(authorization())
    limit = min(ttl, max_ttl, float("inf") if max_age is None else max_age)
    if again.cached:
        assert elapsed < limit
    if limit - elapsed >= 1e-3:  # beyond the clock's float resolution
        assert again.cached


@pytest.mark.parametrize(
    ("elapsed", "expected_evaluations"),
    [
        pytest.param(4.999, 1, id="before-max-age"),
        pytest.param(5.0, 2, id="at-max-age"),
    ],
)
async def test_an_authorizers_max_age_clamps_every_ttl(
    elapsed: float, expected_evaluations: int
) -> None:
    clock = FakeClock()
    decide = Decide(Decision(True, cache_ttl=30))
    authorizer = CachingAuthorizer(
        decide, engine="e", path="p", cache=DecisionCache(clock=clock), max_age=5
    )
    assert authorizer.max_age == 5
    await authorizer.authorize(authorization())
    clock.advance(elapsed)
    await authorizer.authorize(authorization())
    assert decide.count == expected_evaluations


@pytest.mark.parametrize("max_age", [-1.0, float("nan")])
def test_a_negative_max_age_is_refused(max_age: float) -> None:
    with pytest.raises(ValueError, match="max_age"):
        CachingAuthorizer(Decide(), engine="e", path="p", max_age=max_age)


@pytest.mark.parametrize(
    ("cache_ttl", "default_ttl", "expected"),
    [
        pytest.param(None, 0.0, 0.0, id="unspecified-default-zero"),
        pytest.param(None, 5.0, 5.0, id="unspecified-uses-default"),
        pytest.param(None, 500.0, 60.0, id="default-is-clamped-too"),
        pytest.param(0, 5.0, 0.0, id="zero-is-never"),
        pytest.param(2.5, 0.0, 2.5, id="own-ttl"),
        pytest.param(100, 0.0, 60.0, id="own-ttl-clamped"),
        pytest.param(float("inf"), 0.0, 60.0, id="infinite-clamped"),
    ],
)
def test_ttl_for_a_decision_is_its_own_or_the_default_clamped_to_max_ttl(
    cache_ttl: float | None, default_ttl: float, expected: float
) -> None:
    cache = DecisionCache(max_ttl=60, default_ttl=default_ttl)

    actual = cache.ttl_for(Decision(True, cache_ttl=cache_ttl))

    assert actual == expected


@pytest.mark.parametrize(
    ("answer", "default_ttl"),
    [
        pytest.param(Decision(True, cache_ttl=0), 5.0, id="ttl-zero-beats-default"),
        pytest.param(Decision(True), 0.0, id="ttl-none-default-zero"),
        pytest.param(True, 0.0, id="bool-default-zero"),
        pytest.param(False, 0.0, id="deny-bool-default-zero"),
    ],
)
async def test_decisions_with_no_ttl_are_not_cached(answer: object, default_ttl: float) -> None:
    cache = DecisionCache(clock=FakeClock(), default_ttl=default_ttl)
    decide = Decide(answer)
    authorizer = caching(decide, cache)

    await authorizer.authorize(authorization())
    actual = await authorizer.authorize(authorization())

    assert (decide.count, actual.cached, cache.stats().size) == (2, False, 0)


@pytest.mark.parametrize(
    ("elapsed", "expected_evaluations"),
    [pytest.param(4.999, 1, id="before-default"), pytest.param(5.0, 2, id="at-default")],
)
async def test_decisions_without_their_own_ttl_use_the_default_ttl(
    elapsed: float, expected_evaluations: int
) -> None:
    clock = FakeClock()
    decide = Decide(True)
    authorizer = caching(decide, DecisionCache(clock=clock, default_ttl=5))
    await authorizer.authorize(authorization())

    clock.advance(elapsed)
    await authorizer.authorize(authorization())

    assert decide.count == expected_evaluations


async def test_ttl_is_counted_from_the_start_of_the_evaluation() -> None:
    clock = FakeClock()

    def slow(_document: InputDocument) -> Decision:
        clock.advance(4)
        return Decision(True, cache_ttl=10)

    decide = Decide(slow)
    authorizer = caching(decide, DecisionCache(clock=clock))
    await authorizer.authorize(authorization())  # started at 0, finished at 4

    clock.advance(5.999)
    served = await authorizer.authorize(authorization())
    clock.advance(0.001)
    await authorizer.authorize(authorization())

    assert (served.cached, decide.count) == (True, 2)


async def test_decision_that_expired_during_its_own_evaluation_is_not_stored() -> None:
    clock = FakeClock()

    def slower_than_ttl(_document: InputDocument) -> Decision:
        clock.advance(10)
        return Decision(True, cache_ttl=10)

    cache = DecisionCache(clock=clock)
    authorizer = caching(Decide(slower_than_ttl), cache)

    await authorizer.authorize(authorization())

    assert cache.stats().size == 0


# --- never cached --------------------------------------------------------------------------

NO_DECISIONS = [
    pytest.param(lambda: EngineError("private"), EngineError, "engine_error", id="engine-error"),
    pytest.param(
        lambda: EngineTimeoutError("private"), EngineTimeoutError, "engine_timeout", id="timeout"
    ),
    pytest.param(
        lambda: EngineUnavailableError("private"),
        EngineUnavailableError,
        "engine_unavailable",
        id="unavailable",
    ),
    pytest.param(
        lambda: UndefinedDecisionError("private"),
        UndefinedDecisionError,
        "undefined_decision",
        id="undefined",
    ),
    pytest.param(lambda: ValueError("private"), ValueError, "no_decision", id="plain-error"),
    pytest.param(lambda: "yes", MalformedDecisionError, "malformed_decision", id="str"),
    pytest.param(lambda: 1, MalformedDecisionError, "malformed_decision", id="int"),
    pytest.param(lambda: None, MalformedDecisionError, "malformed_decision", id="none"),
    pytest.param(
        lambda: Decision(allowed=1),  # type: ignore[arg-type]
        MalformedDecisionError,
        "malformed_decision",
        id="decision-allowed-1",
    ),
    pytest.param(
        lambda: Decision(True, cache_ttl=-5),
        MalformedDecisionError,
        "malformed_decision",
        id="decision-negative-ttl",
    ),
]


@pytest.mark.parametrize(("make_answer", "raised", "code"), NO_DECISIONS)
async def test_errors_undefined_and_malformed_decisions_are_never_cached(
    make_answer: Callable[[], object], raised: type[Exception], code: str
) -> None:
    cache = DecisionCache(clock=FakeClock(), default_ttl=30)
    decide = Decide(lambda _document: make_answer())
    authorizer = caching(decide, cache)

    for _ in range(2):
        with pytest.raises(raised):
            await authorizer.authorize(authorization())

    assert (decide.count, cache.stats().size) == (2, 0)


@pytest.mark.parametrize(("make_answer", "raised", "code"), NO_DECISIONS)
async def test_no_decision_through_the_guard_is_an_authorization_error_with_its_code(
    make_answer: Callable[[], object], raised: type[Exception], code: str
) -> None:
    decide = Decide(lambda _document: make_answer())
    tool, binding, invocation = guarded(caching(decide, DecisionCache(clock=FakeClock())))

    with pytest.raises(AuthorizationError) as caught:
        await binding.call(invocation)

    assert (caught.value.code, type(caught.value.cause), tool.count) == (code, raised, 0)
    assert "private" not in str(caught.value)


# --- bounded size --------------------------------------------------------------------------


async def test_maxsize_evicts_the_least_recently_used_entry_and_counts_it() -> None:
    cache = DecisionCache(clock=FakeClock(), maxsize=2)
    decide = Decide()
    authorizer = caching(decide, cache)

    await authorizer.authorize(authorization('{"query":"a"}'))
    await authorizer.authorize(authorization('{"query":"b"}'))
    await authorizer.authorize(authorization('{"query":"a"}'))  # hit: "a" is now recent
    await authorizer.authorize(authorization('{"query":"c"}'))  # evicts "b"
    still_cached = await authorizer.authorize(authorization('{"query":"a"}'))
    evicted = await authorizer.authorize(authorization('{"query":"b"}'))

    assert (still_cached.cached, evicted.cached) == (True, False)
    assert cache.stats() == CacheStats(hits=2, misses=4, coalesced=0, evictions=2, size=2)


async def test_expired_entries_are_not_counted_as_evictions() -> None:
    clock = FakeClock()
    cache = DecisionCache(clock=clock, maxsize=1)
    authorizer = caching(Decide(Decision(True, cache_ttl=1)), cache)

    await authorizer.authorize(authorization('{"query":"a"}'))
    clock.advance(1)
    await authorizer.authorize(authorization('{"query":"b"}'))

    assert (cache.stats().evictions, cache.stats().size) == (0, 1)


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({"maxsize": 0}, id="maxsize-zero"),
        pytest.param({"max_ttl": -1}, id="negative-max-ttl"),
        pytest.param({"default_ttl": -1}, id="negative-default-ttl"),
    ],
)
def test_decision_cache_refuses_a_nonsensical_configuration(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="maxsize"):
        DecisionCache(**config)


def test_decision_cache_exposes_its_clock_and_staleness_bound() -> None:
    clock = FakeClock()

    cache = DecisionCache(clock=clock, max_ttl=12)

    assert (cache.clock, cache.max_ttl) == (clock, 12.0)


def test_cache_stats_are_an_immutable_snapshot() -> None:
    stats = DecisionCache().stats()

    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.hits = 5  # type: ignore[misc]


# --- invalidation --------------------------------------------------------------------------


async def test_invalidate_drops_every_entry() -> None:
    cache = DecisionCache(clock=FakeClock())
    decide = Decide()
    authorizer = caching(decide, cache)
    await authorizer.authorize(authorization('{"query":"a"}'))
    await authorizer.authorize(authorization('{"query":"b"}'))
    generation = cache.generation

    cache.invalidate()
    actual = await authorizer.authorize(authorization('{"query":"a"}'))

    assert (actual.cached, decide.count, cache.generation) == (False, 3, generation + 1)
    assert cache.stats().size == 1


async def test_evaluation_in_flight_during_invalidate_does_not_store_its_result() -> None:
    cache = DecisionCache(clock=FakeClock())
    gate = asyncio.Event()
    decide = Decide(gate=gate)
    authorizer = caching(decide, cache)
    first = asyncio.create_task(authorizer.authorize(authorization()))
    await settle(lambda: decide.count == 1)

    cache.invalidate()
    gate.set()
    result = await first
    later = await authorizer.authorize(authorization())

    assert (result.allowed, later.cached, decide.count) == (True, False, 2)


async def test_call_after_invalidate_does_not_join_an_evaluation_started_before_it() -> None:
    cache = DecisionCache(clock=FakeClock())
    old_policy = asyncio.Event()
    decide = Decide(lambda _document: Decision(True, cache_ttl=30), gate=old_policy)
    authorizer = caching(decide, cache)
    before = asyncio.create_task(authorizer.authorize(authorization()))
    await settle(lambda: decide.count == 1)

    cache.invalidate()  # e.g. the policy was reloaded and now denies
    decide.answer = lambda _document: Decision(False, cache_ttl=30)
    decide.gate = None
    joining = asyncio.create_task(authorizer.authorize(authorization()))
    try:
        await settle(joining.done)  # fails, rather than hangs, if it joined the old one
    finally:
        old_policy.set()
    after = await joining
    await before
    cached = await authorizer.authorize(authorization())

    assert (after.allowed, cached.allowed, cached.cached, decide.count) == (False, False, True, 2)


# --- coalescing ----------------------------------------------------------------------------


async def test_thousand_concurrent_identical_cold_calls_cause_exactly_one_evaluation() -> None:
    cache = DecisionCache(clock=FakeClock())
    gate = asyncio.Event()
    decide = Decide(gate=gate)
    tool, binding, invocation = guarded(caching(decide, cache))

    with caller_context(subject="alice"):
        tasks = [asyncio.create_task(binding.call(invocation)) for _ in range(1000)]
    await settle(lambda: cache.stats().coalesced == 999)
    gate.set()
    results = await asyncio.gather(*tasks)

    assert decide.count == 1
    assert all(isinstance(result, ToolOutput) for result in results)
    assert tool.count == 1000
    assert cache.stats() == CacheStats(hits=0, misses=1, coalesced=999, evictions=0, size=1)


async def test_when_the_shared_evaluation_fails_all_waiters_get_no_decision_and_none_cached() -> (
    None
):
    cache = DecisionCache(clock=FakeClock())
    gate = asyncio.Event()
    failure = EngineError("private engine detail")
    decide = Decide(failure, gate=gate)
    tool, binding, invocation = guarded(caching(decide, cache))

    tasks = [asyncio.create_task(binding.call(invocation)) for _ in range(1000)]
    await settle(lambda: cache.stats().coalesced == 999)
    gate.set()
    results = await outcomes(tasks)

    assert all(isinstance(result, AuthorizationError) for result in results)
    errors = [result for result in results if isinstance(result, AuthorizationError)]
    assert {error.code for error in errors} == {"engine_error"}
    assert all(error.cause is failure for error in errors)
    assert (decide.count, tool.count, cache.stats().size) == (1, 0, 0)

    decide.answer = lambda _document: ALLOW_30S
    decide.gate = None
    await binding.call(invocation)
    assert (decide.count, tool.count) == (2, 1)


async def test_when_the_leader_is_cancelled_waiters_get_no_decision_and_nothing_is_cached() -> None:
    cache = DecisionCache(clock=FakeClock())
    decide = Decide(gate=asyncio.Event())
    tool, binding, invocation = guarded(caching(decide, cache))
    leader = asyncio.create_task(binding.call(invocation))
    await settle(lambda: decide.count == 1)
    waiters = [asyncio.create_task(binding.call(invocation)) for _ in range(10)]
    await settle(lambda: cache.stats().coalesced == 10)

    leader.cancel()
    results = await outcomes(waiters)

    with pytest.raises(asyncio.CancelledError):
        await leader
    codes = [result.code for result in results if isinstance(result, AuthorizationError)]
    assert codes == ["engine_unavailable"] * 10
    assert all(
        isinstance(result, AuthorizationError)
        and isinstance(result.cause, CoalescedEvaluationError)
        for result in results
    )
    assert (tool.count, cache.stats().size) == (0, 0)

    decide.gate = None
    await binding.call(invocation)
    assert (decide.count, tool.count) == (2, 1)


async def test_a_cancelled_waiter_does_not_cancel_the_shared_evaluation() -> None:
    cache = DecisionCache(clock=FakeClock())
    gate = asyncio.Event()
    decide = Decide(gate=gate)
    tool, binding, invocation = guarded(caching(decide, cache))
    tasks = [asyncio.create_task(binding.call(invocation)) for _ in range(3)]
    await settle(lambda: cache.stats().coalesced == 2)

    tasks[1].cancel()
    gate.set()
    results = await outcomes(tasks)

    assert isinstance(results[0], ToolOutput)
    assert isinstance(results[1], asyncio.CancelledError)
    assert isinstance(results[2], ToolOutput)
    assert (decide.count, tool.count, cache.stats().size) == (1, 2, 1)


# --- threads -------------------------------------------------------------------------------


def test_one_caching_authorizer_used_from_threads_with_their_own_loops_stays_correct() -> None:
    threads, rounds, distinct = 8, 25, 16
    cache = DecisionCache(clock=FakeClock())
    evaluate = Decide(
        lambda document: Decision(document.to_dict()["arguments"]["n"] % 2 == 0, cache_ttl=60)
    )

    async def decide(document: InputDocument) -> Decision | bool:
        await asyncio.sleep(0)  # a yield, so that calls interleave within each loop
        return await evaluate(document)

    authorizer = CachingAuthorizer(decide, engine="engine-a", path="p", cache=cache)
    start = threading.Barrier(threads)
    results: list[tuple[int, bool]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    async def work(offset: int) -> list[tuple[int, bool]]:
        numbers = [(offset + index) % distinct for index in range(distinct)] * rounds
        decisions = await asyncio.gather(
            *(authorizer.authorize(authorization(f'{{"n":{number}}}')) for number in numbers)
        )
        return [(n, d.allowed) for n, d in zip(numbers, decisions, strict=True)]

    def thread_main(offset: int) -> None:
        try:
            start.wait()
            mine = asyncio.run(work(offset))
        except BaseException as exc:
            with lock:
                errors.append(exc)
            raise
        with lock:
            results.extend(mine)

    workers = [threading.Thread(target=thread_main, args=(offset,)) for offset in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    total = threads * rounds * distinct
    stats = cache.stats()
    assert errors == []
    assert len(results) == total
    assert all(allowed == (number % 2 == 0) for number, allowed in results)
    assert stats.hits + stats.misses + stats.coalesced == total
    assert (stats.misses, evaluate.count, stats.size) == (distinct, distinct, distinct)


# --- the cache's own API -------------------------------------------------------------------

KEY = ("engine-a", "gateway/authz/decision", "rev-1", "0" * 64)


def test_get_of_a_missing_key_is_none_and_not_a_hit() -> None:
    cache = DecisionCache(clock=FakeClock())

    assert (cache.get(KEY), cache.stats().hits) == (None, 0)


def test_put_then_get_serves_the_decision_marked_cached_and_counts_a_hit() -> None:
    clock = FakeClock()
    cache = DecisionCache(clock=clock)

    stored = cache.put(KEY, ALLOW_30S, started=clock(), generation=cache.generation)

    assert (stored, cache.get(KEY), cache.stats().hits) == (
        True,
        dataclasses.replace(ALLOW_30S, cached=True),
        1,
    )


@pytest.mark.parametrize(
    ("decision", "generation_offset"),
    [
        pytest.param(Decision(True, cache_ttl=0), 0, id="ttl-zero"),
        pytest.param(Decision(True), 0, id="no-ttl-default-zero"),
        pytest.param(ALLOW_30S, -1, id="stale-generation"),
    ],
)
def test_put_refuses_what_must_not_be_cached(decision: Decision, generation_offset: int) -> None:
    clock = FakeClock()
    cache = DecisionCache(clock=clock)
    cache.invalidate()

    stored = cache.put(
        KEY, decision, started=clock(), generation=cache.generation + generation_offset
    )

    assert (stored, cache.get(KEY)) == (False, None)


# --- the lock-free hit path against a model ------------------------------------------------

_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("call"), st.integers(0, 2), st.integers(0, 1)),
        st.tuples(st.just("advance"), st.sampled_from([0.5, 1.0, 2.5, 4.0])),
        st.tuples(st.just("invalidate")),
        st.tuples(st.just("revise")),
    ),
    max_size=60,
)


@given(operations=_OPERATIONS, maxsize=st.integers(1, 4))
@example(operations=[("call", 0, 0), ("advance", 4.0), ("call", 0, 0)], maxsize=2)
@example(operations=[("call", 0, 0), ("advance", 2.5), ("call", 0, 0)], maxsize=1)
@example(operations=[("call", 0, 0), ("invalidate",), ("call", 0, 0)], maxsize=2)
@example(operations=[("call", 0, 0), ("revise",), ("call", 0, 0)], maxsize=2)
@example(operations=[("call", 0, 0), ("call", 0, 1), ("call", 1, 0), ("call", 0, 0)], maxsize=2)
def test_every_answer_is_the_callers_own_and_no_hit_outlives_its_ttl_invalidation_or_revision(
    operations: list[tuple[Any, ...]], maxsize: int
) -> None:
    # A model of the staleness bound: a hit for (arguments, context) is only ever the
    # decision its own evaluation returned, under the same revision, with no invalidate
    # since, less than its TTL (3 s) after that evaluation started; the cache never holds
    # more than maxsize entries.
    clock = FakeClock()
    cache = DecisionCache(clock=clock, maxsize=maxsize, max_ttl=3)
    revision = [0]

    def answer(document: InputDocument) -> Decision:
        return Decision(
            True, message=f"{document.arguments!r} {document.context.json!r}", cache_ttl=30
        )

    decide = Decide(answer)
    authorizer = caching(decide, cache, revision=lambda: str(revision[0]))
    evaluated: dict[tuple[int, int], tuple[float, int, int]] = {}
    invalidations = 0

    async def scenario() -> None:
        nonlocal invalidations
        for operation in operations:
            if operation[0] == "call":
                _, argument, caller = operation
                arguments = json.dumps({"query": f"q{argument}"})
                with caller_context(subject=f"caller-{caller}"):
                    before = decide.count
                    decision = await authorizer.authorize(authorization(arguments))
                    expected = answer(decide.documents[-1]).message
                key = (argument, caller)
                if decide.count > before:
                    assert not decision.cached
                    evaluated[key] = (clock(), revision[0], invalidations)
                else:
                    started, at_revision, at_invalidations = evaluated[key]
                    assert decision.cached
                    assert clock() < started + 3
                    assert (at_revision, at_invalidations) == (revision[0], invalidations)
                    assert decision.message is not None
                    assert f"q{argument}" in decision.message
                    assert f"caller-{caller}" in decision.message
                if not decision.cached:
                    assert decision.message == expected
            elif operation[0] == "advance":
                clock.advance(operation[1])
            elif operation[0] == "invalidate":
                cache.invalidate()
                invalidations += 1
            else:
                revision[0] += 1
        # Last: counting the entries drops the expired ones, which the calls must not need.
        assert cache.stats().size <= maxsize

    asyncio.run(scenario())


def test_a_hit_marks_its_entry_so_that_the_next_eviction_spares_it_once() -> None:
    cache = DecisionCache(clock=FakeClock(), maxsize=2)
    keys = [("e", "p", "r", name) for name in "abcd"]
    for key in keys[:2]:
        cache.put(key, ALLOW_30S, started=cache.clock(), generation=cache.generation)
    assert cache.get(keys[0]) is not None  # "a" used: "b" is the one to go

    cache.put(keys[2], ALLOW_30S, started=cache.clock(), generation=cache.generation)
    cache.put(keys[3], ALLOW_30S, started=cache.clock(), generation=cache.generation)

    # "a" was spared once (then unmarked), so the fourth store evicted it before "c".
    assert [cache.get(key) is not None for key in keys] == [False, False, True, True]
    assert cache.stats().evictions == 2
