"""Obligations: what a decision requires the gateway to do before or after the tool runs.

A decision document (policy contract version 2) may carry ``obligations``: an array of
objects, each with a ``type`` and that type's members. Obligations are must-understand:
a type the gateway does not know is kept as an :class:`UnknownObligation`, which no
enforcement point fulfils, so the call is refused; an obligation that cannot be fulfilled
refuses the call too. A member missing, of the wrong type or out of bounds makes the whole
decision malformed (:class:`~gateway.MalformedDecisionError`), and no message quotes a
value.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar, Final

import re2

from gateway import _formats, _json
from gateway._errors import GatewayError, MalformedDecisionError, NoDecisionError

#: At most this many obligations in one decision.
MAX_OBLIGATIONS: Final = 32
#: At most this many operations, pointers or patterns in one obligation.
MAX_ITEMS: Final = 32
#: The longest JSON pointer, pattern, role name or text member accepted.
MAX_TEXT: Final = 512
#: The largest canonical JSON of an operation's value or of the audit fields.
MAX_VALUE_BYTES: Final = 8192

REWRITE_ARGUMENTS: Final = "rewrite_arguments"
REDACT_OUTPUT: Final = "redact_output"
REQUIRE_APPROVAL: Final = "require_approval"
AUDIT: Final = "audit"
TYPES: Final = frozenset({REWRITE_ARGUMENTS, REDACT_OUTPUT, REQUIRE_APPROVAL, AUDIT})


class UnfulfilledObligationError(NoDecisionError):
    """A decision's obligation is unknown or cannot be fulfilled: the call does not run."""

    code: ClassVar[str] = "obligation_unfulfilled"


class OutputWithheldError(GatewayError):
    """An output obligation could not be fulfilled after the tool ran: no output is returned.

    The message names the obligation's type only, never an output or argument value.
    """

    code: ClassVar[str] = "output_withheld"


def _malformed(index: int, what: str) -> MalformedDecisionError:
    return MalformedDecisionError(f"decision.obligations[{index}]: {what}")


def parse_pointer(pointer: object) -> tuple[str, ...] | None:
    """The reference tokens of an RFC 6901 JSON pointer, or ``None`` when it is not one.

    The empty pointer (the whole document) is refused. In redaction pointers a token
    exactly ``*`` stands for every member or element (their one extension).
    """
    if not isinstance(pointer, str) or not pointer.startswith("/") or len(pointer) > MAX_TEXT:
        return None
    tokens: list[str] = []
    for raw in pointer[1:].split("/"):
        stripped = raw.replace("~0", "").replace("~1", "")
        if "~" in stripped:
            return None
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tuple(tokens)


@dataclasses.dataclass(frozen=True, slots=True)
class RewriteOperation:
    """One argument rewrite: ``set`` a value, ``remove`` a member, or ``clamp`` a number.

    Attributes:
        op: ``set``, ``remove`` or ``clamp``.
        path: the JSON pointer's reference tokens (never empty).
        value: for ``set``: the canonical JSON of the value.
        minimum: for ``clamp``: the lower bound, or ``None``.
        maximum: for ``clamp``: the upper bound, or ``None``.
    """

    op: str
    path: tuple[str, ...]
    value: bytes | None = None
    minimum: Decimal | None = None
    maximum: Decimal | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RewriteArguments:
    """``{"type": "rewrite_arguments", "operations": [{"op", "path", ...}, ...]}``."""

    operations: tuple[RewriteOperation, ...]
    type: ClassVar[str] = REWRITE_ARGUMENTS


@dataclasses.dataclass(frozen=True, slots=True)
class RedactOutput:
    """``{"type": "redact_output", "pointers": [...], "patterns": [...], "replacement": s}``.

    ``pointers`` address the structured content (``*`` matches every member or element);
    ``patterns`` (ECMA-262, ``u`` flag) are replaced in every text item and in every string
    of the structured content.
    """

    pointers: tuple[tuple[str, ...], ...]
    patterns: tuple[str, ...]
    replacement: str = "[redacted]"
    type: ClassVar[str] = REDACT_OUTPUT


@dataclasses.dataclass(frozen=True, slots=True)
class RequireApproval:
    """``{"type": "require_approval", "role": r, "message": s, "ttl_s": n}``.

    The call runs only after a person holding ``role`` approves this exact call.
    """

    role: str
    message: str | None = None
    ttl_s: float | None = None
    type: ClassVar[str] = REQUIRE_APPROVAL


