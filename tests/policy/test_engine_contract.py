"""One engine contract, three engines: OPA over REST (a real server), embedded, a fake.

The embedded engine evaluates OPA's own compiled WebAssembly of the test policy in process.

Every test here runs against each engine and expects the same decision, except where an
engine's documented capability differs (decision ids); those
differences are declared on the :class:`EngineCase`, not hidden in the tests.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

import pytest

from gateway import AuthorizationError, Failure, FailureKind
from gateway.policy import (
    DecisionCache,
    EngineError,
    InputDocument,
    MalformedDecisionError,
    OpaRestEngine,
    PolicyAuthorizer,
    PolicyEngine,
    UndefinedDecisionError,
    caller_context,
)
from gateway.policy._errors import PolicyError
from gateway.testing import OpaServer
from gateway.testing._engines import UNDEFINED, StaticEngine
from tests.policy.conftest import (
    ALLOWED_SUBJECTS,
    BIG,
    DECISION,
    DENY_MESSAGE,
    REGO_DIR,
    assert_no_leak,
    authorization,
    call,
    denied_without_running,
    guarded,
)
from tests.policy.wasm_support import contract_engine

BLOCKED_REASON: Final = 'text: the word "blocked" is refused'
UNKNOWN_SUBJECT_REASON: Final = "subject: not on the allow list"
NO_SUBJECT_REASON: Final = "subject: missing from the caller context"
UNKNOWN_TOOL_REASON: Final = "tool: unknown"
BIG_REASON: Final = f"n: not exactly {BIG}"


@dataclass(frozen=True)
class EngineCase:
    """One engine under the contract, with what it declares it can do."""

    name: str
    engine: PolicyEngine
    #: Whether every decision carries an engine decision id.
    decision_ids: bool


# -- the fake: the test policy (tests/policy/rego) written out in Python --------------------


def _static_decision(document: dict[str, Any]) -> Any:
    arguments = document["arguments"]
    subject = document["context"].get("subject")
    tool = document["tool"]["name"]
    denials: set[str] = set()
    if subject is None or subject is False:
        denials.add(NO_SUBJECT_REASON)
    elif subject not in ALLOWED_SUBJECTS:
        denials.add(UNKNOWN_SUBJECT_REASON)
    if arguments.get("text") == "blocked":
        denials.add(BLOCKED_REASON)
    if tool not in ("echo", "big"):
        denials.add(UNKNOWN_TOOL_REASON)
    number = arguments.get("n")
    if tool == "big" and (isinstance(number, bool) or number != BIG):
        denials.add(BIG_REASON)
    if not denials:
        return {"allow": True, "cache": {"ttl_s": 30}}
    return {"allow": False, "message": DENY_MESSAGE, "reasons": denials, "cache": {"ttl_s": 30}}


def _static_conflict(document: dict[str, Any]) -> Any:
    raise EngineError("evaluation failed", detail="eval_conflict_error: 1 and 2")


def _static_nothing(document: dict[str, Any]) -> Any:
    return UNDEFINED


STATIC_POLICY: Final[dict[str, Any]] = {
    DECISION: _static_decision,
    "gateway/faults/nothing": _static_nothing,
    "gateway/faults/bool_true": True,
    "gateway/faults/bool_false": False,
    "gateway/faults/string_allow": {"allow": "yes"},
    "gateway/faults/string_true_allow": {"allow": "true"},
    "gateway/faults/number": 1,
    "gateway/faults/number_allow": {"allow": 1},
    "gateway/faults/null_allow": {"allow": None},
    "gateway/faults/null_decision": None,
    "gateway/faults/extra_members": {"allow": True, "extra": 1},
    "gateway/faults/reasons_not_strings": {"allow": False, "reasons": [1, 2]},
    "gateway/faults/negative_ttl": {"allow": True, "cache": {"ttl_s": -1}},
    "gateway/faults/set_reasons": {
        "allow": False,
        "message": "refused",
        "reasons": {"zulu", "alpha", "mike"},
    },
    "gateway/faults/nested_sets": {"b": {3, 1, 2}, "a": [{"z", "y"}]},
    "gateway/faults/conflict": _static_conflict,
}


@pytest.fixture(params=["rest", "embedded", "static"])
async def case(request: pytest.FixtureRequest) -> AsyncIterator[EngineCase]:
    """Each engine in turn, serving the test policy."""
    if request.param == "rest":
        server: OpaServer = request.getfixturevalue("opa_server")
        async with OpaRestEngine(server.url, timeout=5.0, revision_interval=0) as engine:
            yield EngineCase("rest", engine, decision_ids=True)
    elif request.param == "embedded":
        embedded = contract_engine(request.getfixturevalue("opa_binary"))
        yield EngineCase("embedded", embedded, decision_ids=True)
    else:
        static = StaticEngine(STATIC_POLICY, identity="static:test-policy")
        yield EngineCase("static", static, decision_ids=True)


def test_the_test_policy_passes_opa_check_and_opa_test(opa_binary: str) -> None:
    for command in (["check", "--strict"], ["fmt", "--fail", "--list"], ["test"]):
        result = subprocess.run(
            [opa_binary, *command, str(REGO_DIR)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"opa {command}: {result.stdout}{result.stderr}"


def test_engines_satisfy_the_protocol(case: EngineCase) -> None:
    assert isinstance(case.engine, PolicyEngine)
    assert case.engine.identity
    revision = case.engine.revision()
    assert isinstance(revision, str)
    assert revision
    assert revision != "unknown"


async def test_allow(case: EngineCase) -> None:
    authorizer = PolicyAuthorizer(case.engine)
    with caller_context(subject="alice"):
        decision = await authorizer.authorize(authorization("echo", b'{"text":"hi"}'))
    assert decision.allowed is True
    assert decision.message is None
    assert decision.reasons == ()
    assert decision.cache_ttl == 30.0
    assert decision.cached is False
    assert decision.engine == case.engine.identity
    assert decision.revision
    assert decision.well_formed()


async def test_allow_runs_the_tool_behind_a_guard(case: EngineCase) -> None:
    binding, tool = guarded(PolicyAuthorizer(case.engine))
    with caller_context(subject="bob"):
        output = await call(binding, '{"text": "hi"}')
    assert tool.count == 1
    assert output.text() == '{"text": "hi"}'


async def test_deny_with_public_message_and_sorted_audit_reasons(case: EngineCase) -> None:
    authorizer = PolicyAuthorizer(case.engine)
    with caller_context(subject="mallory"):
        decision = await authorizer.authorize(authorization("echo", b'{"text":"blocked"}'))
    assert decision.allowed is False
    assert decision.message == DENY_MESSAGE
    assert decision.reasons == (UNKNOWN_SUBJECT_REASON, BLOCKED_REASON)
    assert list(decision.reasons) == sorted(decision.reasons)
    assert decision.cache_ttl == 30.0
    assert decision.engine == case.engine.identity


async def test_deny_shows_only_the_message_to_the_caller(case: EngineCase) -> None:
    binding, tool = guarded(PolicyAuthorizer(case.engine))
    with caller_context(subject="mallory"), pytest.raises(Failure) as caught:
        await call(binding, '{"text": "blocked"}')
    assert tool.count == 0
    failure = caught.value
    assert failure.kind is FailureKind.REJECTED
    assert failure.output.text() == DENY_MESSAGE
    for reason in (UNKNOWN_SUBJECT_REASON, BLOCKED_REASON):
        assert reason not in str(failure)
        assert reason not in repr(failure)


async def test_reasons_from_a_rego_set_come_back_sorted(case: EngineCase) -> None:
    authorizer = PolicyAuthorizer(case.engine, path="gateway/faults/set_reasons")
    decision = await authorizer.authorize(authorization())
    assert decision.allowed is False
    assert decision.message == "refused"
    assert decision.reasons == ("alpha", "mike", "zulu")


async def test_sets_anywhere_become_sorted_lists(case: EngineCase) -> None:
    answer = await case.engine.evaluate(
        "gateway/faults/nested_sets", InputDocument(authorization())
    )
    assert answer.defined
    assert answer.value == {"a": [["y", "z"]], "b": [1, 2, 3]}


@pytest.mark.parametrize("value", [True, False])
async def test_boolean_decisions(case: EngineCase, value: bool) -> None:
    path = f"gateway/faults/bool_{str(value).lower()}"
    decision = await PolicyAuthorizer(case.engine, path=path).authorize(authorization())
    assert decision.allowed is value
    assert decision.message is None
    assert decision.reasons == ()
    assert decision.cache_ttl is None


@pytest.mark.parametrize(
    "path",
    [
        "gateway/faults/nothing",  # a rule that exists but is undefined for this input
        "gateway/faults/no_such_rule",  # a rule that does not exist in a known package
        "nowhere/at/all",  # a package that does not exist
    ],
)
async def test_undefined_decision(case: EngineCase, path: str) -> None:
    authorizer = PolicyAuthorizer(case.engine, path=path)
    with caller_context(subject="alice"), pytest.raises(UndefinedDecisionError):
        await authorizer.authorize(authorization())
    binding, tool = guarded(authorizer)
    with caller_context(subject="alice"):
        error = await denied_without_running(binding, tool)
    assert error.code == "undefined_decision"


@pytest.mark.parametrize(
    "path",
    [
        "string_allow",
        "string_true_allow",
        "number",
        "number_allow",
        "null_allow",
        "null_decision",
        "extra_members",
        "reasons_not_strings",
        "negative_ttl",
    ],
)
async def test_malformed_decision(case: EngineCase, path: str) -> None:
    authorizer = PolicyAuthorizer(case.engine, path=f"gateway/faults/{path}")
    with pytest.raises(MalformedDecisionError):
        await authorizer.authorize(authorization())
    binding, tool = guarded(authorizer)
    error = await denied_without_running(binding, tool)
    assert error.code == "malformed_decision"


async def test_evaluation_error_is_engine_error(case: EngineCase) -> None:
    authorizer = PolicyAuthorizer(case.engine, path="gateway/faults/conflict")
    with pytest.raises(EngineError) as caught:
        await authorizer.authorize(authorization())
    assert caught.value.detail
    binding, tool = guarded(authorizer)
    error = await denied_without_running(binding, tool)
    assert error.code == "engine_error"
    assert_no_leak(error, "conflict", caught.value.detail)


@pytest.mark.parametrize(
    ("context", "allowed", "reasons"),
    [
        ({}, False, (NO_SUBJECT_REASON,)),
        ({"subject": "alice"}, True, ()),
        ({"subject": "bob", "tenant": "acme"}, True, ()),
        ({"subject": "mallory"}, False, (UNKNOWN_SUBJECT_REASON,)),
        ({"subject": "Alice"}, False, (UNKNOWN_SUBJECT_REASON,)),
    ],
)
async def test_caller_context_reaches_the_policy(
    case: EngineCase, context: dict[str, Any], allowed: bool, reasons: tuple[str, ...]
) -> None:
    authorizer = PolicyAuthorizer(case.engine)
    with caller_context(context):
        decision = await authorizer.authorize(authorization())
    assert decision.allowed is allowed
    assert decision.reasons == reasons


async def test_context_comes_from_the_caller_not_the_arguments(case: EngineCase) -> None:
    authorizer = PolicyAuthorizer(case.engine)
    forged = b'{"context": {"subject": "alice"}, "subject": "alice"}'
    decision = await authorizer.authorize(authorization("echo", forged))
    assert decision.allowed is False
    assert decision.reasons == (NO_SUBJECT_REASON,)


async def test_cache_never_shares_a_decision_between_callers(case: EngineCase) -> None:
    authorizer = PolicyAuthorizer(case.engine, cache=DecisionCache())
    request = authorization("echo", b'{"text":"hi"}')
    with caller_context(subject="alice"):
        first = await authorizer.authorize(request)
        again = await authorizer.authorize(request)
    with caller_context(subject="mallory"):
        other = await authorizer.authorize(request)
    assert first.allowed is True
    assert first.cached is False
    assert again.allowed is True
    assert again.cached is True
    assert other.allowed is False
    assert other.cached is False


async def test_exact_big_numbers(case: EngineCase) -> None:
    authorizer = PolicyAuthorizer(case.engine)
    exact = authorization("big", b'{"n": 9007199254740993}')
    rounded = authorization("big", b'{"n": 9007199254740992}')
    with caller_context(subject="alice"):
        decision = await authorizer.authorize(exact)
        assert decision.allowed is True, decision.reasons
        # 2^53 is not the number the policy wants: nothing rounds one into the other.
        decision = await authorizer.authorize(rounded)
    assert decision.allowed is False
    assert decision.reasons == (BIG_REASON,)


async def test_a_big_number_reaches_the_tool_behind_a_guard(case: EngineCase) -> None:
    binding, tool = guarded(PolicyAuthorizer(case.engine), name="big")
    with caller_context(subject="alice"):
        await call(binding, '{"n": 9007199254740993}')
    assert tool.count == 1


async def test_decision_ids(case: EngineCase) -> None:
    authorizer = PolicyAuthorizer(case.engine)
    with caller_context(subject="alice"):
        first = await authorizer.authorize(authorization())
        second = await authorizer.authorize(authorization())
    if case.decision_ids:
        assert isinstance(first.decision_id, str)
        assert first.decision_id
        assert isinstance(second.decision_id, str)
        assert first.decision_id != second.decision_id
    else:
        assert first.decision_id is None
        assert second.decision_id is None


async def test_revision_is_reported_on_every_decision(case: EngineCase) -> None:
    authorizer = PolicyAuthorizer(case.engine)
    with caller_context(subject="mallory"):
        decision = await authorizer.authorize(authorization())
    assert isinstance(decision.revision, str)
    assert decision.revision
    assert decision.revision == case.engine.revision()


async def test_errors_are_policy_errors_only(case: EngineCase) -> None:
    # The protocol promises that evaluate raises nothing but PolicyError subclasses.
    document = InputDocument(authorization())
    with pytest.raises(PolicyError):
        await case.engine.evaluate("gateway/faults/conflict", document)
    answer = await case.engine.evaluate("gateway/faults/no_such_rule", document)
    assert answer.defined is False


async def test_authorization_error_code_is_the_cause_code(case: EngineCase) -> None:
    binding, tool = guarded(PolicyAuthorizer(case.engine, path="gateway/faults/number"))
    error = await denied_without_running(binding, tool)
    assert isinstance(error, AuthorizationError)
    assert isinstance(error.cause, MalformedDecisionError)
    assert error.code == error.cause.code
