"""The decision cache and the caching authorizer that every engine plugs into.

Staleness bound: a cached decision is served for at most ``min(decision.cache_ttl,
max_ttl, max_age)`` seconds counted from the moment its evaluation *started* (``max_age``
is the authorizer's own limit: an engine whose state can change unseen sets it), never after
:meth:`DecisionCache.invalidate`, and never under a policy revision other than the one that
produced it (the revision is part of the key). Errors and undefined or malformed decisions
are never cached. Two callers whose context differs in any field never share an entry,
because the whole input document (tool, arguments, context) is in the key.

A hit takes no lock: the entries are read with one dictionary lookup and the entry's expiry
is checked against the clock on every read, so a hit is exactly as fresh as the bound above
(stores, evictions and invalidation take the lock). Capacity evictions go to the least
recently used entries by the second-chance rule: a hit marks its entry, and an eviction
spares a marked entry once (unmarking it and moving it behind the others).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Final

from gateway._authorization import Authorization, Decision, read_answer
from gateway._definition import ToolDefinition
from gateway.policy._context import current_caller
from gateway.policy._document import InputDocument, current_state_input
from gateway.policy._errors import PolicyError
from gateway.policy._paths import PathView

Clock = Callable[[], float]
DecisionFunction = Callable[[InputDocument], Awaitable[Decision | bool]]
CacheKey = tuple[str, str, str, str]

DEFAULT_MAX_TTL: Final = 30.0

# The document digests of small, repeated calls, by (definition, argument bytes, context):
# a pure function of them when no path view resolves the arguments. Bounded by both.
_DIGEST_MEMO_MAX_BYTES: Final = 2048
_DIGEST_MEMO_ENTRIES: Final = 2048


class CoalescedEvaluationError(PolicyError):
    """The evaluation this call was waiting on was cancelled by its own caller."""

    code = "engine_unavailable"


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters since the cache was made."""

    hits: int
    misses: int
    coalesced: int
    evictions: int
    size: int


class _Entry:
    # ``used`` is set by a lock-free hit (one attribute store) and read by evictions.
    __slots__ = ("decision", "expires", "used")

    def __init__(self, decision: Decision, expires: float) -> None:
        self.decision = decision
        self.expires = expires
        self.used = False


