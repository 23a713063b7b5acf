"""Session history, labels and quotas for the policy, on an in-process or a Redis backend.

The policy sees, for the tools configured to read state, ``input.state`` (version 1): the
caller's session (calls, labels, per-tool outcome counts, the last calls) and the counts of
allowed calls per scope in each fixed window. Its decision may attach ``labels`` to the
session and name ``quotas`` that the gateway reserves atomically before the call runs (see
``policies/README.md``, "Session state"). :class:`RecordStore` is the small key-value API
other stores (approvals) build on the same backends.
"""

from gateway.state._authorizer import (
    QUOTA_MESSAGE,
    SESSION_ID,
    STATE_VERSION,
    CallTracker,
    InvalidSessionError,
    StatefulAuthorizer,
    StateSettings,
    counter_ids,
    current_session,
    encode_state,
    session_context,
    state_document,
    track_call,
    valid_session_id,
)
from gateway.state._memory import MemoryStateStore, StateFullError
from gateway.state._redis import RedisStateStore
from gateway.state._store import (
    DEFAULT_HISTORY_MAX,
    DEFAULT_SESSION_TTL_S,
    DEFAULT_WINDOWS,
    RUNNING,
    SCOPES,
    HistoryEntry,
    RecordStore,
    Reservation,
    Reserved,
    SessionView,
    Snapshot,
    StateQuery,
    StateStore,
    StateUnavailableError,
)

__all__ = [
    "DEFAULT_HISTORY_MAX",
    "DEFAULT_SESSION_TTL_S",
    "DEFAULT_WINDOWS",
    "QUOTA_MESSAGE",
    "RUNNING",
    "SCOPES",
    "SESSION_ID",
    "STATE_VERSION",
    "CallTracker",
    "HistoryEntry",
    "InvalidSessionError",
    "MemoryStateStore",
    "RecordStore",
    "RedisStateStore",
    "Reservation",
    "Reserved",
    "SessionView",
    "Snapshot",
    "StateFullError",
    "StateQuery",
    "StateSettings",
    "StateStore",
    "StateUnavailableError",
    "StatefulAuthorizer",
    "counter_ids",
    "current_session",
    "encode_state",
    "session_context",
    "state_document",
    "track_call",
    "valid_session_id",
]