@dataclasses.dataclass(frozen=True, slots=True)
class AuditFields:
    """``{"type": "audit", "fields": {...}}``: members added to the decision's audit record."""

    fields: bytes
    type: ClassVar[str] = AUDIT

    def value(self) -> Any:
        """The fields, decoded."""
        return _json.parse(self.fields, max_depth=_json.DEFAULT_MAX_DEPTH)


@dataclasses.dataclass(frozen=True, slots=True)
class UnknownObligation:
    """An obligation of a type the gateway does not know: never fulfilled."""

    name: str

    @property
    def type(self) -> str:
        """The unknown type's name."""
        return self.name


Obligation = RewriteArguments | RedactOutput | RequireApproval | AuditFields | UnknownObligation
OBLIGATION_TYPES: Final = (
    RewriteArguments,
    RedactOutput,
    RequireApproval,
    AuditFields,
    UnknownObligation,
)


def _members(index: int, item: Mapping[str, Any], allowed: set[str]) -> None:
    extra = set(item) - allowed - {"type"}
    if extra:
        raise _malformed(index, f"unknown members {sorted(extra)}")


def _text(index: int, value: object, name: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise _malformed(index, f"{name} must be a non-empty string of at most {MAX_TEXT}")
    return value


def _number(index: int, value: object, name: str) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise _malformed(index, f"{name} must be a number")
    number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    if not number.is_finite():
        raise _malformed(index, f"{name} must be finite")
    return number


def _list(index: int, value: object, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise _malformed(index, f"{name} must be an array of at most {MAX_ITEMS}")
    return value


def _encoded(index: int, value: object, name: str) -> bytes:
    try:
        raw = _json.canonical(value)
    except _json.StrictJSONError:
        raise _malformed(index, f"{name} is not a JSON value") from None
    if len(raw) > MAX_VALUE_BYTES:
        raise _malformed(index, f"{name} exceeds {MAX_VALUE_BYTES} bytes")
    return raw


def _operation(index: int, item: object) -> RewriteOperation:
    if not isinstance(item, dict):
        raise _malformed(index, "an operation must be an object")
    op = item.get("op")
    path = parse_pointer(item.get("path"))
    if path is None:
        raise _malformed(index, "an operation's path must be a JSON pointer to a member")
    if op == "set":
        _members(index, item, {"op", "path", "value"})
        if "value" not in item:
            raise _malformed(index, "a set operation needs a value")
        return RewriteOperation("set", path, value=_encoded(index, item["value"], "value"))
    if op == "remove":
        _members(index, item, {"op", "path"})
        return RewriteOperation("remove", path)
    if op == "clamp":
        _members(index, item, {"op", "path", "min", "max"})
        low, high = _number(index, item.get("min"), "min"), _number(index, item.get("max"), "max")
        if low is None and high is None:
            raise _malformed(index, "a clamp operation needs min or max")
        if low is not None and high is not None and low > high:
            raise _malformed(index, "a clamp operation's min exceeds its max")
        return RewriteOperation("clamp", path, minimum=low, maximum=high)
    raise _malformed(index, "an operation's op must be set, remove or clamp")


def _rewrite(index: int, item: dict[str, Any]) -> Obligation:
    _members(index, item, {"operations"})
    operations = _list(index, item.get("operations"), "operations")
    if not operations:
        raise _malformed(index, "operations must not be empty")
    return RewriteArguments(tuple(_operation(index, op) for op in operations))


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """The RE2 program of a redaction pattern (cached; patterns come from policies).

    Matching is RE2's: linear in the text, whatever the pattern (a backtracking engine
    takes quadratic or exponential time on some patterns and texts, and the text is a
    tool's output).

    Raises:
        re2.error: RE2 cannot compile it.
    """
    return re2.compile(pattern)


def _pattern(index: int, pattern: object) -> str:
    text = _text(index, pattern, "a pattern")
    try:
        _formats.ecma_regex(text)
    except ValueError:
        raise _malformed(index, "a pattern is not an ECMA-262 regular expression") from None
    try:
        program = compiled(text)
    except re2.error:
        raise _malformed(index, "a pattern is not also an RE2 regular expression") from None
    if program.search("") is not None:
        raise _malformed(index, "a pattern must not match the empty string")
    return text


def _redact(index: int, item: dict[str, Any]) -> Obligation:
    _members(index, item, {"pointers", "patterns", "replacement"})
    pointers = []
    for pointer in _list(index, item.get("pointers"), "pointers"):
        tokens = parse_pointer(pointer)
        if tokens is None:
            raise _malformed(index, "a pointer must be a JSON pointer to a member")
        pointers.append(tokens)
    patterns = [_pattern(index, p) for p in _list(index, item.get("patterns"), "patterns")]
    if not pointers and not patterns:
        raise _malformed(index, "redact_output needs pointers or patterns")
    replacement = item.get("replacement", "[redacted]")
    if not isinstance(replacement, str) or len(replacement) > MAX_TEXT:
        raise _malformed(index, "replacement must be a string")
    if any(compiled(p).search(replacement) is not None for p in patterns):
        raise _malformed(index, "the replacement matches a pattern")
    return RedactOutput(tuple(pointers), tuple(patterns), replacement)


_WEEK: Final = 7 * 86400


def _approval(index: int, item: dict[str, Any]) -> Obligation:
    _members(index, item, {"role", "message", "ttl_s"})
    role = _text(index, item.get("role"), "role")
    message = item.get("message")
    if message is not None:
        message = _text(index, message, "message")
    ttl = _number(index, item.get("ttl_s"), "ttl_s")
    if ttl is not None and not 0 < ttl <= _WEEK:
        raise _malformed(index, "ttl_s must be positive and at most a week")
    return RequireApproval(role, message, None if ttl is None else float(ttl))


def _audit(index: int, item: dict[str, Any]) -> Obligation:
    _members(index, item, {"fields"})
    fields = item.get("fields")
    if not isinstance(fields, dict) or not fields:
        raise _malformed(index, "fields must be a non-empty object")
    return AuditFields(_encoded(index, fields, "fields"))


_READERS: Final = {
    REWRITE_ARGUMENTS: _rewrite,
    REDACT_OUTPUT: _redact,
    REQUIRE_APPROVAL: _approval,
    AUDIT: _audit,
}


def _read_one(index: int, item: object) -> Obligation:
    if not isinstance(item, dict):
        raise _malformed(index, "an obligation must be an object")
    kind = item.get("type")
    if not isinstance(kind, str) or not kind or len(kind) > MAX_TEXT:
        raise _malformed(index, "type must be a non-empty string")
    reader = _READERS.get(kind)
    return UnknownObligation(kind) if reader is None else reader(index, item)


def read_obligations(value: object) -> tuple[Obligation, ...]:
    """Read a decision's ``obligations`` member strictly (``None``: no obligations).

    Raises:
        MalformedDecisionError: not an array of well-formed obligation objects.
    """
    if value is None:
        return ()
    if not isinstance(value, list):
        raise MalformedDecisionError("decision.obligations must be an array")
    if len(value) > MAX_OBLIGATIONS:
        raise MalformedDecisionError(f"decision.obligations has more than {MAX_OBLIGATIONS}")
    obligations = tuple(_read_one(index, item) for index, item in enumerate(value))
    if sum(isinstance(o, RequireApproval) for o in obligations) > 1:
        raise MalformedDecisionError("decision.obligations has more than one require_approval")
    return obligations


def describe(obligation: Obligation) -> dict[str, Any]:
    """The obligation as plain JSON, for the audit trail (policy-given values only)."""
    if isinstance(obligation, RewriteArguments):
        ops: list[dict[str, Any]] = []
        for op in obligation.operations:
            entry: dict[str, Any] = {"op": op.op, "path": _pointer_text(op.path)}
            if op.minimum is not None:
                entry["min"] = float(op.minimum)
            if op.maximum is not None:
                entry["max"] = float(op.maximum)
            ops.append(entry)
        return {"type": obligation.type, "operations": ops}
    if isinstance(obligation, RedactOutput):
        return {
            "type": obligation.type,
            "pointers": [_pointer_text(p) for p in obligation.pointers],
            "patterns": len(obligation.patterns),
        }
    if isinstance(obligation, RequireApproval):
        return {"type": obligation.type, "role": obligation.role}
    if isinstance(obligation, AuditFields):
        return {"type": obligation.type, "fields": sorted(obligation.value())}
    return {"type": obligation.type, "unknown": True}


def _pointer_text(tokens: tuple[str, ...]) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)
