"""The in-process state backend (the default): one process, no server, an injectable clock."""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Final

from gateway.state._store import (
    RUNNING,
    HistoryEntry,
    Reservation,
    Reserved,
    SessionView,
    Snapshot,
    StateQuery,
    check_record_ttl,
)

#: Sessions kept at most (the least recently used go first).
DEFAULT_MAX_SESSIONS: Final = 100_000
#: Counters and records kept at most, each (the oldest go first).
DEFAULT_MAX_ENTRIES: Final = 1_000_000


@dataclasses.dataclass(slots=True)
class _Entry:
    seq: int
    tool: str
    labels: tuple[str, ...]
    outcome: str = RUNNING


@dataclasses.dataclass(slots=True)
class _Session:
    expires: float
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

    Args:
        clock: seconds since the epoch (``time.time``); windows are ``floor(now / window)``.
        max_sessions: sessions kept at most; the least recently used are dropped first.
        max_entries: counters kept at most, and records kept at most.
    """

    name = "memory"

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._max_sessions = max_sessions
        self._max_entries = max_entries
        self._sessions: collections.OrderedDict[str, _Session] = collections.OrderedDict()
        # (counter id, window) -> (window index, count)
        self._counters: collections.OrderedDict[tuple[str, int], tuple[int, int]] = (
            collections.OrderedDict()
        )
        self._records: collections.OrderedDict[tuple[str, str], tuple[bytes, float]] = (
            collections.OrderedDict()
        )

    # sessions and counters

    def _session(self, key: str, now: float) -> _Session | None:
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires <= now:
            del self._sessions[key]
            return None
        self._sessions.move_to_end(key)
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

    async def reserve(self, reservation: Reservation) -> Reserved:
        """Compare the version, check every limit, then write everything (one lock hold)."""
        with self._lock:
            now = self._clock()
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
            for counter in reservation.counters.values():
                for window in reservation.windows:
                    index = int(now // window)
                    key = (counter, window)
                    entry = self._counters.get(key)
                    count = entry[1] if entry is not None and entry[0] == index else 0
                    self._counters[key] = (index, count + 1)
                    self._counters.move_to_end(key)
            while len(self._counters) > self._max_entries:
                self._counters.popitem(last=False)
            if reservation.session is None:
                return Reserved("ok")
            if session is None:
                session = _Session(expires=now)
                self._sessions[reservation.session] = session
                while len(self._sessions) > self._max_sessions:
                    self._sessions.popitem(last=False)
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
        self._records[key] = (bytes(value), now + check_record_ttl(ttl_s) / 1000)
        self._records.move_to_end(key)
        while len(self._records) > self._max_entries:
            self._records.popitem(last=False)

    async def put_record(self, namespace: str, key: str, value: bytes, ttl_s: float) -> None:
        """Store ``value`` for ``ttl_s`` seconds (replacing)."""
        check_record_ttl(ttl_s)
        with self._lock:
            self._store((namespace, key), value, ttl_s, self._clock())

    async def add_record(self, namespace: str, key: str, value: bytes, ttl_s: float) -> bool:
        """Store ``value`` only if no live record has this key."""
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
