"""Safe policy change: replay capture, replay of recorded decisions, shadow evaluation.

- :class:`ReplayCapture` keeps each decision's full policy input, encrypted (AES-256-GCM,
  keys by id in a :class:`KeyRing`), apart from the audit trail and linked to it by
  decision id. Off unless configured; see ``policies/README.md`` ("Replay and shadow
  evaluation") for what it stores and the risk of storing it.
- :func:`replay` re-evaluates a trail's recorded decisions against a candidate engine and
  fills a :class:`ReplayReport` (``gateway replay``).
- :class:`ShadowEvaluator` evaluates a candidate engine after every enforced decision,
  never changing or delaying it; disagreements become audit records and counts.
- :class:`ObservedAuthorizer` and :class:`DecisionTap` connect both to a call pipeline.
"""

from gateway.replay._assembly import Assembly, assemble
from gateway.replay._capture import (
    AUTH_FAILURES,
    REASONS,
    Captured,
    CaptureIndex,
    ReplayCapture,
    capture_files,
    index_captures,
    open_capture,
    seal,
)
from gateway.replay._document import RecordedDocument
from gateway.replay._keys import KEY_BYTES, KeyRing, KeyRingError, key_check, new_key_entry
from gateway.replay._metrics import ReplayCollector
from gateway.replay._observe import DecisionTap, Observation, ObservedAuthorizer
from gateway.replay._outcome import CHANGES, FLIPS, RESULTS, Outcome, change, decide
from gateway.replay._replay import (
    DEFAULT_FAIL_ON,
    FAIL_ON_TOKENS,
    ChangeExample,
    NotReplayed,
    ReplayReport,
    TrailDecision,
    parse_fail_on,
    replay,
    role_key,
    trail_decisions,
)
from gateway.replay._settings import (
    ReplaySettings,
    SettingsError,
    ShadowSettings,
    build_candidate,
    parse_replay,
    parse_shadow,
)
from gateway.replay._shadow import ShadowEvaluator, ShadowStats

__all__ = [
    "AUTH_FAILURES",
    "CHANGES",
    "DEFAULT_FAIL_ON",
    "FAIL_ON_TOKENS",
    "FLIPS",
    "KEY_BYTES",
    "REASONS",
    "RESULTS",
    "Assembly",
    "CaptureIndex",
    "Captured",
    "ChangeExample",
    "DecisionTap",
    "KeyRing",
    "KeyRingError",
    "NotReplayed",
    "Observation",
    "ObservedAuthorizer",
    "Outcome",
    "RecordedDocument",
    "ReplayCapture",
    "ReplayCollector",
    "ReplayReport",
    "ReplaySettings",
    "SettingsError",
    "ShadowEvaluator",
    "ShadowSettings",
    "ShadowStats",
    "TrailDecision",
    "assemble",
    "build_candidate",
    "capture_files",
    "change",
    "decide",
    "index_captures",
    "key_check",
    "new_key_entry",
    "open_capture",
    "parse_fail_on",
    "parse_replay",
    "parse_shadow",
    "replay",
    "role_key",
    "seal",
    "trail_decisions",
]
