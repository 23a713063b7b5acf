"""The policy input document (contract version 1): tool, arguments, facts and caller context.

A call that reads session state (:mod:`gateway.state`) also has ``state``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import threading
from collections.abc import Iterator
from typing import Any, Final

import cachetools

from gateway import _json
from gateway._authorization import Authorization, decoding
from gateway._definition import ToolDefinition
from gateway.policy._context import CallerContext, current_caller
from gateway.policy._facts import facts_json
from gateway.policy._paths import PathView, merge_path_facts


@functools.lru_cache(maxsize=4096)
def _tool_json(definition: ToolDefinition) -> bytes:
    # Definitions are immutable and few; their encoding is computed once each. Members in
    # canonical (sorted) order; the optional metadata only when the definition has it.
    parts: list[bytes] = []
    if definition.annotations_json is not None:
        parts += [b'"annotations":', definition.annotations_json, b","]
    parts += [
        b'"description":',
        json.dumps(definition.description, ensure_ascii=False).encode("utf-8"),
        b',"input_schema":',
        _json.canonical(_json.parse(definition.input_schema_json, max_depth=10_000)),
        b',"name":',
        json.dumps(definition.name).encode("utf-8"),
    ]
    if definition.output_schema_json is not None:
        parts += [b',"output_schema":', definition.output_schema_json]
    if definition.title is not None:
        parts += [b',"title":', json.dumps(definition.title, ensure_ascii=False).encode("utf-8")]
    return b"".join((b"{", *parts, b"}"))


@functools.lru_cache(maxsize=4096)
def _tool_digest(definition: ToolDefinition) -> bytes:
    return hashlib.sha256(_tool_json(definition)).digest()


# The ``state`` member of the documents built here (canonical JSON), set by the state layer
# (gateway.state) around the one decision it belongs to; None: the document has none.
_STATE: contextvars.ContextVar[bytes | None] = contextvars.ContextVar(
    "gateway_state_input", default=None
)


@contextlib.contextmanager
def state_input(encoded: bytes) -> Iterator[None]:
    """Give the documents built in this block the ``state`` member ``encoded`` (canonical JSON).

    A document with state is never served from, nor stored in, the decision cache.
    """
    token = _STATE.set(encoded)
    try:
        yield
    finally:
        _STATE.reset(token)


def current_state_input() -> bytes | None:
    """The ``state`` member documents built here get, or ``None``."""
    return _STATE.get()


_MEMO_MAX_BYTES: Final = 4096
_memo: cachetools.LRUCache[bytes, bytes] = cachetools.LRUCache(maxsize=8192)
_memo_lock = threading.Lock()


def _canonical_arguments(raw: bytes) -> bytes:
    # Agents repeat the same small argument documents; decoding and re-encoding them is
    # most of the cost of a cache hit, so small ones are remembered (bounded, by value).
    if len(raw) > _MEMO_MAX_BYTES:
        return _json.canonical(_json.parse(raw, max_depth=10_000))
    with _memo_lock:
        known = _memo.get(raw)
    if known is None:
        known = _json.canonical(_json.parse(raw, max_depth=10_000))
        with _memo_lock:
            _memo[raw] = known
    return known


class InputDocument:
    """What a policy sees: ``{"tool": ..., "arguments": ..., "facts": ..., "context": ...}``.

    Built from a frozen :class:`Authorization` and the caller context in force. The
    arguments are spliced in as their admitted bytes, so numbers reach the engine exactly.
    ``facts`` is what the gateway's parsers found in the arguments the tool's definition
    marks (see ``policies/README.md``, "Argument facts"); it is derived from the tool and
    the arguments alone, plus, for the path arguments a :class:`PathView` covers, where the
    filesystem resolves them when the document is built. ``digest`` identifies the whole
    document canonically: member order and insignificant white space in the arguments do
    not change it; any change of tool, argument value, facts or context field does.
    """

    __slots__ = (
        "_arguments",
        "_canonical_arguments",
        "_context",
        "_decoded",
        "_definition",
        "_digest",
        "_facts",
        "_path_view",
        "_state",
    )

    def __init__(
        self,
        authorization: Authorization,
        context: CallerContext | None = None,
        *,
        path_view: PathView | None = None,
    ):
        self._definition = authorization.definition
        self._path_view = path_view
        self._arguments = authorization.arguments
        self._decoded = decoding(authorization)
        self._context = current_caller() if context is None else context
        self._canonical_arguments: bytes | None = None
        self._facts: bytes | None = None
        self._digest: str | None = None
        self._state = _STATE.get()

    @property
    def state_json(self) -> bytes | None:
        """The ``state`` member (session history and counts) as canonical JSON, if any."""
        return self._state

    @property
    def definition(self) -> ToolDefinition:
        """The tool's frozen definition."""
        return self._definition

    @property
    def arguments(self) -> bytes:
        """The admitted argument bytes."""
        return self._arguments

    @property
    def context(self) -> CallerContext:
        """The caller context."""
        return self._context

    def _canonical_args(self) -> bytes:
        if self._canonical_arguments is None:
            # Admission's decoding, when the authorization carries it: encoded once per
            # call, shared with the audit record; else the bytes are decoded here.
            decoded = self._decoded
            self._canonical_arguments = (
                _canonical_arguments(self._arguments) if decoded is None else decoded.canonical()
            )
        return self._canonical_arguments

    def _decoded_args(self) -> Any:
        decoded = self._decoded
        if decoded is not None:
            return decoded.value
        return _json.parse(self._canonical_args(), max_depth=10_000)

    @property
    def canonical_arguments(self) -> bytes:
        """The arguments as canonical JSON (sorted members, compact, numbers exact)."""
        return self._canonical_args()

    @property
    def facts_json(self) -> bytes:
        """The ``facts`` member as canonical JSON (computed once per document)."""
        if self._facts is None:
            decoded = self._decoded
            facts = facts_json(
                self._definition,
                self._canonical_args(),
                value=None if decoded is None else decoded.value,
            )
            view = self._path_view
            if view is not None and view.covers(self._definition.name):
                # Never remembered: the same path may resolve elsewhere on the next call.
                arguments = self._decoded_args()
                facts = merge_path_facts(facts, view.facts(self._definition.name, arguments))
            self._facts = facts
        return self._facts

    @property
    def tool_json(self) -> bytes:
        """The ``tool`` member as canonical JSON (computed once per definition)."""
        return _tool_json(self._definition)

    @property
    def digest(self) -> str:
        """SHA-256 over the canonical tool, arguments, facts and context (computed once)."""
        if self._digest is None:
            hasher = hashlib.sha256(_tool_digest(self._definition))
            # NUL never occurs in canonical JSON, so the parts cannot run into each other.
            hasher.update(b"\0")
            hasher.update(self._canonical_args())
            hasher.update(b"\0")
            hasher.update(self.facts_json)
            hasher.update(b"\0")
            hasher.update(self._context.json)
            if self._state is not None:
                hasher.update(b"\0")
                hasher.update(self._state)
            self._digest = hasher.hexdigest()
        return self._digest

    def _head_pieces(self) -> tuple[bytes, ...]:
        # Every member before ``tool``, in key order, canonically encoded.
        return (
            b'{"arguments":',
            self._canonical_args(),
            b',"context":',
            self._context.json,
            b',"facts":',
            self.facts_json,
            *((b',"state":', self._state) if self._state is not None else ()),
        )

    def to_json(self) -> bytes:
        """The document as JSON bytes, ready to send as ``input``."""
        return b"".join((*self._head_pieces(), b',"tool":', _tool_json(self._definition), b"}"))

    def head_json(self) -> bytes:
        """The document without its last member, ``tool``, as JSON bytes.

        Made of the same encoded pieces as :meth:`to_json`: the whole document is this
        object with ``"tool": tool_json`` added (an engine that keeps the tool's definition
        parsed is handed the rest alone, never a document it must take apart).
        """
        return b"".join((*self._head_pieces(), b"}"))

    def to_dict(self) -> dict[str, Any]:
        """A fresh decoded copy (exact numbers as ``Decimal``)."""
        value: dict[str, Any] = _json.parse(self.to_json(), max_depth=10_000)
        return value
