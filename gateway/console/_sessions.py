"""Console sessions: a random id in a cookie, everything else on the server.

A session is made only by a successful sign-in. Its id (32 random bytes) is the only thing
the browser holds; the server keeps the SHA-256 of the id, never the id itself, so a memory
or log dump holds no usable cookie. A session ends when it has been idle longer than the idle
timeout, when it reaches its absolute age (or its bearer token expires), on sign-out, and
when ``max_sessions`` is reached and a newer one signs in (the oldest ends).
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from gateway.policy import CallerContext

APPROVER: Final = "approver"
AUDITOR: Final = "auditor"
ROLES: Final = frozenset({APPROVER, AUDITOR})


def _hashed(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(slots=True)
class Session:
    """One signed-in person.

    Attributes:
        context: the caller context their credential stands for.
        principal: the credential's opaque fingerprint.
        role: ``approver`` or ``auditor``.
        csrf: the synchronizer token every state-changing form must carry.
        created_at: when they signed in (the session's clock).
        last_seen: their last request.
        ends_at: the absolute end (sign-in plus the maximum age, or the token's expiry).
    """

    context: CallerContext
    principal: str
    role: str
    csrf: str
    created_at: float
    last_seen: float
    ends_at: float
    key: str = field(default="", repr=False)

    @property
    def subject(self) -> str:
        """The signed-in subject (shown on every page)."""
        subject = self.context.get("subject")
        return subject if isinstance(subject, str) else ""

    @property
    def may_decide(self) -> bool:
        """Whether this session may approve and reject."""
        return self.role == APPROVER

    def csrf_ok(self, presented: object) -> bool:
        """Whether ``presented`` is this session's synchronizer token (constant time)."""
        if not isinstance(presented, str) or not presented:
            return False
        return hmac.compare_digest(presented.encode(), self.csrf.encode())


class SessionStore:
    """The live console sessions of this process (bounded, clock injected).

    Args:
        idle_timeout_s: a session unused this long ends.
        max_age_s: a session ends this long after sign-in.
        max_sessions: the most sessions kept; the oldest ends when one more is made.
        clock: seconds (monotonic is fine; only differences are used).
        new_id: makes session ids and CSRF tokens.
    """

    def __init__(
        self,
        *,
        idle_timeout_s: float,
        max_age_s: float,
        max_sessions: int,
        clock: Callable[[], float],
        new_id: Callable[[], str] = lambda: secrets.token_urlsafe(32),
    ) -> None:
        if not 0 < idle_timeout_s <= max_age_s:
            raise ValueError("idle_timeout_s must be positive and at most max_age_s")
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self._idle = idle_timeout_s
        self._max_age = max_age_s
        self._max = max_sessions
        self._clock = clock
        self._new_id = new_id
        self._items: collections.OrderedDict[str, Session] = collections.OrderedDict()
        self._lock = threading.Lock()

    @property
    def clock(self) -> Callable[[], float]:
        """The sessions' clock."""
        return self._clock

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def create(
        self,
        context: CallerContext,
        principal: str,
        role: str,
        *,
        expires_in_s: float | None = None,
    ) -> tuple[str, Session]:
        """A new session and its id (for the cookie). ``expires_in_s``: the credential's end."""
        if role not in ROLES:
            raise ValueError("unknown console role")
        now = self._clock()
        ends = now + self._max_age
        if expires_in_s is not None:
            ends = min(ends, now + max(0.0, expires_in_s))
        session_id = self._new_id()
        key = _hashed(session_id)
        session = Session(context, principal, role, self._new_id(), now, now, ends, key)
        with self._lock:
            self._items[key] = session
            while len(self._items) > self._max:
                self._items.popitem(last=False)
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of this id, touched; ``None`` (and it ends) once it has expired."""
        if not session_id or len(session_id) > 128:
            return None
        key = _hashed(session_id)
        now = self._clock()
        with self._lock:
            session = self._items.get(key)
            if session is None:
                return None
            if now >= session.ends_at or now - session.last_seen >= self._idle:
                del self._items[key]
                return None
            session.last_seen = now
            return session

    def end(self, session: Session) -> None:
        """Sign out: the session ends now."""
        with self._lock:
            self._items.pop(session.key, None)
