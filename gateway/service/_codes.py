"""The one table of result codes: every way a call or request ends, its HTTP status and meaning.

The pipeline's :class:`~gateway.service.CallResult`, the MCP results' ``gateway/code``, the
audit trail's outcome records, ``gateway check``'s exit status, the OpenAPI document and the
README's table all read this table; a code is added here or nowhere.
"""

from __future__ import annotations

import enum
from typing import Final


class ResultCode(enum.StrEnum):
    """A stable, machine-readable result code (its value is the wire text).

    Attributes:
        status: the HTTP status that answers it.
        meaning: its public meaning (what the README's table says).
        ran: whether the tool ran (``ok``, a tool's own failure, an unexpected error).
        outcome: the audit outcome record's ``outcome`` for a call that ends with it.
        exit_status: ``gateway check``'s exit status: 0 allowed, 1 denied, 2 neither.
    """

    status: int
    meaning: str
    ran: bool
    outcome: str
    exit_status: int

    def __new__(  # noqa: PLR0917 - one argument per column of the table
        cls, value: str, status: int, outcome: str, exit_status: int, ran: bool, meaning: str
    ) -> ResultCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.status = status
        member.outcome = outcome
        member.exit_status = exit_status
        member.ran = ran
        member.meaning = meaning
        return member

    #     code                  status outcome     exit ran
    OK = ("ok", 200, "executed", 0, True, "the tool ran")
    TOOL_FAILED = (
        "tool_failed", 200, "failed", 0, True,
        "the tool ran and failed; its public output is shown",
    )  # fmt: skip
    TOOL_REJECTED = (
        "tool_rejected", 200, "rejected", 0, True,
        "the tool refused the call itself; its public output is shown",
    )  # fmt: skip
    MALFORMED_REQUEST = ("malformed_request", 400, "invalid", 2, False, "bad request JSON")
    INVALID_ARGUMENTS = (
        "invalid_arguments", 400, "invalid", 2, False, "arguments refused at admission"
    )  # fmt: skip
    UNAUTHENTICATED = (
        "unauthenticated", 401, "invalid", 2, False,
        "no or invalid credentials: no policy is ever asked",
    )  # fmt: skip
    TOKEN_EXPIRED = (
        "token_expired", 401, "invalid", 2, False, "the bearer token has expired"
    )  # fmt: skip
    DENIED = ("denied", 403, "rejected", 1, False, "the policy refused; only its public message")
    UNKNOWN_TOOL = ("unknown_tool", 404, "invalid", 2, False, "no such tool")
    NOT_FOUND = ("not_found", 404, "invalid", 2, False, "no such path")
    METHOD_NOT_ALLOWED = (
        "method_not_allowed", 405, "invalid", 2, False, "the path does not take that method"
    )  # fmt: skip
    UNSUPPORTED_MEDIA_TYPE = (
        "unsupported_media_type", 415, "invalid", 2, False,
        "the request body is not sent as JSON (Content-Type: application/json)",
    )  # fmt: skip
    BODY_TOO_LARGE = (
        "body_too_large", 413, "invalid", 2, False, "request body over server.max_body_bytes"
    )  # fmt: skip
    TOOL_ERROR = (
        "tool_error", 500, "failed", 0, True,
        "the tool raised an unexpected error (its text is not shown)",
    )  # fmt: skip
    ENGINE_UNAVAILABLE = (
        "engine_unavailable", 503, "rejected", 2, False, "the policy engine cannot be reached"
    )  # fmt: skip
    ENGINE_TIMEOUT = (
        "engine_timeout", 503, "rejected", 2, False, "the policy engine did not answer in time"
    )  # fmt: skip
    UNDEFINED_DECISION = (
        "undefined_decision", 503, "rejected", 2, False, "the policy has no decision for it"
    )  # fmt: skip
    MALFORMED_DECISION = (
        "malformed_decision", 503, "rejected", 2, False, "the policy's answer is not a decision"
    )  # fmt: skip
    ENGINE_ERROR = ("engine_error", 503, "rejected", 2, False, "the policy engine failed")
    INVALID_CONTEXT = (
        "invalid_context", 503, "rejected", 2, False, "the caller context cannot be decided on"
    )  # fmt: skip
    POLICY_LOAD_ERROR = (
        "policy_load_error", 503, "rejected", 2, False, "the policy did not load"
    )  # fmt: skip
    POLICY_ERROR = ("policy_error", 503, "rejected", 2, False, "the policy layer failed")
    NO_DECISION = ("no_decision", 503, "rejected", 2, False, "no decision for another reason")
    STATE_UNAVAILABLE = (
        "state_unavailable", 503, "rejected", 2, False,
        "the session or quota state could not be read or written: the tool did not run",
    )  # fmt: skip
    AUDIT_FAILED = (
        "audit_failed", 503, "rejected", 2, False,
        "the audit trail could not be written: the tool did not run",
    )  # fmt: skip
    APPROVAL_PENDING = (
        "approval_pending", 202, "pending", 2, False,
        "the call awaits a person's approval: it did not run; poll the approval it names",
    )  # fmt: skip
    OBLIGATION_UNFULFILLED = (
        "obligation_unfulfilled", 403, "rejected", 2, False,
        "the policy obliges something unknown or impossible for this call: it did not run",
    )  # fmt: skip
    OUTPUT_WITHHELD = (
        "output_withheld", 502, "failed", 0, True,
        "the tool ran, but its output could not be redacted as the policy requires: none is shown",
    )  # fmt: skip

    @property
    def no_decision(self) -> bool:
        """Whether it says that no policy decision could be made (the tool did not run)."""
        return self.status == 503


#: The codes a tool's own answer ends with (HTTP 200: the result body, not the error body).
TOOL_RESULTS: Final = frozenset({ResultCode.OK, ResultCode.TOOL_FAILED, ResultCode.TOOL_REJECTED})
#: The codes the HTTP API answers with its error body.
ERRORS: Final = tuple(code for code in ResultCode if code not in TOOL_RESULTS)


_BY_VALUE: Final = {code.value: code for code in ResultCode}


def result_code(code: str) -> ResultCode:
    """The table's entry for ``code``; an unknown one is ``no_decision`` (fail closed)."""
    return _BY_VALUE.get(code, ResultCode.NO_DECISION)
