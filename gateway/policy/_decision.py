"""Strict reading of a decision document into a :class:`gateway.Decision`.

A decision is either a boolean or an object with exactly the members ``allow`` (required,
boolean), ``message`` (string), ``reasons`` (array of strings), ``cache`` (an object with
a non-negative number ``ttl_s``) and ``obligations`` (contract version 2: an array of typed
obligation objects, read by :func:`gateway.obligations.read_obligations`), ``labels``
(session labels attached when the call runs) and ``quotas`` (``{"scope", "window_s",
"limit"}`` objects reserved atomically before it runs; see :mod:`gateway.state`) and, on a
refusal only, ``step_up`` (``{"scopes": [...]}``: the OAuth scopes the call needs and the
caller's token lacks). Only JSON ``true`` allows. Anything else is malformed.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Final

from gateway import _json
from gateway._authorization import Decision
from gateway.obligations import read_obligations
from gateway.policy._errors import MalformedDecisionError

_MEMBERS: Final = frozenset(
    {"allow", "message", "reasons", "cache", "obligations", "labels", "quotas", "step_up"}
)
#: A session label: lower-case ASCII, digits, ``_ . : -``, at most 64 characters.
_LABEL: Final = re.compile(r"[a-z][a-z0-9_.:-]{0,63}")
_MAX_LABELS: Final = 32
_MAX_QUOTAS: Final = 16
#: The counter scopes a quota may name (``gateway.state.SCOPES``).
_QUOTA_SCOPES: Final = frozenset(
    {"caller", "caller_tool", "tenant", "tenant_tool", "session", "session_tool"}
)
_MAX_WINDOW_S: Final = 31 * 86400
#: An OAuth scope token (RFC 6749, section 3.3): printable ASCII but space, ``"`` and ``\``.
_SCOPE_TOKEN: Final = re.compile(r"[\x21\x23-\x5B\x5D-\x7E]{1,128}")
_MAX_SCOPES: Final = 16


def _step_up(value: Any, allow: bool) -> tuple[str, ...]:
    if value is None:
        return ()
    scopes = value.get("scopes") if isinstance(value, dict) and set(value) == {"scopes"} else None
    scopes = normalize(scopes)
    if (
        allow
        or not isinstance(scopes, list)
        or not 0 < len(scopes) <= _MAX_SCOPES
        or not all(isinstance(s, str) and _SCOPE_TOKEN.fullmatch(s) for s in scopes)
    ):
        raise MalformedDecisionError(
            "decision.step_up must be {scopes: [1-16 scope tokens]}, on a refusal only"
        )
    return tuple(sorted(set(scopes)))


def normalize(value: Any) -> Any:
    """Turn engine-native values into JSON values: sets become sorted lists, recursively."""
    if isinstance(value, set | frozenset):
        items = [normalize(item) for item in value]
        return sorted(items, key=_json.canonical)
    if isinstance(value, dict):
        return {key: normalize(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(item) for item in value]
    return value


def _ttl(cache: Any) -> float | None:
    if cache is None:
        return None
    if not isinstance(cache, dict) or set(cache) - {"ttl_s"}:
        raise MalformedDecisionError("decision.cache must be an object with only ttl_s")
    ttl = cache.get("ttl_s")
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float | Decimal) or ttl < 0:
        raise MalformedDecisionError("decision.cache.ttl_s must be a non-negative number")
    return float(ttl)


def _labels(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    labels = normalize(value)
    if (
        not isinstance(labels, list)
        or len(labels) > _MAX_LABELS
        or not all(isinstance(label, str) and _LABEL.fullmatch(label) for label in labels)
    ):
        raise MalformedDecisionError(
            f"decision.labels must be an array of at most {_MAX_LABELS} labels"
        )
    return tuple(sorted(set(labels)))


def _whole(value: Any, low: int, high: int) -> bool:
    # A JSON integer (1.0 and true are not), within [low, high].
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        return False
    return value == int(value) and low <= value <= high


def _quotas(value: Any) -> tuple[tuple[str, int, int], ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or len(value) > _MAX_QUOTAS:
        raise MalformedDecisionError(
            f"decision.quotas must be an array of at most {_MAX_QUOTAS} quotas"
        )
    quotas: list[tuple[str, int, int]] = []
    for quota in value:
        if (
            not isinstance(quota, dict)
            or set(quota) != {"scope", "window_s", "limit"}
            or quota["scope"] not in _QUOTA_SCOPES
            or not _whole(quota["window_s"], 1, _MAX_WINDOW_S)
            or not _whole(quota["limit"], 0, 2**53)
        ):
            raise MalformedDecisionError(
                "decision.quotas: each must be {scope, window_s, limit} with a known scope"
            )
        quotas.append((quota["scope"], int(quota["window_s"]), int(quota["limit"])))
    return tuple(quotas)


def read_decision(
    value: Any,
    *,
    engine: str | None = None,
    decision_id: str | None = None,
    revision: str | None = None,
) -> Decision:
    """Read a decision document strictly.

    Raises:
        MalformedDecisionError: anything but ``true``/``false`` or a well-formed object.
    """
    if value is True or value is False:
        return Decision(allowed=value, decision_id=decision_id, revision=revision, engine=engine)
    if not isinstance(value, dict):
        raise MalformedDecisionError(f"decision is a {type(value).__name__}, not an object")
    extra = set(value) - _MEMBERS
    if extra:
        raise MalformedDecisionError(f"decision has unknown members {sorted(extra)}")
    allow = value.get("allow")
    if allow is not True and allow is not False:
        raise MalformedDecisionError("decision.allow must be a boolean")
    message = value.get("message")
    if message is not None and not isinstance(message, str):
        raise MalformedDecisionError("decision.message must be a string")
    reasons = normalize(value.get("reasons", []))
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise MalformedDecisionError("decision.reasons must be an array of strings")
    return Decision(
        allowed=allow,
        message=message or None,
        reasons=tuple(reasons),
        decision_id=decision_id,
        revision=revision,
        cache_ttl=_ttl(value.get("cache")),
        engine=engine,
        obligations=read_obligations(normalize(value.get("obligations"))),
        labels=_labels(value.get("labels")),
        quotas=_quotas(value.get("quotas")),
        required_scopes=_step_up(value.get("step_up"), allow),
    )