class DecisionCache:
    """A bounded, thread-safe store of allow/deny decisions with per-decision TTLs.

    Args:
        maxsize: the most entries held; the least recently used go first.
        max_ttl: the longest any decision is reused, whatever the policy asks (seconds).
        default_ttl: the TTL for decisions that do not state one (default 0: not cached).
        clock: a monotonic clock in seconds; inject a fake one in tests.
    """

    def __init__(
        self,
        *,
        maxsize: int = 100_000,
        max_ttl: float = DEFAULT_MAX_TTL,
        default_ttl: float = 0.0,
        clock: Clock = time.monotonic,
    ) -> None:
        if maxsize < 1 or max_ttl < 0 or default_ttl < 0:
            raise ValueError("maxsize must be >= 1 and TTLs >= 0")
        self._lock = threading.Lock()
        self._clock = clock
        self._max_ttl = float(max_ttl)
        self._default_ttl = float(default_ttl)
        self._evictions = 0
        self._maxsize = maxsize
        # Read without the lock (a lookup of str-tuple keys never runs Python code, so it
        # is atomic); changed only under it.
        self._entries: OrderedDict[CacheKey, _Entry] = OrderedDict()
        self._inflight: dict[CacheKey, concurrent.futures.Future[Decision]] = {}
        self._generation = 0
        self._hits = 0
        self._misses = 0
        self._coalesced = 0

    def _expire(self, now: float) -> None:
        # Under the lock: drop every expired entry (not counted as evictions).
        dead = [key for key, entry in self._entries.items() if not now < entry.expires]
        for key in dead:
            del self._entries[key]

    def _make_room(self, now: float) -> None:
        # Under the lock, before a store of a new key into a full cache: the oldest entries
        # are taken in turn; an expired one goes (not an eviction), a marked one is spared
        # once (unmarked, moved behind the others), an unmarked one is evicted. Amortized
        # constant time: no scan of the whole cache.
        entries = self._entries
        while len(entries) >= self._maxsize:
            key, entry = entries.popitem(last=False)
            if not now < entry.expires:
                continue
            if entry.used:
                entry.used = False
                entries[key] = entry
            else:
                self._evictions += 1

    @property
    def clock(self) -> Clock:
        """The clock the cache reads."""
        return self._clock

    @property
    def max_ttl(self) -> float:
        """The staleness bound in seconds."""
        return self._max_ttl

    def ttl_for(self, decision: Decision, *, max_age: float | None = None) -> float:
        """The TTL a decision gets: its own (or the default), clamped to ``max_ttl``.

        Args:
            decision: the decision to store.
            max_age: a further limit of the caller's (e.g. the engine's reuse bound).
        """
        wanted = self._default_ttl if decision.cache_ttl is None else decision.cache_ttl
        limit = self._max_ttl if max_age is None else min(self._max_ttl, float(max_age))
        return max(0.0, min(float(wanted), limit))

    def get(self, key: CacheKey) -> Decision | None:
        """A live decision for ``key``, or ``None`` (takes no lock)."""
        # The lock-free read: a live entry is marked used and counted as a hit. The hit
        # counter is exact for callers on one thread (an event loop); threads hitting at
        # the same instant may undercount it, never the decisions served.
        entry = self._entries.get(key)
        if entry is None or not self._clock() < entry.expires:
            return None
        entry.used = True
        self._hits += 1
        return entry.decision

    def put(
        self,
        key: CacheKey,
        decision: Decision,
        *,
        started: float,
        generation: int,
        max_age: float | None = None,
    ) -> bool:
        """Store a decision evaluated from ``started``; refused if invalidated meanwhile.

        ``max_age`` limits the entry's life further (see :meth:`ttl_for`).

        Returns:
            Whether the decision was stored.
        """
        ttl = self.ttl_for(decision, max_age=max_age)
        if ttl <= 0 or not isinstance(decision.allowed, bool):
            return False
        expires = started + ttl
        with self._lock:
            now = self._clock()
            if generation != self._generation or expires <= now:
                return False
            if key in self._entries:
                del self._entries[key]
            else:
                self._make_room(now)
            self._entries[key] = _Entry(replace(decision, cached=True), expires)
            return True

    def invalidate(self) -> None:
        """Drop every entry; evaluations already running will not store their result.

        Calls that arrive afterwards do not join an evaluation that started before: they
        evaluate afresh (the callers already waiting still get the older evaluation).
        """
        with self._lock:
            self._generation += 1
            self._entries.clear()
            self._inflight.clear()

    @property
    def generation(self) -> int:
        """Bumped by every :meth:`invalidate`."""
        with self._lock:
            return self._generation

    def stats(self) -> CacheStats:
        """A snapshot of the counters."""
        with self._lock:
            self._expire(self._clock())
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                coalesced=self._coalesced,
                evictions=self._evictions,
                size=len(self._entries),
            )

    async def get_or_evaluate(
        self,
        key: CacheKey,
        evaluate: Callable[[], Awaitable[Decision]],
        *,
        max_age: float | None = None,
    ) -> Decision:
        """Return the cached decision, or evaluate once for all concurrent identical misses.

        A decision stored here lives at most ``max_age`` seconds (when given), whatever
        its own TTL.

        When the shared evaluation fails (or its caller is cancelled), every waiter gets a
        failure too (no decision) and nothing is cached.
        """
        hit = self.get(key)
        if hit is not None:
            return hit
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and self._clock() < entry.expires:
                entry.used = True
                self._hits += 1
                return entry.decision
            pending = self._inflight.get(key)
            if pending is not None:
                self._coalesced += 1
            else:
                self._misses += 1
                generation = self._generation
                started = self._clock()
                mine: concurrent.futures.Future[Decision] = concurrent.futures.Future()
                # A running future cannot be cancelled by one impatient waiter.
                mine.set_running_or_notify_cancel()
                self._inflight[key] = mine
        if pending is not None:
            # shield: a waiter's own cancellation must not cancel the shared evaluation.
            return await asyncio.shield(asyncio.wrap_future(pending))
        try:
            decision = await evaluate()
        except BaseException as exc:
            self._finish(key, mine, error=exc)
            raise
        self.put(key, decision, started=started, generation=generation, max_age=max_age)
        self._finish(key, mine, result=decision)
        return decision

    def _finish(
        self,
        key: CacheKey,
        future: concurrent.futures.Future[Decision],
        *,
        result: Decision | None = None,
        error: BaseException | None = None,
    ) -> None:
        with self._lock:
            # After invalidate() the key may belong to a newer evaluation; leave that one.
            if self._inflight.get(key) is future:
                del self._inflight[key]
        if result is not None:
            future.set_result(result)
        elif isinstance(error, Exception):
            future.set_exception(error)
        else:
            # The leader was cancelled: waiters get no decision rather than a cancellation
            # that is not theirs.
            future.set_exception(CoalescedEvaluationError("shared evaluation was cancelled"))


