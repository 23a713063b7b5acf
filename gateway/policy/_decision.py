"""Strict reading of a decision document into a :class:`gateway.Decision`.

A decision is either a boolean or an object with exactly the members ``allow`` (required,
boolean), ``message`` (string), ``reasons`` (array of strings) and ``cache`` (an object with
a non-negative number ``ttl_s``). Only JSON ``true`` allows. Anything else is malformed.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final

from gateway import _json
from gateway._authorization import Decision
from gateway.policy._errors import MalformedDecisionError

_MEMBERS: Final = frozenset({"allow", "message", "reasons", "cache"})


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
    )
