"""Authorization, Decision, AuthorizerFunc and AuthorizationError (seed §7, cases 44 and 48)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import (
    Authorization,
    AuthorizationError,
    Authorizer,
    AuthorizerFunc,
    Decision,
    Failure,
    FailureKind,
    GatewayError,
    InvalidToolError,
    MalformedDecisionError,
    NoDecisionError,
    ToolDefinition,
)
from gateway._authorization import read_answer
from gateway.audit import AuditWriteError
from gateway.policy import (
    CoalescedEvaluationError,
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    InvalidContextError,
    PolicyError,
    UndefinedDecisionError,
)
from gateway.policy import MalformedDecisionError as PolicyMalformedDecisionError

SEARCH = ToolDefinition(
    "search",
    {
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 2}},
        "required": ["query"],
        "additionalProperties": False,
    },
)


def search_authorization(arguments: bytes = b'{"query":"scope"}') -> Authorization:
    return Authorization(SEARCH, arguments)


# --- Authorization -------------------------------------------------------------------------


def test_authorization_exposes_only_the_definition_and_the_argument_bytes() -> None:
    actual = [field.name for field in dataclasses.fields(Authorization)]

    assert actual == ["definition", "arguments"]


def test_authorization_is_frozen() -> None:
    authorization = search_authorization()

    with pytest.raises(dataclasses.FrozenInstanceError):
        authorization.arguments = b"{}"  # type: ignore[misc]


@given(arguments=st.binary(max_size=64), other=st.binary(max_size=64))
def test_authorization_is_a_value_of_its_two_fields(arguments: bytes, other: bytes) -> None:
    # Made through its slots (its own __init__), it still behaves as the frozen dataclass.
    positional = Authorization(SEARCH, arguments)
    keyword = Authorization(definition=SEARCH, arguments=arguments)

    assert positional == keyword
    assert hash(positional) == hash(keyword)
    assert (positional.definition, positional.arguments) == (SEARCH, arguments)
    assert dataclasses.replace(positional, arguments=other) == Authorization(SEARCH, other)
    assert (positional == Authorization(SEARCH, other)) == (arguments == other)
    assert repr(positional) == f"Authorization(definition={SEARCH!r}, arguments={arguments!r})"
    assert not hasattr(positional, "__dict__")


def test_authorization_refuses_missing_and_unknown_fields() -> None:
    with pytest.raises(TypeError):
        Authorization(SEARCH)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Authorization(SEARCH, b"{}", extra=1)  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del search_authorization().definition


def test_authorization_definition_schema_copies_are_detached_from_the_definition() -> None:
    authorization = search_authorization()

    authorization.definition.input_schema["type"] = "array"

    assert authorization.definition.input_schema["type"] == "object"


# --- Decision ------------------------------------------------------------------------------


def test_decision_defaults_carry_no_message_reasons_ttl_or_provenance() -> None:
    actual = Decision(True)

    assert actual == Decision(
        allowed=True,
        message=None,
        reasons=(),
        decision_id=None,
        revision=None,
        cache_ttl=None,
        cached=False,
        engine=None,
    )


def test_decision_is_frozen() -> None:
    decision = Decision(False)

    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.allowed = True  # type: ignore[misc]


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param(Decision(True), id="allow"),
        pytest.param(Decision(False), id="deny"),
        pytest.param(
            Decision(
                False,
                message="public text",
                reasons=("audit", "only"),
                decision_id="d-1",
                revision="r-1",
                cache_ttl=30,
                cached=True,
                engine="opa",
            ),
            id="every-field",
        ),
        pytest.param(Decision(True, cache_ttl=0), id="ttl-zero"),
        pytest.param(Decision(True, cache_ttl=2.5), id="ttl-float"),
    ],
)
def test_decision_with_documented_field_types_is_well_formed(decision: Decision) -> None:
    assert decision.well_formed() is True


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param(Decision(allowed=1), id="allowed-1"),  # type: ignore[arg-type]
        pytest.param(Decision(allowed=0), id="allowed-0"),  # type: ignore[arg-type]
        pytest.param(Decision(allowed="true"), id="allowed-str"),  # type: ignore[arg-type]
        pytest.param(Decision(allowed=None), id="allowed-none"),  # type: ignore[arg-type]
        pytest.param(Decision(True, message=5), id="message-int"),  # type: ignore[arg-type]
        pytest.param(Decision(True, reasons=["x"]), id="reasons-list"),  # type: ignore[arg-type]
        pytest.param(Decision(True, reasons=(1,)), id="reason-int"),  # type: ignore[arg-type]
        pytest.param(Decision(True, decision_id=1), id="decision-id-int"),  # type: ignore[arg-type]
        pytest.param(Decision(True, revision=b"r"), id="revision-bytes"),  # type: ignore[arg-type]
        pytest.param(Decision(True, cache_ttl=-1), id="ttl-negative"),
        pytest.param(Decision(True, cache_ttl=True), id="ttl-bool"),
        pytest.param(Decision(True, cache_ttl=float("nan")), id="ttl-nan"),
        pytest.param(Decision(True, cache_ttl="30"), id="ttl-str"),  # type: ignore[arg-type]
        pytest.param(Decision(True, cached=1), id="cached-int"),  # type: ignore[arg-type]
        pytest.param(Decision(True, engine=1), id="engine-int"),  # type: ignore[arg-type]
    ],
)
def test_decision_with_any_wrongly_typed_field_is_not_well_formed(decision: Decision) -> None:
    assert decision.well_formed() is False


# --- AuthorizerFunc ------------------------------------------------------------------------


def sync_allow(authorization: Authorization) -> bool:
    return authorization.definition.name == "search"


async def async_allow(authorization: Authorization) -> bool:
    return authorization.definition.name == "search"


async def async_decision(authorization: Authorization) -> Decision:
    return Decision(False, message=authorization.arguments.decode())


def sync_returning_awaitable(authorization: Authorization) -> Awaitable[bool]:
    return async_allow(authorization)


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        pytest.param(sync_allow, True, id="sync"),
        pytest.param(async_allow, True, id="async"),
        pytest.param(sync_returning_awaitable, True, id="sync-returning-awaitable"),
        pytest.param(
            async_decision, Decision(False, message='{"query":"scope"}'), id="async-decision"
        ),
        pytest.param(lambda _authorization: False, False, id="lambda"),
    ],
)
async def test_authorizer_func_adapts_sync_and_async_functions(
    fn: Callable[[Authorization], bool | Decision | Awaitable[bool | Decision]],
    expected: bool | Decision,
) -> None:
    actual = await AuthorizerFunc(fn).authorize(search_authorization())

    assert actual == expected


def test_authorizer_func_satisfies_the_authorizer_protocol() -> None:
    assert isinstance(AuthorizerFunc(sync_allow), Authorizer)


@pytest.mark.parametrize(
    "fn",
    [pytest.param(None, id="none"), pytest.param("allow", id="str"), pytest.param(1, id="int")],
)
def test_authorizer_func_refuses_what_is_not_callable(fn: object) -> None:
    with pytest.raises(InvalidToolError, match="authorizer is nil"):
        AuthorizerFunc(fn)  # type: ignore[arg-type]


async def test_authorizer_func_lets_the_functions_own_exception_through_unchanged() -> None:
    raised = ValueError("private policy detail")

    def fail(_authorization: Authorization) -> bool:
        raise raised

    with pytest.raises(ValueError, match="private policy detail") as caught:
        await AuthorizerFunc(fail).authorize(search_authorization())

    assert caught.value is raised


async def test_authorizer_func_passes_the_authorization_through_identically() -> None:
    seen: list[Authorization] = []
    authorization = search_authorization()

    def record(given: Authorization) -> bool:
        seen.append(given)
        return True

    await AuthorizerFunc(record).authorize(authorization)

    assert seen == [authorization]
    assert seen[0] is authorization


# --- AuthorizationError --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("search", 'tool: authorization for "search" failed', id="named"),
        pytest.param("", "tool: authorization failed", id="empty-name"),
    ],
)
def test_authorization_error_message_names_only_the_tool(name: str, expected: str) -> None:
    error = AuthorizationError(name, ValueError("private policy detail"))

    assert str(error) == expected
    assert error.tool_name == name


def test_authorization_error_without_cause_has_cause_none_and_the_generic_message() -> None:
    error = AuthorizationError("", None)

    assert (str(error), error.cause, error.code) == (
        "tool: authorization failed",
        None,
        "no_decision",
    )


def test_authorization_error_cause_is_the_identical_object() -> None:
    cause = TimeoutError("private deadline")

    error = AuthorizationError("search", cause)

    assert error.cause is cause


def test_authorization_error_keeps_the_cause_out_of_chaining_message_repr_and_args() -> None:
    error = AuthorizationError("search", ValueError("private policy detail"))

    assert error.__cause__ is None
    assert error.__context__ is None
    assert "private" not in str(error)
    assert "private" not in repr(error)
    assert "private" not in repr(error.args)


def test_authorization_error_is_a_gateway_error_and_not_the_causes_type() -> None:
    error = AuthorizationError("search", TimeoutError())

    assert isinstance(error, GatewayError)
    assert not isinstance(error, TimeoutError)


class AuditLikeError(NoDecisionError):
    """An error of a layer above the core (like the audit trail's), with its own code."""

    code = "audit_failed"


class UnmarkedLayerError(GatewayError):
    """An error of a layer above the core that does not say it is about a decision."""

    code = "some_other_layer"


class DependencyFailure(Failure):
    """A Failure subclass defined outside the core: still a tool's outcome."""


def failure_cause() -> Failure:
    return Failure(FailureKind.REJECTED, "private dependency output", cause=ValueError("private"))


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        pytest.param(EngineTimeoutError("private"), "engine_timeout", id="engine-timeout"),
        pytest.param(EngineUnavailableError("private"), "engine_unavailable", id="unavailable"),
        pytest.param(EngineError("private"), "engine_error", id="engine-error"),
        pytest.param(UndefinedDecisionError("private"), "undefined_decision", id="undefined"),
        pytest.param(
            PolicyMalformedDecisionError("private"), "malformed_decision", id="policy-malformed"
        ),
        pytest.param(MalformedDecisionError("private"), "malformed_decision", id="core-malformed"),
        pytest.param(CoalescedEvaluationError("private"), "engine_unavailable", id="coalesced"),
        pytest.param(PolicyError("private"), "policy_error", id="policy-error"),
        pytest.param(AuditLikeError("private"), "audit_failed", id="other-layer"),
        pytest.param(AuditWriteError("private"), "audit_failed", id="audit-write"),
        pytest.param(InvalidContextError("private"), "invalid_context", id="invalid-context"),
        pytest.param(NoDecisionError("private"), "no_decision", id="the-marker-itself"),
        pytest.param(UnmarkedLayerError("private"), "no_decision", id="unmarked-other-layer"),
        pytest.param(ValueError("private"), "no_decision", id="value-error"),
        pytest.param(TimeoutError("private"), "no_decision", id="timeout-error"),
        pytest.param(failure_cause(), "no_decision", id="failure"),
        pytest.param(
            DependencyFailure(FailureKind.REJECTED, "private"),
            "no_decision",
            id="failure-subclass",
        ),
        pytest.param(InvalidToolError("private"), "no_decision", id="invalid-tool"),
        pytest.param(
            AuthorizationError("inner", EngineTimeoutError("private")),
            "no_decision",
            id="nested-authorization-error",
        ),
        pytest.param(None, "no_decision", id="none"),
    ],
)
def test_authorization_error_code_is_a_no_decision_errors_code_else_no_decision(
    cause: BaseException | None, expected: str
) -> None:
    actual = AuthorizationError("search", cause).code

    assert actual == expected


