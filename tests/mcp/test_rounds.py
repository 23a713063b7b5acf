"""Multi round-trip requests (2026-07-28): an upstream's requests to its client, bridged.

A 2026-07-28 client cannot be sent a request; the gateway answers its request with an
``InputRequiredResult`` carrying the upstream's request, and the client's retry (the same
request, with ``inputResponses`` and the ``requestState`` echoed) answers the upstream. A
``requestState`` is honoured only on a retry of the same call by the same principal, once,
in time; everything else fails closed with -32602, and the waiting call is untouched.

End to end: the service under uvicorn, the SDK client driving the rounds itself
(``allow_input_required``) so that each retry can be varied, and the test upstream as a
stdio subprocess of either revision. The bounds (rounds, time, waiting calls) are held by
:class:`InputRounds` itself, with an injected clock.
"""

from __future__ import annotations

import asyncio
import json
import math
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError

from gateway import _json
from gateway.mcp._bridge import (
    MAX_INPUT_ROUNDS,
    MAX_WAITING_PER_PRINCIPAL,
    InputRounds,
    _RoundRelay,
)
from gateway.mcp._relay import DOWNSTREAM
from tests.helpers import json_values, serialized
from tests.mcp.conftest import ConfigWriter, audit_records
from tests.mcp.test_bridge import _elicitation, _roots, _sampling, _text, connect, served

ERAS = pytest.mark.parametrize("era", ["", "legacy"], ids=["upstream-2026", "upstream-2025"])
ANSWER = types.CreateMessageResult(
    role="assistant", content=types.TextContent(text="hi from the model"), model="test-model"
)


async def _refused(client: Client, name: str, arguments: dict[str, Any], **retry: Any) -> int:
    with pytest.raises(MCPError) as refused:
        await client.session.call_tool(name, arguments, allow_input_required=True, **retry)
    assert refused.value.message == "Invalid or expired requestState" or "inputResponses" in (
        refused.value.message
    )
    return refused.value.code


@ERAS
async def test_a_request_state_is_honoured_only_on_a_retry_of_its_own_call_once(
    write_config: ConfigWriter, relay: None, allow_all: Path, audit_path: Path, era: str
) -> None:
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    callbacks: dict[str, Any] = {
        "mode": "2026-07-28",
        "sampling_callback": _sampling,
        "elicitation_callback": _elicitation,
        "list_roots_callback": _roots,
    }
    async with (
        served(config) as url,
        connect(url, **callbacks) as alice,
        connect(url, key="bob-key", **callbacks) as bob,
    ):
        first = await alice.session.call_tool("ask_llm", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.request_state is not None
        assert first.input_requests is not None
        [(key, asked)] = first.input_requests.items()
        assert asked.method == "sampling/createMessage"
        state = first.request_state
        good = {"request_state": state, "input_responses": {key: ANSWER}}

        # Another principal, another tool, other arguments, a state never issued, a wrong
        # answer's shape: refused, and the waiting call is left as it was.
        codes = [
            await _refused(bob, "ask_llm", {}, **good),
            await _refused(alice, "confirm", {}, **good),
            await _refused(alice, "ask_llm", {"more": 1}, **good),
            await _refused(alice, "ask_llm", {}, request_state=state + "x"),
            await _refused(alice, "ask_llm", {}, request_state=""),
            await _refused(
                alice,
                "ask_llm",
                {},
                request_state=state,
                input_responses={key: types.ElicitResult(action="accept")},
            ),
        ]
        assert set(codes) == {types.INVALID_PARAMS}

        # A retry without the answer is asked again, under a new state; the old one is spent.
        again = await alice.session.call_tool(
            "ask_llm", {}, request_state=state, allow_input_required=True
        )
        assert isinstance(again, types.InputRequiredResult)
        assert again.input_requests is not None
        assert list(again.input_requests) == [key]
        assert again.request_state not in (None, state)
        assert await _refused(alice, "ask_llm", {}, **good) == types.INVALID_PARAMS

        done = await alice.session.call_tool(
            "ask_llm",
            {},
            request_state=again.request_state,
            input_responses={key: ANSWER},
            allow_input_required=True,
        )
        assert isinstance(done, types.CallToolResult)
        assert not done.is_error, _text(done)
        answered = json.loads(_text(done).removeprefix("ask_llm answered: "))
        assert answered["content"] == {"type": "text", "text": "hi from the model"}
        # Used once: the last state is spent too.
        retry = {"request_state": again.request_state, "input_responses": {key: ANSWER}}
        assert await _refused(alice, "ask_llm", {}, **retry) == types.INVALID_PARAMS

    # One call, decided and audited once, whatever the number of rounds.
    decisions = [r["tool"] for r in audit_records(audit_path) if r["type"] == "decision"]
    assert decisions == ["ask_llm"]


@ERAS
async def test_a_resource_read_that_asks_the_client_is_bridged_in_rounds_too(
    write_config: ConfigWriter, relay: None, allow_all: Path, era: str
) -> None:
    config = write_config(
        stdio_context=None, era=era, policies=allow_all, decision_path="relay/decision"
    )
    async with (
        served(config) as url,
        connect(url, mode="2026-07-28", list_roots_callback=_roots) as client,
    ):
        read = await client.read_resource("file:///srv/tenants/acme/asking.txt")
    [contents] = read.contents
    assert isinstance(contents, types.TextResourceContents)
    assert json.loads(contents.text)["roots"] == [
        {"uri": "file:///srv/tenants/acme/", "name": "acme"}
    ]


async def test_a_2026_client_that_did_not_offer_sampling_is_not_asked_and_the_upstream_is_refused(
    write_config: ConfigWriter, relay: None, allow_all: Path
) -> None:
    config = write_config(
        stdio_context=None, era="legacy", policies=allow_all, decision_path="relay/decision"
    )
    async with served(config) as url, connect(url, mode="2026-07-28") as client:
        result = await client.session.call_tool("ask_llm", {}, allow_input_required=True)
    assert isinstance(result, types.CallToolResult)
    assert _text(result) == f"ask_llm refused: {types.METHOD_NOT_FOUND}"


# -- the bounds, held by InputRounds itself ------------------------------------------------


class _Session:
    """What a round's relay reads of the SDK's session: the capabilities of the request."""

    client_capabilities = types.ClientCapabilities(sampling=types.SamplingCapability())

    def check_client_capability(self, capability: types.ClientCapabilities) -> bool:
        return capability.sampling is not None

    async def report_progress(self, *args: Any) -> None:
        return None


def _ctx(principal: str = "pipe") -> Any:
    # A request of a stdio front (no HTTP request): the principal is the front's one client.
    request = None if principal == "pipe" else SimpleNamespace(scope={}, headers={})
    if request is not None:
        from gateway.service import PRINCIPAL_SCOPE_KEY

        request.scope[PRINCIPAL_SCOPE_KEY] = principal
    return SimpleNamespace(
        method="tools/call",
        request=request,
        protocol_version="2026-07-28",
        meta={},
        session=_Session(),
        request_id=1,
    )


_ASK = types.CreateMessageRequest(
    params=types.CreateMessageRequestParams(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(text="hi"))],
        max_tokens=10,
    )
)


