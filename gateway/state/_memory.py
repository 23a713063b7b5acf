"""The in-process state backend (the default): one process, no server, an injectable clock.

Everything it keeps is bounded, and nothing a decision depends on is dropped while it still
counts: a session is dropped once it has been idle for its time to live, a counter once its
window has closed, a record once its time to live has passed, as the Redis backend's keys
expire. A store full of live state refuses what would need room (a new session, counter or
record) with :class:`StateFullError` and writes nothing; the call fails closed
(``state_unavailable``). Evicting the least recently used instead would let a caller who
floods fresh session ids wipe another session's labels (an egress refusal forgotten) or
reset a quota; so would letting a caller evict its own oldest sessions.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import threading
import time
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from gateway.state._store import (
    RUNNING,
    HistoryEntry,
    Reservation,
    Reserved,
    SessionView,
    Snapshot,
    StateQuery,
    StateUnavailableError,
    check_record_ttl,
)

#: Live sessions kept at most (a new session is refused when they are all live).
DEFAULT_MAX_SESSIONS: Final = 100_000
#: Live counters and live records kept at most, each (a new one is refused when full).
DEFAULT_MAX_ENTRIES: Final = 1_000_000
#: Expiry-queue entries kept beyond the live entries before the queue is rebuilt.
_QUEUE_SLACK: Final = 1024
#: Expired entries dropped per queue by one write, when the store is not short of room
#: (more would stall the write after a window boundary; an expired entry harms nobody).
_EXPIRY_STEP: Final = 256


_K = TypeVar("_K")


def _expire(
    queue: list[tuple[float, _K]],
    now: float,
    most: int | None,
    expiry: Callable[[_K], float | None],
    drop: Callable[[_K], None],
) -> None:
    # Drops the entries due by `now` (and only those: an entry renewed since it was queued
    # has a later time queued too), popping at most `most` queue items; each item is popped
    # once, so the cost is amortised O(log n) per write.
    while queue and queue[0][0] <= now and (most is None or most > 0):
        _, key = heapq.heappop(queue)
        due = expiry(key)
        if due is not None and due <= now:
            drop(key)
        most = None if most is None else most - 1


def _rebuilt(
    queue: list[tuple[float, _K]],
    entries: Mapping[_K, object],
    expiry: Callable[[_K], float | None],
) -> list[tuple[float, _K]]:
    # The queue, rebuilt from the live entries when it holds many stale times (an entry
    # renewed again and again).
    if len(queue) <= 2 * len(entries) + _QUEUE_SLACK:
        return queue
    fresh = [(due, key) for key in entries if (due := expiry(key)) is not None]
    heapq.heapify(fresh)
    return fresh


class StateFullError(StateUnavailableError):
    """The in-process store holds as much live state as it may: the new state is refused.

    A :class:`StateUnavailableError` (the call fails closed, ``state_unavailable``): what
    the store already holds is kept; the reservation or record that needed room wrote
    nothing.
    """


@dataclasses.dataclass(slots=True)
class _Entry:
    seq: int
    tool: str
    labels: tuple[str, ...]
    outcome: str = RUNNING


@dataclasses.dataclass(slots=True)
class _Session:
    expires: float
    owner: str | None = None
    version: int = 0
    calls: int = 0
    seq: int = 0
    labels: set[str] = dataclasses.field(default_factory=set)
    tools: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    history: collections.deque[_Entry] = dataclasses.field(default_factory=collections.deque)


class MemoryStateStore:
    """Sessions, counters and records in this process, behind one lock.

    Every operation holds the lock for its whole read-check-write, so a reservation is
    atomic against every other thread and task of the process. Several processes (or
    replicas) need the Redis backend.

    Nothing live is ever evicted to make room (see the module documentation): at a limit,
    what is expired is dropped and, if that frees no room, the new session, counter or
    record is refused with :class:`StateFullError`.

    Args:
        clock: seconds since the epoch (``time.time``); windows are ``floor(now / window)``.
        max_sessions: live sessions kept at most.
        max_entries: live counters kept at most, and live records kept at most.
        max_sessions_per_caller: live sessions one caller may hold at most (``None``: no
            bound but ``max_sessions``). The caller is the reservation's ``caller`` counter
            id, derived from its tenant and subject; a reservation without one is bounded by
            ``max_sessions`` only. A caller at its bound gets no new session until one of
            its sessions expires, so that one caller cannot fill the store for the others.
    """

    name = "memory"

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_sessions_per_caller: int | None = None,
    ) -> None:
        if max_sessions < 1 or max_entries < 1:
            raise ValueError("max_sessions and max_entries must be at least 1")
        if max_sessions_per_caller is not None and max_sessions_per_caller < 1:
            raise ValueError("max_sessions_per_caller must be at least 1")
        self._clock = clock
        self._lock = threading.Lock()
        self._max_sessions = max_sessions
        self._max_entries = max_entries
        self._max_per_caller = max_sessions_per_caller
        self._sessions: dict[str, _Session] = {}
        # live sessions per caller (only callers with one)
        self._owned: collections.Counter[str] = collections.Counter()
        # (counter id, window) -> (window index, count)
        self._counters: dict[tuple[str, int], tuple[int, int]] = {}
        self._records: dict[tuple[str, str], tuple[bytes, float]] = {}
        # When each entry may have expired, soonest first: (time, key). An entry's time is
        # pushed whenever it moves later; the stale ones are skipped when popped.
        self._session_queue: list[tuple[float, str]] = []
        self._counter_queue: list[tuple[float, tuple[str, int]]] = []
        self._record_queue: list[tuple[float, tuple[str, str]]] = []

    # expiry

    def _drop_session(self, key: str) -> None:
        session = self._sessions.pop(key)
        if session.owner is not None:
            self._owned[session.owner] -= 1
            if self._owned[session.owner] <= 0:
                del self._owned[session.owner]

    def _session_expiry(self, key: str) -> float | None:
        session = self._sessions.get(key)
        return None if session is None else session.expires

    def _counter_expiry(self, key: tuple[str, int]) -> float | None:
        # A counter lives until its window closes.
        entry = self._counters.get(key)
        return None if entry is None else (entry[0] + 1) * key[1]

    def _record_expiry(self, key: tuple[str, str]) -> float | None:
        record = self._records.get(key)
        return None if record is None else record[1]

    def _drop_counter(self, key: tuple[str, int]) -> None:
        del self._counters[key]

    def _drop_record(self, key: tuple[str, str]) -> None:
        del self._records[key]

    def _expire_sessions(self, now: float, most: int | None) -> None:
        _expire(self._session_queue, now, most, self._session_expiry, self._drop_session)

    def _expire_counters(self, now: float, most: int | None) -> None:
        _expire(self._counter_queue, now, most, self._counter_expiry, self._drop_counter)

    def _expire_records(self, now: float, most: int | None) -> None:
        _expire(self._record_queue, now, most, self._record_expiry, self._drop_record)

    def _compact(self) -> None:
        self._session_queue = _rebuilt(self._session_queue, self._sessions, self._session_expiry)
        self._counter_queue = _rebuilt(self._counter_queue, self._counters, self._counter_expiry)
        self._record_queue = _rebuilt(self._record_queue, self._records, self._record_expiry)

    # sessions and counters

    def _session(self, key: str, now: float) -> _Session | None:
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires <= now:
            self._drop_session(key)
            return None
        return session

    def _count(self, counter: str, window: int, now: float) -> int:
        entry = self._counters.get((counter, window))
        if entry is None or entry[0] != int(now // window):
            return 0
        return entry[1]

    async def read(self, query: StateQuery) -> Snapshot:
        """The session and the counts, read under the lock."""
        with self._lock:
            now = self._clock()
            view: SessionView | None = None
            if query.session is not None:
                session = self._session(query.session, now)
                view = _view(session) if session is not None else SessionView()
            counts = {
                scope: {window: self._count(counter, window, now) for window in query.windows}
                for scope, counter in query.counters.items()
            }
        return Snapshot(view, counts)

    def _fresh_counters(self, reservation: Reservation) -> int:
        keys = {
            (counter, window)
            for counter in reservation.counters.values()
            for window in reservation.windows
        }
        return sum(key not in self._counters for key in keys)

    def _make_room(self, reservation: Reservation, creates_session: bool, now: float) -> None:
        # Refuses (before anything is written) a reservation that needs more room than the
        # live state leaves, once everything expired is dropped.
        if len(self._counters) + self._fresh_counters(reservation) > self._max_entries:
            self._expire_counters(now, None)
            if len(self._counters) + self._fresh_counters(reservation) > self._max_entries:
                raise StateFullError("the quota state is full: no new counter can be kept")
        if not creates_session:
            return
        if len(self._sessions) >= self._max_sessions:
            self._expire_sessions(now, None)
            if len(self._sessions) >= self._max_sessions:
                raise StateFullError("the session state is full: no new session can be kept")
        owner = reservation.counters.get("caller")
        if self._max_per_caller is None or owner is None:
            return
        if self._owned[owner] >= self._max_per_caller:
            self._expire_sessions(now, None)
            if self._owned[owner] >= self._max_per_caller:
                raise StateFullError("the caller holds as many sessions as it may")

    def _increment(self, reservation: Reservation, now: float) -> None:
        for counter in reservation.counters.values():
            for window in reservation.windows:
                index = int(now // window)
                key = (counter, window)
                entry = self._counters.get(key)
                if entry is not None and entry[0] == index:
                    self._counters[key] = (index, entry[1] + 1)
                else:
                    self._counters[key] = (index, 1)
                    heapq.heappush(self._counter_queue, ((index + 1) * window, key))

    def _new_session(self, key: str, reservation: Reservation, now: float) -> _Session:
        owner = reservation.counters.get("caller")
        session = _Session(expires=now, owner=owner)
        self._sessions[key] = session
        if owner is not None:
            self._owned[owner] += 1
        return session

    async def reserve(self, reservation: Reservation) -> Reserved:
        """Compare the version, check every limit and the room, then write (one lock hold).

        Raises:
            StateFullError: the reservation needs a new session or counter and the store
                is full of live ones (nothing is written).
        """
        with self._lock:
            now = self._clock()
            self._expire_sessions(now, _EXPIRY_STEP)
            self._expire_counters(now, _EXPIRY_STEP)
            session = (
                self._session(reservation.session, now) if reservation.session is not None else None
            )
            if reservation.expected_version is not None and reservation.session is not None:
                seen = session.version if session is not None else 0
                if seen != reservation.expected_version:
                    return Reserved("conflict")
            for limit in reservation.limits:
                scope, window, most = limit
                counter = reservation.counters[scope]
                if self._count(counter, window, now) >= most:
                    return Reserved("quota", limit=limit)
            self._make_room(reservation, reservation.session is not None and session is None, now)
            self._increment(reservation, now)
            if reservation.session is None:
                self._compact()
                return Reserved("ok")
            if session is None:
                session = self._new_session(reservation.session, reservation, now)
            fresh = set(reservation.labels) - session.labels
            if fresh:
                session.labels |= fresh
                session.version += 1
            session.seq += 1
            session.calls += 1
            counts = session.tools.setdefault(reservation.tool, {})
            counts["allowed"] = counts.get("allowed", 0) + 1
            session.history.append(
                _Entry(session.seq, reservation.tool, tuple(sorted(set(reservation.labels))))
            )
            while len(session.history) > reservation.history_max:
                session.history.popleft()
            session.expires = now + reservation.session_ttl_s
            heapq.heappush(self._session_queue, (session.expires, reservation.session))
            self._compact()
            return Reserved("ok", seq=session.seq)

    async def record_outcome(self, session: str, seq: int, tool: str, outcome: str) -> None:
        """Set the history entry's outcome and count it for the tool."""
        with self._lock:
            found = self._session(session, self._clock())
            if found is None:
                return
            counts = found.tools.setdefault(tool, {})
            counts[outcome] = counts.get(outcome, 0) + 1
            for entry in found.history:
                if entry.seq == seq:
                    entry.outcome = outcome
                    break

    # records

    def _live(self, key: tuple[str, str], now: float) -> bytes | None:
        entry = self._records.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._records[key]
            return None
        return entry[0]

    def _store(self, key: tuple[str, str], value: bytes, ttl_s: float, now: float) -> None:
        self._expire_records(now, _EXPIRY_STEP)
        if key not in self._records and len(self._records) >= self._max_entries:
            self._expire_records(now, None)
            if key not in self._records and len(self._records) >= self._max_entries:
                raise StateFullError("the record state is full: no new record can be kept")
        expires = now + check_record_ttl(ttl_s) / 1000
        self._records[key] = (bytes(value), expires)
        heapq.heappush(self._record_queue, (expires, key))
        self._compact()

    async def put_record(self, namespace: str, key: str, value: bytes, ttl_s: float) -> None:
        """Store ``value`` for ``ttl_s`` seconds (replacing).

        Raises:
            StateFullError: the key is new and the store is full of live records.
        """
        check_record_ttl(ttl_s)
        with self._lock:
            self._store((namespace, key), value, ttl_s, self._clock())

    async def add_record(self, namespace: str, key: str, value: bytes, ttl_s: float) -> bool:
        """Store ``value`` only if no live record has this key.

        Raises:
            StateFullError: the key is new and the store is full of live records.
        """
        check_record_ttl(ttl_s)
        with self._lock:
            now = self._clock()
            if self._live((namespace, key), now) is not None:
                return False
            self._store((namespace, key), value, ttl_s, now)
            return True

    async def get_record(self, namespace: str, key: str) -> bytes | None:
        """The live record, or ``None``."""
        with self._lock:
            return self._live((namespace, key), self._clock())

    async def take_record(self, namespace: str, key: str) -> bytes | None:
        """Remove and return the live record."""
        with self._lock:
            value = self._live((namespace, key), self._clock())
            if value is not None:
                del self._records[(namespace, key)]
            return value

    async def delete_record(self, namespace: str, key: str) -> bool:
        """Remove the record; report whether a live one was there."""
        with self._lock:
            value = self._live((namespace, key), self._clock())
            self._records.pop((namespace, key), None)
            return value is not None

    async def close(self) -> None:
        """Nothing to release."""


def _view(session: _Session) -> SessionView:
    return SessionView(
        version=session.version,
        calls=session.calls,
        labels=tuple(sorted(session.labels)),
        tools={tool: dict(counts) for tool, counts in session.tools.items()},
        history=tuple(HistoryEntry(e.seq, e.tool, e.labels, e.outcome) for e in session.history),
    )