def test_authorization_error_instance_code_does_not_change_the_class_code() -> None:
    AuthorizationError("search", EngineTimeoutError("private"))

    assert AuthorizationError.code == "no_decision"


def test_malformed_decision_error_has_its_stable_code() -> None:
    error = MalformedDecisionError("authorizer returned int")

    assert (error.code, isinstance(error, GatewayError)) == ("malformed_decision", True)


def test_the_policy_layers_malformed_decision_error_is_the_cores_one_class() -> None:
    assert PolicyMalformedDecisionError is MalformedDecisionError
    assert issubclass(MalformedDecisionError, PolicyError)
    assert issubclass(PolicyError, NoDecisionError)


def test_a_no_decision_error_keeps_its_detail_out_of_its_message() -> None:
    error = NoDecisionError("no decision", detail="private engine text")

    assert (str(error), error.detail) == ("no decision", "private engine text")


# --- read_answer: the one strict reading of an authorizer's answer -------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(True, Decision(True), id="true"),
        pytest.param(False, Decision(False), id="false"),
        pytest.param(Decision(False, message="m"), Decision(False, message="m"), id="decision"),
    ],
)
def test_read_answer_takes_exact_bools_and_well_formed_decisions(
    answer: object, expected: Decision
) -> None:
    assert read_answer(answer) == expected


