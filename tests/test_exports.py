"""The public surface of `gateway`: a literal list, so any export drift fails here."""

from __future__ import annotations

import re

import gateway

EXPECTED_EXPORTS = [
    "DEFAULT_LIMITS",
    "MAX_WRAPPING_DEPTH",
    "AdmissionLimits",
    "Authorization",
    "AuthorizationError",
    "Authorizer",
    "AuthorizerFunc",
    "Binding",
    "Content",
    "Contract",
    "Decision",
    "DuplicateToolError",
    "Failure",
    "FailureKind",
    "Func",
    "GatewayError",
    "Guard",
    "InputValidatingTool",
    "InputValidator",
    "InvalidDefinitionError",
    "InvalidFailureError",
    "InvalidInvocationError",
    "InvalidToolCallError",
    "InvalidToolError",
    "InvalidToolOutputError",
    "InvalidWrappingChainError",
    "Invocation",
    "MalformedDecisionError",
    "MediaContent",
    "NoDecisionError",
    "Registry",
    "TextContent",
    "Tool",
    "ToolCall",
    "ToolDefinition",
    "ToolOutput",
    "WrappingTool",
    "bind",
    "capability",
    "function_tool",
    "run_blocking",
]

ERROR_CODES = {
    "GatewayError": "gateway_error",
    "InvalidToolError": "invalid_tool",
    "InvalidDefinitionError": "invalid_definition",
    "InvalidInvocationError": "invalid_invocation",
    "InvalidToolCallError": "invalid_tool_call",
    "InvalidWrappingChainError": "invalid_wrapping_chain",
    "DuplicateToolError": "duplicate_tool",
    "InvalidFailureError": "invalid_failure",
    "InvalidToolOutputError": "invalid_tool_output",
    "Failure": "tool_failure",
    "AuthorizationError": "no_decision",
    "MalformedDecisionError": "malformed_decision",
    "NoDecisionError": "no_decision",
}


def _isort_key(name: str) -> tuple[int, str]:
    """Ruff RUF022 order: SCREAMING_SNAKE_CASE, then CamelCase, then everything else."""
    if name.upper() == name:
        return (0, name)
    if name[0].isupper():
        return (1, name)
    return (2, name)


def test_all_matches_the_expected_public_names() -> None:
    assert gateway.__all__ == EXPECTED_EXPORTS


def test_all_is_sorted_constants_then_classes_then_functions() -> None:
    assert gateway.__all__ == sorted(gateway.__all__, key=_isort_key)


def test_every_exported_name_exists_and_is_unique() -> None:
    missing = [name for name in gateway.__all__ if not hasattr(gateway, name)]

    assert missing == []
    assert len(set(gateway.__all__)) == len(gateway.__all__)


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from gateway import *", namespace)  # noqa: S102 - the test is about star imports

    assert sorted(name for name in namespace if name != "__builtins__") == sorted(EXPECTED_EXPORTS)


def test_every_error_class_has_a_stable_unique_snake_case_code() -> None:
    codes = {name: getattr(gateway, name).code for name in ERROR_CODES}
    # The bare marker of no-decision causes says no more than AuthorizationError's own code.
    distinct = {name: code for name, code in codes.items() if name != "NoDecisionError"}

    assert codes == ERROR_CODES
    assert len(set(distinct.values())) == len(distinct)
    assert gateway.NoDecisionError.code == gateway.AuthorizationError.code
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", code) for code in codes.values())


def test_every_exported_exception_class_is_listed_with_its_code() -> None:
    exported = [
        name
        for name in gateway.__all__
        if isinstance(getattr(gateway, name), type)
        and issubclass(getattr(gateway, name), BaseException)
    ]

    assert sorted(exported) == sorted(ERROR_CODES)


def test_every_error_class_is_rooted_at_gateway_error() -> None:
    assert all(issubclass(getattr(gateway, name), gateway.GatewayError) for name in ERROR_CODES)
    assert issubclass(gateway.GatewayError, Exception)
