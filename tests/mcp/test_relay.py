"""Which client request an upstream's message is relayed to: never another client's.

The rules of :mod:`gateway.mcp._relay`, on an :class:`Upstream` without a session: a message
that names no request goes to the client request in flight only when it is the only one; in
a request's own task, to that request only if it is in flight on this upstream.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import mcp_types as types
from hypothesis import given
from hypothesis import strategies as st

from gateway.mcp._relay import DOWNSTREAM, LEVELS, InputRequest, at_least
from gateway.mcp._upstream import Upstream
from gateway.service import McpUpstreamConfig


class _Downstream:
    """A client request that records what reaches it."""

    def __init__(self, name: str, log_level: types.LoggingLevel | None = "debug") -> None:
        self.name = name
        self.log_level = log_level
        self.wants_progress = True
        self.received: list[Any] = []

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.received.append(("progress", progress))

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.received.append(("log", params.level))

    async def ask(self, request: InputRequest) -> Any:
        self.received.append(("ask", request.method))
        return types.ListRootsResult(roots=[])


def _upstream() -> Upstream:
    return Upstream(McpUpstreamConfig(name="files", command="true"))


def _serve(upstream: Upstream, downstreams: list[_Downstream]) -> None:
    for index, downstream in enumerate(downstreams):
        upstream._in_flight[index] = downstream


def _log(level: types.LoggingLevel = "error") -> types.LoggingMessageNotificationParams:
    return types.LoggingMessageNotificationParams(level=level, data="x")


@given(
    count=st.integers(min_value=0, max_value=4),
    current=st.one_of(st.none(), st.integers(min_value=0, max_value=5)),
)
def test_a_message_goes_to_the_one_request_it_belongs_to_or_to_none(
    count: int, current: int | None
) -> None:
    upstream = _upstream()
    downstreams = [_Downstream(f"d{index}") for index in range(count)]
    stranger = _Downstream("stranger")
    _serve(upstream, downstreams)
    chosen: _Downstream | None
    if current is None:
        chosen = None
    elif current < count:
        chosen = downstreams[current]
    else:
        chosen = stranger  # a request of this task that is not in flight on this upstream

    def target() -> Any:
        DOWNSTREAM.set(chosen)
        return upstream._target()

    got = contextvars.Context().run(target)
    if chosen is not None:
        # In a request's own task: that request, and only if this upstream serves it.
        assert got is (chosen if chosen is not stranger else None)
    else:
        # On the session's receive path: only an unambiguous request.
        assert got is (downstreams[0] if count == 1 else None)


async def test_with_two_requests_in_flight_a_log_message_reaches_neither() -> None:
    upstream = _upstream()
    first, second = _Downstream("a"), _Downstream("b")
    _serve(upstream, [first, second])

    await asyncio.get_running_loop().create_task(
        upstream._on_log(_log()),
        context=contextvars.Context(),
    )

    assert first.received == []
    assert second.received == []


async def test_with_two_requests_in_flight_a_request_to_the_client_is_refused() -> None:
    upstream = _upstream()
    first, second = _Downstream("a"), _Downstream("b")
    _serve(upstream, [first, second])

    answer = await asyncio.get_running_loop().create_task(
        upstream._on_roots(None),  # type: ignore[arg-type]
        context=contextvars.Context(),
    )

    assert isinstance(answer, types.ErrorData)
    assert answer.code == types.INVALID_REQUEST
    assert first.received == []
    assert second.received == []


async def test_with_no_request_in_flight_nothing_is_relayed() -> None:
    upstream = _upstream()

    answer = await upstream._on_roots(None)  # type: ignore[arg-type]
    await upstream._on_log(_log())

    assert isinstance(answer, types.ErrorData)


async def test_the_only_request_in_flight_gets_log_messages_at_or_above_its_level() -> None:
    upstream = _upstream()
    only = _Downstream("a", log_level="warning")
    _serve(upstream, [only])

    for level in LEVELS:
        await upstream._on_log(_log(level))

    assert only.received == [("log", level) for level in LEVELS[LEVELS.index("warning") :]]


async def test_a_request_that_asked_for_no_log_messages_gets_none() -> None:
    upstream = _upstream()
    only = _Downstream("a", log_level=None)
    _serve(upstream, [only])

    await upstream._on_log(_log("emergency"))

    assert only.received == []


@given(level=st.sampled_from([*LEVELS, "loud", ""]), threshold=st.sampled_from([*LEVELS, None]))
def test_a_level_passes_a_threshold_exactly_when_it_is_as_severe(
    level: str, threshold: str | None
) -> None:
    expected = (
        threshold is not None and level in LEVELS and LEVELS.index(level) >= LEVELS.index(threshold)
    )
    assert at_least(level, threshold) is expected
