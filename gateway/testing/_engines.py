"""A fake Rego engine: answers decision paths from a table, for tests without any engine."""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from gateway.policy._decision import normalize
from gateway.policy._document import InputDocument
from gateway.policy._engine import EngineAnswer, normalize_path
from gateway.policy._errors import EngineError, EngineTimeoutError, PolicyError

__all__ = ["UNDEFINED", "StaticEngine"]


class _Undefined:
    """The marker an answer function returns for "this path is undefined for this input"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNDEFINED"


#: Return this from an answer function to make the decision undefined for that input.
UNDEFINED: Final = _Undefined()

#: A fixed JSON value, or a function of the decoded input document (exact numbers: ``int``
#: and ``Decimal``) returning a JSON value or :data:`UNDEFINED`.
Answer = Any


class StaticEngine:
    """A :class:`gateway.policy.PolicyEngine` that answers each path from a table.

    A path missing from the table is undefined, as an unknown rule is in OPA. An answer is
    a fixed JSON value (handed out as a fresh copy) or a function of the decoded input
    document; Python sets in answers come back as sorted lists, like a real engine's. A
    function may raise a :class:`gateway.policy.PolicyError` to simulate an engine fault;
    any other exception becomes :class:`gateway.policy.EngineError`, as a real engine
    translates its failures at its own boundary.

    Every evaluation is recorded in :attr:`calls` as ``(path, input document)`` pairs.

    With a ``timeout``, an answer that took ``timeout`` seconds or more on ``clock`` is
    discarded and the evaluation fails with :class:`gateway.policy.EngineTimeoutError`, as
    a real engine's deadline makes it fail; an answer function simulates a slow policy by
    advancing a :class:`gateway.testing.FakeClock`.

    Args:
        answers: decision path (any form :func:`gateway.policy.normalize_path` accepts) to
            answer.
        identity: the engine identity (part of every cache key).
        revision: the initial policy revision.
        decision_ids: whether answers carry a decision id (``<identity>-<n>``).
        timeout: the deadline of one evaluation in seconds (``None``: none).
        clock: the monotonic clock the deadline is read on.

    Example:
        >>> engine = StaticEngine({"gateway/authz/decision": {"allow": True}})
    """

    def __init__(
        self,
        answers: Mapping[str, Answer] | None = None,
        *,
        identity: str = "static",
        revision: str = "static-1",
        decision_ids: bool = True,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError("timeout must be positive")
        self._timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: dict[str, Answer] = {
            normalize_path(path): answer for path, answer in (answers or {}).items()
        }
        self._identity = identity
        self._revision = revision
        self._decision_ids = decision_ids
        self._counter = itertools.count(1)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @property
    def identity(self) -> str:
        """The identity given at construction."""
        return self._identity

    def revision(self) -> str:
        """The current revision (change it with :meth:`set_revision`)."""
        with self._lock:
            return self._revision

    def set_revision(self, revision: str) -> None:
        """Pretend the policy changed: later answers carry ``revision``."""
        with self._lock:
            self._revision = revision

    def set_answer(self, path: str, answer: Answer) -> None:
        """Set (or replace) the answer for ``path``."""
        with self._lock:
            self._answers[normalize_path(path)] = answer

    def remove_answer(self, path: str) -> None:
        """Make ``path`` undefined."""
        with self._lock:
            self._answers.pop(normalize_path(path), None)

    @property
    def count(self) -> int:
        """How many evaluations were asked for."""
        with self._lock:
            return len(self.calls)

    async def evaluate(self, path: str, document: InputDocument) -> EngineAnswer:
        """Answer ``path`` from the table."""
        return self.evaluate_sync(path, document)

    def evaluate_sync(self, path: str, document: InputDocument) -> EngineAnswer:
        """Answer ``path`` from the table, in the calling thread."""
        started = self._clock()
        answer = self._answer(path, document)
        if self._timeout is not None and self._clock() - started >= self._timeout:
            raise EngineTimeoutError(f"static engine did not answer within {self._timeout} s")
        return answer

    def _answer(self, path: str, document: InputDocument) -> EngineAnswer:
        key = normalize_path(path)
        value_in = document.to_dict()
        with self._lock:
            self.calls.append((key, value_in))
            answer = self._answers.get(key, UNDEFINED)
            revision = self._revision
            number = next(self._counter)
        if callable(answer):
            function: Callable[[dict[str, Any]], Any] = answer
            try:
                value = function(document.to_dict())
            except PolicyError:
                raise
            except Exception as exc:  # noqa: BLE001 - a real engine translates every failure
                raise EngineError(
                    "static engine answer failed", detail=f"{type(exc).__name__}: {exc}"
                ) from None
        elif answer is UNDEFINED:
            value = UNDEFINED
        else:
            value = copy.deepcopy(answer)
        if value is UNDEFINED:
            return EngineAnswer(defined=False, revision=revision)
        decision_id = f"{self._identity}-{number}" if self._decision_ids else None
        return EngineAnswer(
            defined=True, value=normalize(value), decision_id=decision_id, revision=revision
        )

    def __repr__(self) -> str:
        return f"StaticEngine({self._identity!r}, revision={self.revision()!r})"