async def _asking(times: int, answers: list[Any]) -> str:
    """A call that asks its client ``times`` times (as an upstream would), then completes."""
    downstream = DOWNSTREAM.get()
    assert downstream is not None
    try:
        for _ in range(times):
            answers.append(await downstream.ask(_ASK))
    except asyncio.CancelledError:
        answers.append("cancelled")
        raise
    return "done"


async def _start(rounds: InputRounds, ctx: Any, times: int, answers: list[Any]) -> Any:
    return await rounds.run(
        ctx,
        _RoundRelay(ctx, None),
        lambda: _asking(times, answers),
        lambda: InputRounds.binding(ctx, "ask", b"{}"),
    )


async def _answer(rounds: InputRounds, ctx: Any, result: Any) -> Any:
    assert isinstance(result, types.InputRequiredResult)
    assert result.input_requests is not None
    assert result.request_state is not None
    binding = InputRounds.binding(ctx, "ask", b"{}")
    responses = dict.fromkeys(result.input_requests, ANSWER)
    return await rounds.resume(ctx, binding, result.request_state, responses)


async def test_a_call_not_retried_in_time_is_cancelled_and_its_state_refused() -> None:
    now = [0.0]
    rounds = InputRounds(clock=lambda: now[0], timeout_s=60.0)
    ctx = _ctx()
    answers: list[Any] = []
    first = await _start(rounds, ctx, 1, answers)
    assert rounds.waiting == 1
    now[0] = 60.0
    with pytest.raises(MCPError) as refused:
        await _answer(rounds, ctx, first)
    assert refused.value.code == types.INVALID_PARAMS
    assert rounds.waiting == 0
    for _ in range(3):
        await asyncio.sleep(0)  # let the cancelled call unwind (no time passes)
    assert answers == ["cancelled"]


async def test_a_request_gets_at_most_the_bounded_rounds_then_the_upstream_is_refused() -> None:
    rounds, ctx = InputRounds(), _ctx()
    answers: list[Any] = []
    result = await _start(rounds, ctx, MAX_INPUT_ROUNDS + 3, answers)
    for _ in range(MAX_INPUT_ROUNDS - 1):
        result = await _answer(rounds, ctx, result)
    # The last round answered, the rest of the call's requests are refused to the upstream.
    assert await _answer(rounds, ctx, result) == "done"
    assert answers[:MAX_INPUT_ROUNDS] == [ANSWER] * MAX_INPUT_ROUNDS
    assert {answer.code for answer in answers[MAX_INPUT_ROUNDS:]} == {types.INVALID_REQUEST}
    assert rounds.waiting == 0


