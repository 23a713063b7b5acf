"""A number reaches the tool as the policy saw it, or the call is refused at admission.

The policy compares numbers exactly (OPA's arbitrary precision); every tool reads them as
doubles: a function tool's ``float``, ``Decimal`` and ``Any`` parameters through pydantic,
an upstream MCP server through ``json.loads`` and its own parser. A number a double does
not hold as written (``1e-400`` read as 0, ``99.99999999999999999999`` as 100, ``1e400``
as no number at all) once let a call past a bound it did not meet (found by a security
review). Admission now refuses them, on every path; integers are exact in Python and
forwarded as written, and a function tool refuses one beyond 2**53 that would reach a
``float`` parameter as another number.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Final

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway import Guard, InvalidInvocationError, ToolCall, bind, function_tool
from gateway._json import BEYOND_DOUBLE, is_double_exact, parse
from gateway.testing import RecordingTool, StaticAuthorizer

#: Numbers no double holds as written, each as it was sent.
BEYOND: Final = (
    "1e400",
    "-1E+400",
    "1e-400",
    "2.5e-324",
    "99.99999999999999999999",
    "12345678901234567890.123456789",
    "0.1000000000000000055511151231257827",
    "1E+999999999999999999",
)
#: Numbers a double holds as written (the integers are exact anyway).
HELD: Final = ("0.1", "1.10", "1e2", "-0.0", "5e-324", "1.7976931348623157e308", "2.0")

_ANY = RecordingTool("any")


def _prepare(number: str, tool: Any = _ANY) -> Any:
    return bind(tool).prepare(ToolCall("1", tool.definition().name, f'{{"n": {number}}}'))


@pytest.mark.parametrize("number", BEYOND)
def test_a_number_no_double_holds_as_written_is_refused_without_being_quoted(
    number: str,
) -> None:
    with pytest.raises(InvalidInvocationError) as refused:
        _prepare(number)
    assert BEYOND_DOUBLE in str(refused.value)
    assert number not in str(refused.value)


@pytest.mark.parametrize("number", [*HELD, "123456789012345678901234567890"])
def test_a_number_a_double_holds_and_any_integer_are_admitted(number: str) -> None:
    assert _prepare(number).arguments == f'{{"n": {number}}}'.encode()


@function_tool
async def refund(amount: float) -> str:
    """Refund an amount (a float parameter)."""
    return repr(amount)


@function_tool
async def refund_exact(amount: Decimal) -> str:
    """Refund an exact amount (a Decimal parameter)."""
    return str(amount)


@pytest.mark.parametrize("tool", [refund, refund_exact], ids=["float", "decimal"])
@pytest.mark.parametrize("number", ["99.99999999999999999999", "1e-400"])
async def test_a_function_tool_never_runs_on_a_number_other_than_the_one_decided(
    tool: Any, number: str
) -> None:
    # The review's case: a policy allowing 0 < amount < 100 was shown these exact values
    # while the tool ran with 100 and 0.
    guarded = bind(Guard(tool=tool, authorizer=StaticAuthorizer(True)))
    with pytest.raises(InvalidInvocationError):
        guarded.prepare(ToolCall("1", tool.definition().name, f'{{"amount": {number}}}'))


_NUMBERS = st.decimals(allow_nan=False, allow_infinity=False) | st.floats(
    allow_nan=False, allow_infinity=False
).map(lambda value: Decimal(repr(value)))


@given(number=_NUMBERS)
@example(number=Decimal("99.99999999999999999999"))
@example(number=Decimal("1E-400"))
@example(number=Decimal("9007199254740993"))
async def test_property_an_admitted_number_is_the_double_every_tool_reads(
    number: Decimal,
) -> None:
    text = str(number)
    try:
        invocation = _prepare(text)
    except InvalidInvocationError:
        assert not is_double_exact(number)
        return
    exact = parse(invocation.arguments)["n"]
    # As an upstream MCP tool gets it (json.loads, then the SDK's encoding): an integer
    # exactly as sent, any other number as the double whose shortest form it is ...
    assert _as_read(json.loads(invocation.arguments)["n"], exact)
    # ... and as a function tool's float parameter gets it, or the call is refused.
    guarded = bind(Guard(tool=refund, authorizer=StaticAuthorizer(True)))
    try:
        prepared = guarded.prepare(ToolCall("1", "refund", f'{{"amount": {text}}}'))
    except InvalidInvocationError:
        assert isinstance(exact, int)
        assert float(exact) != exact
        return
    shown = (await guarded.call(prepared)).text()
    assert shown is not None
    assert _as_read(float(shown), exact)


def _as_read(read: float | int, exact: int | Decimal) -> bool:
    # An integer is read exactly (Python compares an int and a float by value); a number
    # with a fraction or an exponent is read as the double it is the shortest form of.
    return read == exact if isinstance(exact, int) else Decimal(repr(float(read))) == exact


@function_tool
async def transfer(account: int, amount: float, tags: list[int]) -> str:
    """Move an amount (an int, a float and a list of ints)."""
    return f"{account} {amount!r} {tags}"


BIG: Final = 2**53 + 1  # 9007199254740993: no double holds it


@pytest.mark.parametrize(
    ("arguments", "admitted"),
    [
        pytest.param({"account": BIG, "amount": 1.5, "tags": [BIG]}, True, id="ints_stay_ints"),
        pytest.param({"account": 1, "amount": BIG, "tags": []}, False, id="float_parameter"),
        pytest.param({"account": 1, "amount": 2**60, "tags": []}, True, id="a_double_holds_it"),
        pytest.param({"account": -BIG, "amount": 0.5, "tags": []}, True, id="negative_int"),
        pytest.param({"account": 1, "amount": -BIG, "tags": []}, False, id="negative_float"),
    ],
)
def test_an_integer_reaches_a_function_tool_as_sent_or_the_call_is_refused(
    arguments: dict[str, Any], admitted: bool
) -> None:
    call = ToolCall("1", "transfer", json.dumps(arguments))
    if admitted:
        assert bind(transfer).prepare(call).arguments == json.dumps(arguments).encode()
    else:
        with pytest.raises(InvalidInvocationError) as refused:
            bind(transfer).prepare(call)
        assert str(BIG) not in str(refused.value)


async def test_an_integer_a_function_tool_runs_on_is_the_integer_sent() -> None:
    arguments = {"account": BIG, "amount": 0.25, "tags": [BIG, 1]}
    guarded = bind(Guard(tool=transfer, authorizer=StaticAuthorizer(True)))
    output = await guarded.call(guarded.prepare(ToolCall("1", "transfer", json.dumps(arguments))))
    assert output.text() == f"{BIG} 0.25 [{BIG}, 1]"


@pytest.mark.parametrize("text", ["5", " 5 ", "5_0", "\u0661\u0660\u0660", "1e400"])
def test_a_decimal_parameter_takes_a_json_number_never_a_string(text: str) -> None:
    # pydantic reads these strings as numbers: the policy would be shown a string while
    # the function ran on a number.
    assert refund_exact.definition().input_schema["properties"]["amount"]["type"] == "number"
    call = ToolCall("1", "refund_exact", json.dumps({"amount": text}))
    with pytest.raises(InvalidInvocationError) as refused:
        bind(refund_exact).prepare(call)
    assert text not in str(refused.value)
    assert bind(refund_exact).prepare(ToolCall("1", "refund_exact", '{"amount": 5}'))