class CachingAuthorizer:
    """An :class:`gateway.Authorizer` over any decision function, with the decision cache.

    The decision function receives the :class:`InputDocument` (tool, arguments and the
    caller context in force) and returns a ``bool`` or a :class:`Decision`. The cache key is
    ``(engine, path, revision(), document.digest)``.

    Args:
        decide: the decision function.
        engine: the engine's identity (e.g. ``"opa:http://127.0.0.1:8181"``).
        path: the decision path (e.g. ``"gateway/authz/decision"``).
        revision: returns the current policy revision; a new value makes old entries unused.
        cache: the cache; ``None`` evaluates every call.
        max_age: the longest a decision is reused, whatever its TTL (``None``: the cache's
            ``max_ttl`` only). An engine whose state can change without a new revision
            (OPA's data API) is only as fresh as this bound.
        path_view: resolves the path arguments it covers on every call, so the policy
            decides on where they lead (``input.facts``); see :class:`PathView`.
    """

    def __init__(
        self,
        decide: DecisionFunction,
        *,
        engine: str,
        path: str,
        revision: Callable[[], str] = lambda: "",
        cache: DecisionCache | None = None,
        max_age: float | None = None,
        path_view: PathView | None = None,
    ) -> None:
        if max_age is not None and not max_age >= 0:
            raise ValueError("max_age must be >= 0")
        self._decide = decide
        self._path_view = path_view
        self._max_age = max_age
        self._engine = engine
        self._path = path
        self._revision = revision
        self._cache = cache
        # Read without a lock (a lost store only costs a recomputation); cleared when full.
        self._digests: dict[tuple[ToolDefinition, bytes, bytes], str] = {}

    @property
    def cache(self) -> DecisionCache | None:
        """The decision cache, if any."""
        return self._cache

    @property
    def max_age(self) -> float | None:
        """The longest a decision is reused, if this authorizer limits it."""
        return self._max_age

    async def _evaluate(self, document: InputDocument) -> Decision:
        return read_answer(await self._decide(document), engine=self._engine)

    async def authorize(self, authorization: Authorization) -> Decision:
        """Decide on one authorization, through the cache when there is one."""
        context = current_caller()
        cache = self._cache
        # A decision on session state (counts, labels) is never cached (gateway.state).
        if cache is None or current_state_input() is not None:
            document = InputDocument(authorization, context, path_view=self._path_view)
            return await self._evaluate(document)
        definition, arguments = authorization.definition, authorization.arguments
        view = self._path_view
        memo: tuple[ToolDefinition, bytes, bytes] | None = None
        digest: str | None = None
        # Where a path view resolves the arguments, the facts (so the digest) may change
        # from one call to the next: never remembered.
        if len(arguments) <= _DIGEST_MEMO_MAX_BYTES and (
            view is None or not view.covers(definition.name)
        ):
            memo = (definition, arguments, context.json)
            digest = self._digests.get(memo)
        built: InputDocument | None = None
        if digest is None:
            built = InputDocument(authorization, context, path_view=view)
            digest = built.digest
            if memo is not None:
                if len(self._digests) >= _DIGEST_MEMO_ENTRIES:
                    self._digests.clear()
                self._digests[memo] = digest
        key: CacheKey = (self._engine, self._path, self._revision(), digest)
        hit = cache.get(key)
        if hit is not None:
            return hit
        document = (
            built if built is not None else InputDocument(authorization, context, path_view=view)
        )
        return await cache.get_or_evaluate(
            key, lambda: self._evaluate(document), max_age=self._max_age
        )