def test_read_answer_names_the_engine_on_a_bool_and_keeps_a_decision_as_it_is() -> None:
    given_decision = Decision(True, engine="opa:x")

    assert read_answer(True, engine="embedded") == Decision(True, engine="embedded")
    assert read_answer(given_decision, engine="embedded") is given_decision


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(1, id="int-1"),
        pytest.param(0, id="int-0"),
        pytest.param("true", id="str"),
        pytest.param(None, id="none"),
        pytest.param({"allow": True}, id="dict"),
        pytest.param(Decision(allowed=1), id="decision-allowed-1"),  # type: ignore[arg-type]
        pytest.param(Decision(True, cache_ttl=-1), id="decision-negative-ttl"),
    ],
)
def test_read_answer_refuses_anything_else_naming_only_its_type(answer: object) -> None:
    with pytest.raises(MalformedDecisionError) as caught:
        read_answer(answer)

    assert str(caught.value) == f"authorizer returned {type(answer).__name__}"


@given(
    st.one_of(
        st.integers(),
        st.floats(allow_nan=True),
        st.text(),
        st.binary(),
        st.none(),
        st.lists(st.booleans()),
        st.dictionaries(st.text(), st.booleans()),
    )
)
def test_read_answer_refuses_every_value_that_is_neither_a_bool_nor_a_decision(
    answer: object,
) -> None:
    with pytest.raises(MalformedDecisionError):
        read_answer(answer)


#: Readers of an answer that still have their own copy of the check, until they move over.
OWN_ANSWER_READERS: set[str] = set()


def test_no_module_but_the_core_reads_an_authorizers_answer_itself() -> None:
    # Every reader of an answer goes through read_answer: a copy of the check drifts.
    package = Path(__file__).resolve().parent.parent / "gateway"
    readers = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if path.name != "_authorization.py"
        and any(
            isinstance(node, ast.Attribute) and node.attr == "well_formed"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    }

    assert readers - OWN_ANSWER_READERS == set()