async def test_the_calls_waiting_for_one_principal_are_bounded_and_others_are_not_held() -> None:
    rounds = InputRounds()
    alice, bob = _ctx("alice"), _ctx("bob")
    held = [await _start(rounds, alice, 1, []) for _ in range(MAX_WAITING_PER_PRINCIPAL)]
    assert all(isinstance(result, types.InputRequiredResult) for result in held)
    answers: list[Any] = []
    # One more of alice's calls does not wait: its upstream is refused and it completes.
    assert await _start(rounds, alice, 1, answers) == "done"
    assert answers[0].code == types.INVALID_REQUEST
    assert isinstance(await _start(rounds, bob, 1, []), types.InputRequiredResult)
    rounds.close()
    assert rounds.waiting == 0


@settings(max_examples=60, deadline=None)
@given(
    state=st.text(max_size=80),
    responses=st.dictionaries(
        st.text(max_size=20),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=8), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=3,
    ),
    real_state=st.booleans(),
)
def test_any_state_or_answers_a_client_makes_up_are_refused_and_the_call_waits_on(
    state: str, responses: dict[str, Any], real_state: bool
) -> None:
    async def scenario() -> None:
        rounds, ctx = InputRounds(), _ctx()
        first = await _start(rounds, ctx, 1, [])
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None
        assert first.request_state is not None
        binding = InputRounds.binding(ctx, "ask", b"{}")
        sent, answers = state, dict(responses)
        if real_state:
            # The real state with made-up answers under the real key.
            sent = first.request_state
            answers = {key: next(iter(responses.values()), None) for key in first.input_requests}
        with pytest.raises(MCPError) as refused:
            await rounds.resume(ctx, binding, sent, answers)
        assert refused.value.code == types.INVALID_PARAMS
        assert rounds.waiting == 1
        assert await _answer(rounds, ctx, first) == "done"

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("original", "retry"),
    [
        (b'{"amount": 1.0}', b'{"amount": 1.00}'),
        (b'{"amount": 0.1}', b'{"amount": 0.1000000000000000055511151231257827}'),
        (b'{"n": 9007199254740993}', b'{"n": 9007199254740992.0}'),
        (b'{"to": "bob"}', b'{"to": "eve", "to": "bob"}'),
    ],
)
def test_a_retry_binds_only_to_arguments_that_are_exactly_the_originals(
    original: bytes, retry: bytes
) -> None:
    # As admission reads them: exact numbers, duplicate member names never equal.
    ctx = _ctx()

    assert InputRounds.binding(ctx, "ask", original) != InputRounds.binding(ctx, "ask", retry)


def test_a_retry_binds_to_the_same_arguments_in_another_order_and_spacing() -> None:
    ctx = _ctx()

    assert InputRounds.binding(ctx, "ask", b'{"a": 1, "b": [2.50]}') == InputRounds.binding(
        ctx, "ask", b'{ "b" : [2.50],"a":1 }'
    )


def _exact(raw: bytes) -> bytes:
    try:
        return _json.canonical(_json.parse(raw))
    except _json.StrictJSONError:
        return raw


def _twin(value: object, rounded: bool) -> object:
    # The same value with every non-integer number spelled otherwise: with one more
    # trailing zero, or as the float it rounds to (a lenient decoder's reading of it).
    if isinstance(value, Decimal):
        if rounded and math.isfinite(float(value)):
            return Decimal(repr(float(value)))
        spelled = f"{value:f}"
        return Decimal(spelled + "0" if "." in spelled else spelled + ".0")
    if isinstance(value, list):
        return [_twin(item, rounded) for item in value]
    if isinstance(value, dict):
        return {name: _twin(item, rounded) for name, item in value.items()}
    return value


@settings(max_examples=300)
@given(st.data(), json_values(), json_values())
def test_a_retry_binds_exactly_when_admission_reads_the_same_arguments(
    data: st.DataObject, first: object, second: object
) -> None:
    # Any two documents, each sent in any member order, spacing and escaping, and either
    # the same value twice or two values: bound together exactly when their strict
    # decodings are equal.
    ctx = _ctx()
    other = data.draw(
        st.sampled_from([first, second, _twin(first, rounded=False), _twin(first, rounded=True)])
    )
    try:
        original = data.draw(serialized({"v": first})).encode("utf-8")
        retry = data.draw(serialized({"v": other})).encode("utf-8")
    except UnicodeError:  # a lone surrogate: no bytes to send
        return

    same = InputRounds.binding(ctx, "ask", original) == InputRounds.binding(ctx, "ask", retry)

    assert same == (_exact(original) == _exact(retry))
