"""Which tools a caller is shown: the visibility decision (policy contract, visibility version 1).

A listing (``GET /v1/tools``, MCP ``tools/list``) shows a caller only the tools the policy
says it may see. The policy is asked once per listing for every tool not in the decision
cache, in one batch (:func:`gateway.policy.evaluate_many`), with an input document that has
the tool's definition and the caller context, and no arguments::

    {"tool": {...definition...}, "context": {...caller...}, "visibility": {"version": 1}}

The answer at the visibility path (default ``data.gateway.authz.visibility.decision``) has
the form of a call decision (a boolean, or ``{"allow", "message", "reasons", "cache"}``);
only ``allow: true`` lists the tool. Anything else fails closed: an undefined or malformed
answer, an item the engine could not evaluate, or a failed round trip leaves the tool
unlisted. Visibility never replaces the call-time decision: a listed tool is still decided
on every call, and an unlisted one is still refused by that decision, not by its absence.

Visibility decisions are cached like call decisions, in the same :class:`DecisionCache`,
keyed by engine, visibility path, policy revision and a digest of the tool definition and
caller context (so two callers never share one), for the policy's ``cache.ttl_s`` clamped
to the cache's bound and the engine's ``max_decision_age``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any, Final

from gateway import _json
from gateway._definition import ToolDefinition
from gateway.policy._cache import CacheKey, DecisionCache
from gateway.policy._context import CallerContext, current_caller
from gateway.policy._decision import read_decision
from gateway.policy._document import _tool_digest, _tool_json
from gateway.policy._engine import (
    PolicyEngine,
    ReuseLimitedEngine,
    evaluate_many,
    normalize_path,
)
from gateway.policy._errors import PolicyError

_LOG: Final = logging.getLogger("gateway.policy")

#: The version of the visibility input (``input.visibility.version``).
VISIBILITY_VERSION: Final = 1
#: Where the shipped policies put their visibility decision.
DEFAULT_VISIBILITY_PATH: Final = "gateway/authz/visibility/decision"
_MARKER: Final = b'{"version":1}'


class VisibilityDocument:
    """The visibility input: ``{"context", "tool", "visibility": {"version": 1}}``."""

    __slots__ = ("_context", "_definition", "_digest")

    def __init__(self, definition: ToolDefinition, context: CallerContext) -> None:
        self._definition = definition
        self._context = context
        self._digest: str | None = None

    @property
    def definition(self) -> ToolDefinition:
        """The tool's definition."""
        return self._definition

    @property
    def context(self) -> CallerContext:
        """The caller context."""
        return self._context

    @property
    def digest(self) -> str:
        """SHA-256 over the visibility version, the canonical tool and the context."""
        if self._digest is None:
            hasher = hashlib.sha256(b"visibility\0" + _MARKER + b"\0")
            hasher.update(_tool_digest(self._definition))
            hasher.update(b"\0")
            hasher.update(self._context.json)
            self._digest = hasher.hexdigest()
        return self._digest

    def to_json(self) -> bytes:
        """The document as JSON bytes (members in canonical order)."""
        return b"".join(
            (
                b'{"context":',
                self._context.json,
                b',"tool":',
                _tool_json(self._definition),
                b',"visibility":',
                _MARKER,
                b"}",
            )
        )

    def to_dict(self) -> dict[str, Any]:
        """A fresh decoded copy."""
        value: dict[str, Any] = _json.parse(self.to_json(), max_depth=10_000)
        return value


class ToolVisibility:
    """Filters tool definitions per caller by the policy's visibility decision.

    Args:
        engine: the engine to ask (the one that decides calls).
        path: the visibility decision path.
        cache: the decision cache (shared with call decisions is fine: keys differ).
    """

    def __init__(
        self,
        engine: PolicyEngine,
        *,
        path: str = DEFAULT_VISIBILITY_PATH,
        cache: DecisionCache | None = None,
    ) -> None:
        self._engine = engine
        self._path = normalize_path(path)
        self._cache = cache
        self._max_age = engine.max_decision_age if isinstance(engine, ReuseLimitedEngine) else None

    @classmethod
    def for_engine(
        cls,
        engine: PolicyEngine,
        *,
        path: str = DEFAULT_VISIBILITY_PATH,
        cache: DecisionCache | None = None,
    ) -> ToolVisibility | None:
        """The filter for ``engine``, or ``None`` when it cannot have the visibility path.

        An engine that names its entrypoints (the embedded engine) and lacks ``path`` was
        compiled from policies without a visibility rule: a service then lists every tool,
        as it did before visibility existed (each call is still decided). Any other engine
        gets the filter, which lists nothing while the path is undefined (fail closed).
        """
        normalized = normalize_path(path)
        entrypoints = getattr(engine, "entrypoints", None)
        if isinstance(entrypoints, tuple) and normalized not in entrypoints:
            return None
        return cls(engine, path=normalized, cache=cache)

    @property
    def path(self) -> str:
        """The normalized visibility path."""
        return self._path

    @property
    def engine(self) -> PolicyEngine:
        """The engine asked."""
        return self._engine

    def revision(self) -> str:
        """The engine's policy revision now (a listing may change when it does)."""
        return self._engine.revision()

    async def visible(
        self, definitions: Sequence[ToolDefinition], context: CallerContext | None = None
    ) -> list[ToolDefinition]:
        """The definitions the caller may see, in the order given (fail closed).

        ``context`` is the caller (default: the caller context in force).
        """
        caller = current_caller() if context is None else context
        documents = [VisibilityDocument(definition, caller) for definition in definitions]
        shown = [False] * len(documents)
        revision = self._engine.revision()
        keys: list[CacheKey] = [
            (self._engine.identity, self._path, revision, document.digest) for document in documents
        ]
        missing: list[int] = []
        cache = self._cache
        for index, key in enumerate(keys):
            cached = cache.get(key) if cache is not None else None
            if cached is None:
                missing.append(index)
            else:
                shown[index] = cached.allowed is True
        if missing:
            generation = cache.generation if cache is not None else 0
            started = cache.clock() if cache is not None else 0.0
            try:
                answers = await evaluate_many(
                    self._engine, self._path, [documents[index] for index in missing]
                )
            except PolicyError as exc:
                _LOG.warning("visibility: the listing batch failed (%s); nothing listed", exc.code)
                answers = [exc] * len(missing)
            undecided = 0
            for index, answer in zip(missing, answers, strict=True):
                if isinstance(answer, PolicyError) or not answer.defined:
                    undecided += 1
                    continue
                try:
                    decision = read_decision(
                        answer.value, engine=self._engine.identity, revision=answer.revision
                    )
                except PolicyError:
                    undecided += 1
                    continue
                shown[index] = decision.allowed is True
                if cache is not None:
                    cache.put(
                        keys[index],
                        decision,
                        started=started,
                        generation=generation,
                        max_age=self._max_age,
                    )
            if undecided:
                _LOG.warning("visibility: %d tool(s) undecided, not listed", undecided)
        return [definition for definition, show in zip(definitions, shown, strict=True) if show]
