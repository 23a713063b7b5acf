"""Caller-owned context: who is calling, for which tenant, set by the application.

The context travels in a :mod:`contextvars` variable, so it follows ``await``, tasks and
``asyncio.to_thread`` without being passed around, and it never comes from a model's tool
arguments. It is frozen at construction and encoded once, canonically, for the policy
input and the cache key.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, Final

from gateway import _json
from gateway._errors import NoDecisionError

_MAX_CONTEXT_BYTES: Final = 64 * 1024


class InvalidContextError(NoDecisionError, ValueError):
    """Caller context that is not a JSON object of bounded size and depth."""

    code = "invalid_context"


class CallerContext:
    """An immutable JSON object describing the caller (subject, roles, tenant, ...).

    Any JSON object is accepted; the shipped policies read ``subject``, ``roles`` and
    ``tenant``. The empty context is ``{}``, which policies should deny.

    Raises:
        InvalidContextError: not a JSON object of string keys and JSON values, non-finite
            numbers, more than 64 KiB encoded, or deeper than 64 levels.
    """

    __slots__ = ("_added", "_digest", "_json", "_parent")

    _json: bytes
    _digest: str
    # Set by with_member when the member is new: the context it was derived from, which is
    # exactly this one without that member.
    _parent: CallerContext | None
    _added: str | None

    def __init__(self, values: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        if values is not None and not isinstance(values, Mapping):
            raise InvalidContextError("caller context must be a JSON object (a mapping)")
        merged = {**(values or {}), **fields}
        try:
            encoded = _json.canonical(merged)
            # Re-parse so that the stored form is exactly what a policy will see.
            _json.parse(encoded, max_depth=_json.DEFAULT_MAX_DEPTH)
        # UnicodeError: a lone surrogate in a key or string cannot be encoded as UTF-8.
        except (_json.StrictJSONError, UnicodeError, RecursionError) as exc:
            raise InvalidContextError(f"caller context: {exc}") from None
        if len(encoded) > _MAX_CONTEXT_BYTES:
            raise InvalidContextError(f"caller context exceeds {_MAX_CONTEXT_BYTES} bytes")
        _fill(self, encoded, None, None)

    def with_member(self, name: str, value: str) -> CallerContext:
        """This context with the string member ``name`` set to ``value``.

        Cheaper than building a new context from :meth:`as_dict`: this one is already
        valid, so only the new member is checked.

        Raises:
            InvalidContextError: ``name`` or ``value`` is not a string that encodes as
                UTF-8, or the result exceeds 64 KiB encoded.
        """
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidContextError("caller context: a member name and value must be strings")
        try:
            # The new member alone, read back as a policy would (no noncharacters, say).
            _json.parse(_json.canonical({name: value}))
        except (_json.StrictJSONError, UnicodeError) as exc:
            raise InvalidContextError(f"caller context: {exc}") from None
        merged = self.as_dict()
        fresh = name not in merged
        merged[name] = value
        encoded = _json.canonical(merged)
        if len(encoded) > _MAX_CONTEXT_BYTES:
            raise InvalidContextError(f"caller context exceeds {_MAX_CONTEXT_BYTES} bytes")
        derived = CallerContext.__new__(CallerContext)
        _fill(derived, encoded, self if fresh else None, name if fresh else None)
        return derived

    def without_member(self, name: str) -> CallerContext:
        """This context without the member ``name`` (itself when it has no such member).

        A context made by :meth:`with_member` adding ``name`` gives back the one it was
        made from, without decoding anything.
        """
        if self._added == name and self._parent is not None:
            return self._parent
        values = self.as_dict()
        if name not in values:
            return self
        del values[name]
        return CallerContext(values)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CallerContext is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("CallerContext is immutable")

    @property
    def json(self) -> bytes:
        """The canonical JSON encoding (sorted keys, compact)."""
        return self._json

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical encoding."""
        return self._digest

    def as_dict(self) -> dict[str, Any]:
        """A fresh, detached decoded copy.

        The stored encoding was checked strictly when this context was made (and is the
        canonical encoding of what was checked), so it is read back by the plain decoder,
        numbers kept exact, without repeating the strict checks on every call.
        """
        value: dict[str, Any] = json.loads(self._json, parse_float=Decimal)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """One decoded field (a fresh copy), or ``default``."""
        return self.as_dict().get(key, default)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CallerContext) and other._json == self._json

    def __hash__(self) -> int:
        return hash(self._json)

    def __repr__(self) -> str:
        return f"CallerContext({json.loads(self._json)!r})"


def _fill(
    context: CallerContext, encoded: bytes, parent: CallerContext | None, added: str | None
) -> None:
    object.__setattr__(context, "_json", encoded)
    object.__setattr__(context, "_digest", hashlib.sha256(encoded).hexdigest())
    object.__setattr__(context, "_parent", parent)
    object.__setattr__(context, "_added", added)


EMPTY_CONTEXT: Final = CallerContext()

_CURRENT: contextvars.ContextVar[CallerContext] = contextvars.ContextVar(
    "gateway_caller_context", default=EMPTY_CONTEXT
)


def current_caller() -> CallerContext:
    """The caller context in force here (``EMPTY_CONTEXT`` when none was set)."""
    return _CURRENT.get()


@contextlib.contextmanager
def caller_context(
    values: Mapping[str, Any] | CallerContext | None = None, /, **fields: Any
) -> Iterator[CallerContext]:
    """Set the caller context for the enclosed block (and the tasks and threads it starts).

    A nested block replaces the outer context rather than merging with it, so nothing is
    inherited by accident.

    Example:
        >>> with caller_context(subject="alice", roles=["analyst"], tenant="acme"):
        ...     pass
    """
    context = (
        values
        if isinstance(values, CallerContext) and not fields
        else CallerContext(
            values.as_dict() if isinstance(values, CallerContext) else values, **fields
        )
    )
    token = _CURRENT.set(context)
    try:
        yield context
    finally:
        _CURRENT.reset(token)
