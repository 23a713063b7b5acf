"""What a decision came to, and how two decisions on one input differ.

An outcome is ``allow``, ``deny`` or ``error`` (no decision: the call was not run), with
the refusal code, the public message and the audit-only reasons. Two outcomes of one input
differ by exactly one *change*: the direction of the flip when the result differs
(``deny-to-allow``, ...), else ``message`` when the public message differs, else
``reasons`` when only the reasons differ.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final, Literal

from gateway import Decision, MalformedDecisionError
from gateway._authorization import read_answer
from gateway.policy import (
    EmbeddedEngine,
    InputDocument,
    PolicyEngine,
    PolicyError,
    UndefinedDecisionError,
    read_decision,
)
from gateway.replay._document import RecordedDocument

Result = Literal["allow", "deny", "error"]
RESULTS: Final[tuple[Result, ...]] = ("allow", "deny", "error")

#: Every change two outcomes of one input can differ by, flips first.
FLIPS: Final = tuple(f"{old}-to-{new}" for old in RESULTS for new in RESULTS if old != new)
CHANGES: Final = (*FLIPS, "message", "reasons")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One decision's outcome.

    Attributes:
        result: ``allow``, ``deny`` or ``error``.
        code: ``None`` for an allow, ``denied`` for a deny, the error's code otherwise.
        message: the public message, if any.
        reasons: the audit-only reasons.
    """

    result: Result
    code: str | None = None
    message: str | None = None
    reasons: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The outcome as plain JSON."""
        return {
            "result": self.result,
            "code": self.code,
            "message": self.message,
            "reasons": list(self.reasons),
        }

    @classmethod
    def from_dict(cls, value: Any) -> Outcome:
        """Read :meth:`as_dict`'s form.

        Raises:
            ValueError: not that form.
        """
        if not isinstance(value, dict) or set(value) != {"result", "code", "message", "reasons"}:
            raise ValueError("not an outcome")
        result, code, message, reasons = (
            value["result"],
            value["code"],
            value["message"],
            value["reasons"],
        )
        if (
            result not in RESULTS
            or not (code is None or isinstance(code, str))
            or not (message is None or isinstance(message, str))
            or not isinstance(reasons, list)
            or not all(isinstance(reason, str) for reason in reasons)
        ):
            raise ValueError("not an outcome")
        return cls(result, code, message, tuple(reasons))


def of_decision(decision: Decision) -> Outcome:
    """The outcome of a well-formed decision."""
    if decision.allowed is True:
        return Outcome("allow", None, decision.message, tuple(decision.reasons))
    return Outcome("deny", "denied", decision.message, tuple(decision.reasons))


def of_error(error: BaseException) -> Outcome:
    """The outcome of a failed decision: its code only (its text is sealed)."""
    code = getattr(error, "code", None)
    return Outcome("error", code if isinstance(code, str) else "no_decision")


def of_result(result: object) -> Outcome:
    """The outcome of what an authorizer returned.

    Anything but a bool or a well-formed Decision is no decision.
    """
    try:
        decision = read_answer(result)
    except MalformedDecisionError:
        return Outcome("error", "malformed_decision")
    return of_decision(decision)


def change(recorded: Outcome, candidate: Outcome) -> str | None:
    """The one change from ``recorded`` to ``candidate``, or ``None`` when they agree."""
    if recorded.result != candidate.result:
        return f"{recorded.result}-to-{candidate.result}"
    if recorded.message != candidate.message:
        return "message"
    if recorded.reasons != candidate.reasons:
        return "reasons"
    return None


async def decide(engine: PolicyEngine, path: str, document: InputDocument | bytes) -> Outcome:
    """Ask ``engine`` for the decision at ``path`` on ``document`` and read it strictly.

    ``document`` may be the input document's JSON bytes. Never raises but for
    cancellation: every failure is an ``error`` outcome carrying only its code.
    """
    try:
        if isinstance(engine, EmbeddedEngine) and isinstance(document, bytes):
            answer = engine.evaluate_sync(path, document)
        else:
            if isinstance(document, bytes):
                document = RecordedDocument(document)
            answer = await engine.evaluate(path, document)
        if not answer.defined:
            return of_error(UndefinedDecisionError(f"decision {path} is undefined"))
        return of_decision(read_decision(answer.value, engine=engine.identity))
    except asyncio.CancelledError:
        raise
    except PolicyError as exc:
        return of_error(exc)
    except Exception:  # noqa: BLE001 - an engine's own failure is sealed here
        return Outcome("error", "engine_error")
