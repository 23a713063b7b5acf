"""The engine protocol every Rego engine implements, and the authorizer built on it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from gateway._authorization import Decision
from gateway.policy._cache import CachingAuthorizer, DecisionCache
from gateway.policy._decision import read_decision
from gateway.policy._document import InputDocument
from gateway.policy._errors import EngineError, PolicyError, UndefinedDecisionError
from gateway.policy._paths import PathView

#: How many answer texts a PolicyAuthorizer remembers the reading of, each at most how long.
_READINGS: Final = 1024
_READING_MAX_BYTES: Final = 4096
#: Where the shipped policies put their decision.
DEFAULT_DECISION_PATH: Final = "gateway/authz/decision"


@dataclass(frozen=True, slots=True)
class EngineAnswer:
    """One evaluation's raw result.

    Attributes:
        defined: whether the decision path produced a value.
        value: the decoded value (JSON types; sets already normalized to sorted lists).
        decision_id: the engine's decision id, if it gave one.
        revision: the policy revision that produced it, if known.
        text: the exact text the engine gave the value as, if it states it: two answers of
            one engine with the same text have equal values (a reader may memoize by it).
    """

    defined: bool
    value: Any = None
    decision_id: str | None = None
    revision: str | None = None
    text: bytes | None = None


@runtime_checkable
class PolicyEngine(Protocol):
    """A Rego engine: evaluates a decision path over an input document.

    ``evaluate`` raises only :class:`gateway.policy.PolicyError` subclasses (or
    ``asyncio.CancelledError``); engine-internal failures are translated at the engine's
    own boundary.
    """

    @property
    def identity(self) -> str:
        """A stable name for the engine instance, part of every cache key."""
        ...

    def revision(self) -> str:
        """The policy revision currently believed active."""
        ...

    async def evaluate(self, path: str, document: InputDocument) -> EngineAnswer:
        """Evaluate ``path`` (slash-separated, e.g. ``gateway/authz/decision``)."""
        ...


@runtime_checkable
class ReuseLimitedEngine(Protocol):
    """An engine whose state can change without a new :meth:`PolicyEngine.revision`.

    OPA's data API, for one, changes what a policy decides without changing any revision
    the gateway can read cheaply. Such an engine states how long one of its decisions may
    be reused; :class:`PolicyAuthorizer` never caches a decision longer than that.
    """

    @property
    def max_decision_age(self) -> float:
        """The longest one decision may be reused, in seconds (0: never)."""
        ...


class EngineInput(Protocol):
    """An input document an engine can evaluate: its JSON bytes (``{"input": ...}``'s value).

    :class:`InputDocument` is one (a tool call); a visibility document is another.
    """

    def to_json(self) -> bytes:
        """The document as JSON bytes."""
        ...


#: One item's outcome in a batch: its answer, or why that item has none.
ItemAnswer = EngineAnswer | PolicyError


@runtime_checkable
class BatchEngine(Protocol):
    """An engine that evaluates several input documents in one round trip.

    ``evaluate_many`` returns one entry per document, in order: the item's
    :class:`EngineAnswer`, or the :class:`PolicyError` that left that item undecided (one
    failing item never fails the others). It raises a :class:`PolicyError` only when the
    round trip itself fails (then no item is decided).
    """

    async def evaluate_many(self, path: str, documents: Sequence[EngineInput]) -> list[ItemAnswer]:
        """Evaluate ``path`` over every document in one round trip."""
        ...


async def evaluate_many(
    engine: PolicyEngine, path: str, documents: Sequence[EngineInput]
) -> list[ItemAnswer]:
    """Several decisions of ``path`` at once, fail closed per item.

    An engine with its own ``evaluate_many`` (:class:`BatchEngine`: OPA over REST, the
    embedded engine) answers in one round trip; any other engine is asked once per
    document, concurrently. Every entry is an :class:`EngineAnswer` or the
    :class:`PolicyError` of that item; an answer list of the wrong length, or any
    exception other than a :class:`PolicyError` or a cancellation, leaves the items it
    concerns undecided (``engine_error``).

    Raises:
        PolicyError: the round trip itself failed (no item is decided).
    """
    if not documents:
        return []
    if isinstance(engine, BatchEngine):
        answers = await engine.evaluate_many(path, documents)
        if not isinstance(answers, list) or len(answers) != len(documents):
            raise EngineError("the engine answered a batch with the wrong number of items")
        return [_item(answer) for answer in answers]
    results = await asyncio.gather(
        *(engine.evaluate(path, document) for document in documents),  # type: ignore[arg-type]
        return_exceptions=True,
    )
    for result in results:
        if isinstance(result, asyncio.CancelledError):
            raise result
    return [_item(result) for result in results]


def _item(result: object) -> ItemAnswer:
    if isinstance(result, EngineAnswer | PolicyError):
        return result
    # Sealed: what went wrong stays out of the item (its type name only, for logs).
    return EngineError("the engine failed on this item", detail=type(result).__name__)


def normalize_path(path: str) -> str:
    """Accept ``data.gateway.authz.decision``, ``gateway.authz.decision`` or slashes."""
    cleaned = path.strip().strip("/")
    if cleaned.startswith("data."):
        cleaned = cleaned[len("data.") :]
    cleaned = cleaned.replace(".", "/")
    parts = cleaned.split("/")
    if not cleaned or not all(part.isidentifier() for part in parts):
        raise ValueError(f"invalid decision path {path!r}")
    return cleaned


class PolicyAuthorizer(CachingAuthorizer):
    """The Authorizer that asks a Rego engine, reads its decision strictly, and caches it.

    Args:
        engine: the engine to ask.
        path: the decision path (default ``gateway/authz/decision``).
        cache: an optional :class:`DecisionCache`; its key includes the engine's identity,
            the path and the engine's current revision. A decision is cached no longer
            than the engine's ``max_decision_age`` (:class:`ReuseLimitedEngine`), if it
            states one.
        path_view: resolves the path arguments it covers, for the policy (``input.facts``).
    """

    def __init__(
        self,
        engine: PolicyEngine,
        *,
        path: str = DEFAULT_DECISION_PATH,
        cache: DecisionCache | None = None,
        path_view: PathView | None = None,
    ) -> None:
        self._policy_engine = engine
        self._decision_path = normalize_path(path)
        # Decisions read from answers that state their text, by that text (bounded; read
        # without a lock: a lost store only costs another reading).
        self._readings: dict[bytes, Decision] = {}
        super().__init__(
            self._ask,
            engine=engine.identity,
            path=self._decision_path,
            revision=engine.revision,
            cache=cache,
            max_age=engine.max_decision_age if isinstance(engine, ReuseLimitedEngine) else None,
            path_view=path_view,
        )

    @property
    def engine(self) -> PolicyEngine:
        """The engine asked."""
        return self._policy_engine

    @property
    def path(self) -> str:
        """The normalized decision path."""
        return self._decision_path

    async def _ask(self, document: InputDocument) -> Decision:
        answer = await self._policy_engine.evaluate(self._decision_path, document)
        if not answer.defined:
            raise UndefinedDecisionError(f"decision {self._decision_path} is undefined")
        text = answer.text
        if text is None or len(text) > _READING_MAX_BYTES:
            return read_decision(
                answer.value,
                engine=self._policy_engine.identity,
                decision_id=answer.decision_id,
                revision=answer.revision,
            )
        # The same text is the same decision: it is read strictly once, then only given
        # this answer's id and revision. (A malformed one is never remembered.)
        readings = self._readings
        read = readings.get(text)
        if read is None:
            read = read_decision(answer.value, engine=self._policy_engine.identity)
            if len(readings) >= _READINGS:
                readings.clear()
            readings[text] = read
        return read.identified(answer.decision_id, answer.revision)
