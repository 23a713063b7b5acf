"""Session history, labels and quotas around any authorizer (the state contract, version 1).

:class:`StatefulAuthorizer` wraps an authorizer (the policy). For a tool whose decisions
read state it reads the caller's session and counters, gives them to the policy as
``input.state`` (never cached), and when the decision allows, reserves the call atomically:
the session must be as the policy saw it (else the call is decided again), every quota the
decision names must still have room (else decided again, then refused), and only then are
the counters incremented, the decision's labels attached and the history entry appended.
A decision that carries labels or quotas is reserved the same way for any tool. When state
cannot be read or written the call fails closed (``state_unavailable``); a call that reads
no state and whose decision carries neither labels nor quotas never touches the store.

The session comes from the surface (:func:`session_context`: the HTTP header bound to the
authenticated caller, the MCP session), never from the model's arguments, and is keyed by
the caller's tenant and subject, so one caller's session id names nothing of another's.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Iterator
from typing import Any, Final

from gateway._authorization import Authorization, Authorizer, Decision, read_answer
from gateway._errors import MalformedDecisionError
from gateway.policy._context import CallerContext, current_caller
from gateway.policy._document import state_input
from gateway.state._store import (
    DEFAULT_HISTORY_MAX,
    DEFAULT_SESSION_TTL_S,
    DEFAULT_WINDOWS,
    MAX_WINDOW_S,
    Reservation,
    Reserved,
    Snapshot,
    StateQuery,
    StateStore,
    StateUnavailableError,
)

_LOG: Final = logging.getLogger("gateway.state")
#: The version of ``input.state``.
STATE_VERSION: Final = 1
#: A session id: 1-256 visible ASCII characters (what MCP allows in ``Mcp-Session-Id``).
SESSION_ID: Final = re.compile(r"[\x21-\x7e]{1,256}")
#: The public message of a call refused because a quota ran out when it was reserved.
QUOTA_MESSAGE: Final = "the quota for this call is used up"
#: How often one call is decided again when the state changed under its decision.
DEFAULT_ATTEMPTS: Final = 3

_SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gateway_session", default=None
)


class InvalidSessionError(ValueError):
    """A session id that is not 1-256 visible ASCII characters."""


def valid_session_id(session: object) -> bool:
    """Whether ``session`` is a session id the gateway accepts."""
    return isinstance(session, str) and SESSION_ID.fullmatch(session) is not None


@contextlib.contextmanager
def session_context(session: str | None) -> Iterator[None]:
    """Make ``session`` the session of the calls in this block (``None``: no session).

    Raises:
        InvalidSessionError: ``session`` is not a valid session id.
    """
    if session is not None and not valid_session_id(session):
        raise InvalidSessionError("a session id is 1-256 visible ASCII characters")
    token = _SESSION.set(session)
    try:
        yield
    finally:
        _SESSION.reset(token)


def current_session() -> str | None:
    """The session of the call in progress, if any."""
    return _SESSION.get()


@dataclasses.dataclass(frozen=True, slots=True)
class StateSettings:
    """How the state is kept and which tools' decisions read it.

    Attributes:
        tools: the tools whose decisions read state (``input.state``); ``"*"`` in it means
            every tool.
        windows: the fixed windows counted, in seconds; a quota must name one of them.
        history_max: the calls kept per session.
        session_ttl_s: how long a session is kept after its last call.
        attempts: how often one call is decided again when the state changed under it.
    """

    tools: frozenset[str] = frozenset()
    windows: tuple[int, ...] = DEFAULT_WINDOWS
    history_max: int = DEFAULT_HISTORY_MAX
    session_ttl_s: int = DEFAULT_SESSION_TTL_S
    attempts: int = DEFAULT_ATTEMPTS

    def __post_init__(self) -> None:
        if not self.windows or any(
            type(w) is not int or not 0 < w <= MAX_WINDOW_S for w in self.windows
        ):
            raise ValueError("windows must be whole seconds in (0, 31 days]")
        if len(set(self.windows)) != len(self.windows):
            raise ValueError("windows must not repeat")
        if not 1 <= self.history_max <= 10_000:
            raise ValueError("history_max must be in [1, 10000]")
        if not 1 <= self.session_ttl_s <= MAX_WINDOW_S:
            raise ValueError("session_ttl_s must be in [1 s, 31 days]")
        if not 1 <= self.attempts <= 10:
            raise ValueError("attempts must be in [1, 10]")

    def reads(self, tool: str) -> bool:
        """Whether the decisions on ``tool`` read state."""
        return "*" in self.tools or tool in self.tools


class CallTracker:
    """The reservation of the call in progress, so its outcome can be recorded after it ran."""

    __slots__ = ("_history_max", "_seq", "_session", "_store", "_tool")

    def __init__(self) -> None:
        self._store: StateStore | None = None
        self._session: str | None = None
        self._seq = 0
        self._tool = ""

    def _reserved(self, store: StateStore, session: str, seq: int, tool: str) -> None:
        self._store, self._session, self._seq, self._tool = store, session, seq, tool

    @property
    def reserved(self) -> bool:
        """Whether the call was reserved in a session (its outcome is worth recording)."""
        return self._store is not None

    async def finish(self, outcome: str) -> None:
        """Record the call's outcome (``ok``, ``tool_failed``, ...); a failure is only logged.

        The history entry itself was written with the reservation, before the call ran.
        """
        if self._store is None or self._session is None:
            return
        try:
            await self._store.record_outcome(self._session, self._seq, self._tool, outcome)
        except StateUnavailableError:
            _LOG.warning("state: the outcome of a call could not be recorded")


_TRACKER: contextvars.ContextVar[CallTracker | None] = contextvars.ContextVar(
    "gateway_call_tracker", default=None
)


@contextlib.contextmanager
def track_call() -> Iterator[CallTracker]:
    """A tracker for the one call decided in this block (the pipeline records its outcome)."""
    tracker = CallTracker()
    token = _TRACKER.set(tracker)
    try:
        yield tracker
    finally:
        _TRACKER.reset(token)


def _key(*parts: str) -> str:
    # Each part length-prefixed, so that no two part lists share an encoding.
    encoded = "".join(f"{len(part)}:{part}" for part in parts).encode("utf-8", "surrogatepass")
    return hashlib.sha256(encoded).hexdigest()[:40]


def encode_state(document: dict[str, Any]) -> bytes:
    """``input.state`` as canonical JSON (sorted keys, compact), as the document splices it.

    Its strings are the gateway's own (tool names, labels, outcome codes: ASCII by
    construction), so the standard encoder's output is the canonical form, at a fraction
    of the strict encoder's cost on a long history.
    """
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def _identity(caller: CallerContext) -> tuple[str | None, str | None]:
    values = caller.as_dict()
    subject, tenant = values.get("subject"), values.get("tenant")
    return (
        subject if isinstance(subject, str) and subject.strip() else None,
        tenant if isinstance(tenant, str) and tenant.strip() else None,
    )


def counter_ids(
    caller: CallerContext, session: str | None, tool: str
) -> tuple[str | None, dict[str, str]]:
    """The session key and the counter id of every scope this call has.

    ``caller*`` scopes need a subject, ``tenant*`` scopes a tenant, and a session needs a
    subject: it is bound to the caller's tenant and subject.
    """
    subject, tenant = _identity(caller)
    counters: dict[str, str] = {}
    session_key: str | None = None
    if subject is not None:
        counters["caller"] = _key("caller", tenant or "", subject)
        counters["caller_tool"] = _key("caller_tool", tenant or "", subject, tool)
        if session is not None:
            session_key = _key("session", tenant or "", subject, session)
            counters["session"] = session_key
            counters["session_tool"] = _key("session_tool", session_key, tool)
    if tenant is not None:
        counters["tenant"] = _key("tenant", tenant)
        counters["tenant_tool"] = _key("tenant_tool", tenant, tool)
    return session_key, counters


def state_document(snapshot: Snapshot) -> dict[str, Any]:
    """``input.state`` (version 1) for a snapshot."""
    session: dict[str, Any] | None = None
    if snapshot.session is not None:
        view = snapshot.session
        session = {
            "calls": view.calls,
            "labels": list(view.labels),
            "tools": {tool: dict(counts) for tool, counts in view.tools.items()},
            "history": [
                {"tool": e.tool, "labels": list(e.labels), "outcome": e.outcome}
                for e in view.history
            ],
        }
    return {
        "version": STATE_VERSION,
        "session": session,
        "counts": {
            scope: {str(window): count for window, count in by_window.items()}
            for scope, by_window in snapshot.counts.items()
        },
    }


class StatefulAuthorizer:
    """An authorizer that gives the policy session state and reserves allowed calls.

    Args:
        inner: the policy (any :class:`gateway.Authorizer`).
        store: the state backend.
        settings: which tools read state, the windows counted, the history bound.
    """

    __slots__ = ("_inner", "_settings", "_store")

    def __init__(
        self, inner: Authorizer, store: StateStore, *, settings: StateSettings | None = None
    ) -> None:
        self._inner = inner
        self._store = store
        self._settings = settings if settings is not None else StateSettings()

    @property
    def store(self) -> StateStore:
        """The state backend."""
        return self._store

    @property
    def settings(self) -> StateSettings:
        """The settings in force."""
        return self._settings

    async def authorize(self, authorization: Authorization) -> Decision:
        """Read state (when the tool reads it), decide, and reserve an allowed call.

        Raises:
            StateUnavailableError: state could not be read or written, or it kept changing
                under the decision.
            MalformedDecisionError: a quota names a window not counted, or a scope this
                call does not have (no subject, tenant or session).
        """
        tool = authorization.definition.name
        settings = self._settings
        reads = settings.reads(tool)
        prior: Decision | None = None
        if not reads:
            # A call that reads no state costs the store nothing unless its decision
            # attaches labels or names quotas (the common case: one decision, no keys).
            prior = read_answer(await self._inner.authorize(authorization))
            if prior.allowed is not True or not (prior.labels or prior.quotas):
                return prior
        session_key, counters = counter_ids(current_caller(), _SESSION.get(), tool)
        refused: Decision | None = None
        for _attempt in range(settings.attempts):
            version: int | None = None
            if prior is not None:
                decision, prior = prior, None
            else:
                decision, version = await self._decide(authorization, reads, session_key, counters)
            if decision.allowed is not True or not (reads or decision.labels or decision.quotas):
                return decision
            reserved = await self._reserve(decision, tool, session_key, counters, version)
            if reserved.status == "ok":
                tracker = _TRACKER.get()
                if tracker is not None and session_key is not None:
                    tracker._reserved(self._store, session_key, reserved.seq, tool)  # noqa: SLF001
                return decision
            if reserved.status == "quota" and reserved.limit is not None:
                scope, window, limit = reserved.limit
                refused = dataclasses.replace(
                    decision,
                    allowed=False,
                    message=QUOTA_MESSAGE,
                    reasons=(
                        *decision.reasons,
                        f"state: quota {scope}/{window}s of {limit} reached when reserving",
                    ),
                    labels=(),
                    quotas=(),
                )
            else:
                refused = None
            # The state changed between the read and the reservation: decide again.
            await asyncio.sleep(0)
        if refused is not None:
            return refused
        raise StateUnavailableError("the session changed under every attempt to decide")

    async def _decide(
        self,
        authorization: Authorization,
        reads: bool,
        session_key: str | None,
        counters: dict[str, str],
    ) -> tuple[Decision, int | None]:
        # The policy's decision, on input.state when the tool reads it, and the session
        # version it saw (None: it saw none).
        if not reads:
            return read_answer(await self._inner.authorize(authorization)), None
        snapshot = await self._store.read(StateQuery(session_key, counters, self._settings.windows))
        version = snapshot.session.version if snapshot.session is not None else None
        with state_input(encode_state(state_document(snapshot))):
            answer = await self._inner.authorize(authorization)
        return read_answer(answer), version

    async def _reserve(
        self,
        decision: Decision,
        tool: str,
        session_key: str | None,
        counters: dict[str, str],
        version: int | None,
    ) -> Reserved:
        # The atomic check-and-write of an allowed call (its quotas must be countable).
        settings = self._settings
        for scope, window, _limit in decision.quotas:
            if scope not in counters or window not in settings.windows:
                raise MalformedDecisionError(
                    "decision.quotas names a scope this call lacks or a window not counted"
                )
        return await self._store.reserve(
            Reservation(
                session=session_key,
                expected_version=version,
                tool=tool,
                labels=decision.labels,
                counters=counters,
                windows=settings.windows,
                limits=decision.quotas,
                history_max=settings.history_max,
                session_ttl_s=settings.session_ttl_s,
            )
        )
