"""The engine protocol every Rego engine implements, and the authorizer built on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from gateway._authorization import Decision
from gateway.policy._cache import CachingAuthorizer, DecisionCache
from gateway.policy._decision import read_decision
from gateway.policy._document import InputDocument
from gateway.policy._errors import UndefinedDecisionError
from gateway.policy._paths import PathView

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
    """

    defined: bool
    value: Any = None
    decision_id: str | None = None
    revision: str | None = None


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
        return read_decision(
            answer.value,
            engine=self._policy_engine.identity,
            decision_id=answer.decision_id,
            revision=answer.revision,
        )
