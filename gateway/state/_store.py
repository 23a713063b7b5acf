"""What a state backend keeps and the one protocol every backend implements.

A backend keeps three things, all bounded and all expiring:

- **sessions**: per session key, the labels the policy attached (a set, with a version
  that changes only when a label is added), the number of calls, per tool the number of
  calls by outcome, and the last ``history_max`` calls (tool, labels, outcome);
- **counters**: per counter id and window (seconds), the number of allowed calls in the
  current fixed window (``floor(now / window)``, the backend's clock);
- **records**: opaque values under ``(namespace, key)`` with a time to live, for stores
  built on the same backend (approvals, for one).

Every write that decides something happens in one atomic step (:meth:`StateStore.reserve`):
the session version is compared, every quota checked and, only if all hold, every counter
incremented, the labels added and the history entry appended. A call is counted when it is
allowed, never when it is merely evaluated.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal, Protocol, runtime_checkable

from gateway._errors import NoDecisionError

#: The counter scopes a decision's quota may name, and what each counts.
SCOPES: Final = ("caller", "caller_tool", "tenant", "tenant_tool", "session", "session_tool")
#: The fixed windows counted when none are configured: a minute, an hour, a day.
DEFAULT_WINDOWS: Final = (60, 3600, 86400)
#: The calls kept per session when not configured otherwise.
DEFAULT_HISTORY_MAX: Final = 64
#: How long an idle session is kept when not configured otherwise (one day).
DEFAULT_SESSION_TTL_S: Final = 86400
#: The longest window (and record time to live) a backend accepts: 31 days.
MAX_WINDOW_S: Final = 31 * 86400
#: The outcome of a reserved call whose outcome has not been recorded (yet).
RUNNING: Final = "running"


class StateUnavailableError(NoDecisionError):
    """The state a decision needs could not be read or written (backend down, timeout).

    The call is not run. The message never names a key, a value or the backend's reply.
    """

    code = "state_unavailable"


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One allowed call of a session: its sequence number, tool, labels and outcome."""

    seq: int
    tool: str
    labels: tuple[str, ...]
    outcome: str = RUNNING


@dataclasses.dataclass(frozen=True, slots=True)
class SessionView:
    """A session as the policy sees it (every field a detached copy)."""

    version: int = 0
    calls: int = 0
    labels: tuple[str, ...] = ()
    tools: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    history: tuple[HistoryEntry, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class StateQuery:
    """What to read for one decision.

    Attributes:
        session: the session key (``None``: the call has no session).
        counters: counter id per scope, for the scopes this call has.
        windows: the windows to count, in seconds.
    """

    session: str | None
    counters: dict[str, str]
    windows: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """What was read: the session (``None`` without one) and ``counts[scope][window]``."""

    session: SessionView | None
    counts: dict[str, dict[int, int]]


@dataclasses.dataclass(frozen=True, slots=True)
class Reservation:
    """The atomic write of one allowed call.

    Attributes:
        session: the session key, or ``None``.
        expected_version: the session version the decision saw; ``None``: not checked
            (the decision did not read the session).
        tool: the tool's name.
        labels: the labels to attach to the session.
        counters: counter id per scope; each is incremented in every window of ``windows``.
        windows: the windows counted.
        limits: ``(scope, window_s, limit)``: the counter must be below ``limit`` before
            this call (so at most ``limit`` calls are counted per window).
        history_max: the calls kept per session.
        session_ttl_s: how long the session is kept after this call.
    """

    session: str | None
    expected_version: int | None
    tool: str
    labels: tuple[str, ...]
    counters: dict[str, str]
    windows: tuple[int, ...]
    limits: tuple[tuple[str, int, int], ...]
    history_max: int = DEFAULT_HISTORY_MAX
    session_ttl_s: int = DEFAULT_SESSION_TTL_S


@dataclasses.dataclass(frozen=True, slots=True)
class Reserved:
    """The answer to a reservation.

    Attributes:
        status: ``ok`` (everything written), ``conflict`` (the session's labels changed
            since the decision read them; nothing written) or ``quota`` (a limit was
            reached; nothing written).
        seq: the history entry's sequence number (``ok`` with a session), else 0.
        limit: the quota that was reached (``quota``).
    """

    status: Literal["ok", "conflict", "quota"]
    seq: int = 0
    limit: tuple[str, int, int] | None = None


@runtime_checkable
class RecordStore(Protocol):
    """Opaque records with a time to live, for stores built on a state backend.

    ``namespace`` and ``key`` are text chosen by the caller (an approval id, say); values
    are bytes. Every operation is atomic on its own.

    Raises:
        StateUnavailableError: the backend could not be read or written.
    """

    async def put_record(self, namespace: str, key: str, value: bytes, ttl_s: float) -> None:
        """Store ``value`` under ``(namespace, key)`` for ``ttl_s`` seconds (replacing)."""
        ...

    async def add_record(self, namespace: str, key: str, value: bytes, ttl_s: float) -> bool:
        """Store ``value`` only if no live record has this key; report whether it did."""
        ...

    async def get_record(self, namespace: str, key: str) -> bytes | None:
        """The live record, or ``None``."""
        ...

    async def take_record(self, namespace: str, key: str) -> bytes | None:
        """Remove the live record and return it (at most one caller gets it), or ``None``."""
        ...

    async def delete_record(self, namespace: str, key: str) -> bool:
        """Remove the record; report whether a live one was there."""
        ...


@runtime_checkable
class StateStore(RecordStore, Protocol):
    """A state backend: sessions, counters and records (see the module documentation).

    Raises:
        StateUnavailableError: from every method, when the backend could not be read or
            written in time. Nothing else escapes (cancellation propagates).
    """

    @property
    def name(self) -> str:
        """``memory`` or ``redis``: for metrics and the audit trail."""
        ...

    async def read(self, query: StateQuery) -> Snapshot:
        """The session and the counts, read together."""
        ...

    async def reserve(self, reservation: Reservation) -> Reserved:
        """Check and write one allowed call atomically (all of it or nothing)."""
        ...

    async def record_outcome(self, session: str, seq: int, tool: str, outcome: str) -> None:
        """Record how a reserved call ended (its history entry and the tool's counts)."""
        ...

    async def close(self) -> None:
        """Release connections; the store is not used afterwards."""
        ...


def check_record_ttl(ttl_s: float) -> int:
    """``ttl_s`` as whole milliseconds, refused unless in (0, 31 days].

    Raises:
        ValueError: out of range or not a number.
    """
    if (
        isinstance(ttl_s, bool)
        or not isinstance(ttl_s, int | float)
        or not 0 < ttl_s <= MAX_WINDOW_S
    ):
        raise ValueError("a record's ttl_s must be a number in (0, 31 days]")
    return max(1, round(ttl_s * 1000))
