"""The ``[replay]`` and ``[shadow]`` tables of the service configuration, and what they build.

```toml
[replay]                        # the replay capture (off unless capture = true)
capture = true
capture_dir = "replay-capture"  # apart from the audit trail
key_env = "GATEWAY_REPLAY_KEYS" # or key_file = "replay.keys" (mode 0600)

[shadow]                        # shadow evaluation (off unless enabled = true)
enabled = true
policies = "policies-next"      # or bundle = "next.tar.gz", or url = "http://127.0.0.1:8282"
decision_path = "gateway/authz/decision"
queue_size = 1024               # calls waiting; more are dropped and counted
budget_s = 1.0                  # the longest one shadow evaluation may take
workers = 1                     # candidate evaluations at once
timeout_s = 1.0                 # the candidate engine's own deadline
```

Both need the audit trail: it is where decisions get their ids, and where disagreements
are recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gateway import GatewayError
from gateway.policy import (
    DEFAULT_DECISION_PATH,
    EmbeddedEngine,
    OpaRestEngine,
    PolicyEngine,
    PolicyLoadError,
    normalize_path,
)
from gateway.replay._keys import KeyRing, KeyRingError
from gateway.replay._shadow import DEFAULT_BUDGET_S, DEFAULT_QUEUE_SIZE

_REPLAY_KEYS: Final = ("capture", "capture_dir", "key_env", "key_file")
_SHADOW_KEYS: Final = (
    "enabled",
    "policies",
    "bundle",
    "url",
    "decision_path",
    "opa_binary",
    "queue_size",
    "budget_s",
    "workers",
    "timeout_s",
)


class SettingsError(GatewayError, ValueError):
    """An invalid ``[replay]`` or ``[shadow]`` key (named first in the message)."""

    code = "invalid_config"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaySettings:
    """``[replay]``: where the capture goes and the keys it is encrypted with."""

    capture_dir: Path
    keyring: KeyRing


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowSettings:
    """``[shadow]``: the candidate and the bounds of its evaluation."""

    policies: Path | None = None
    bundle: Path | None = None
    url: str | None = None
    decision_path: str = DEFAULT_DECISION_PATH
    opa_binary: Path | None = None
    queue_size: int = DEFAULT_QUEUE_SIZE
    budget_s: float = DEFAULT_BUDGET_S
    workers: int = 1
    timeout_s: float = 1.0


def _known(table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise SettingsError(f"{where}.{unknown[0]}: unknown key")


def _typed(table: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool:
        raise SettingsError(f"{where}.{key}: must be {kind.__name__}")
    accepted = (int, float) if kind is float else (kind,)
    if not isinstance(value, accepted):
        raise SettingsError(f"{where}.{key}: must be {kind.__name__}")
    return value


def _path(base: Path, value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    return path if path.is_absolute() else (base / path).resolve()


def parse_replay(table: Mapping[str, Any], base: Path) -> ReplaySettings | None:
    """Read ``[replay]`` (``None`` when the capture is off), loading its key ring.

    Raises:
        SettingsError: an invalid key, or a key ring that does not load.
    """
    _known(table, _REPLAY_KEYS, "replay")
    if not _typed(table, "capture", bool, "replay"):
        return None
    capture_dir = _path(base, _typed(table, "capture_dir", str, "replay"))
    if capture_dir is None:
        raise SettingsError("replay.capture_dir: required when replay.capture is true")
    key_env = _typed(table, "key_env", str, "replay")
    key_file = _path(base, _typed(table, "key_file", str, "replay"))
    if (key_env is None) == (key_file is None):
        raise SettingsError("replay.key_env: give exactly one of replay.key_env, replay.key_file")
    try:
        keyring = KeyRing.from_env(key_env) if key_file is None else KeyRing.from_file(key_file)
    except KeyRingError as exc:
        raise SettingsError(f"replay.{'key_env' if key_env else 'key_file'}: {exc}") from None
    return ReplaySettings(capture_dir=capture_dir, keyring=keyring)


def _positive_number(table: Mapping[str, Any], key: str, default: float) -> float:
    value = _typed(table, key, float, "shadow")
    number = default if value is None else float(value)
    if not (math.isfinite(number) and number > 0):
        raise SettingsError(f"shadow.{key}: must be a positive number")
    return number


def _count(table: Mapping[str, Any], key: str, default: int) -> int:
    value = _typed(table, key, int, "shadow")
    number = default if value is None else int(value)
    if number < 1:
        raise SettingsError(f"shadow.{key}: must be at least 1")
    return number


def parse_shadow(table: Mapping[str, Any], base: Path) -> ShadowSettings | None:
    """Read ``[shadow]`` (``None`` when shadow evaluation is off).

    Raises:
        SettingsError: an invalid key, or not exactly one candidate.
    """
    _known(table, _SHADOW_KEYS, "shadow")
    if not _typed(table, "enabled", bool, "shadow"):
        return None
    policies = _path(base, _typed(table, "policies", str, "shadow"))
    bundle = _path(base, _typed(table, "bundle", str, "shadow"))
    url = _typed(table, "url", str, "shadow")
    if sum(item is not None for item in (policies, bundle, url)) != 1:
        raise SettingsError(
            "shadow.policies: name exactly one candidate: shadow.policies, shadow.bundle "
            "or shadow.url"
        )
    decision_path = _typed(table, "decision_path", str, "shadow") or DEFAULT_DECISION_PATH
    try:
        normalize_path(decision_path)
    except ValueError:
        raise SettingsError("shadow.decision_path: not a decision path") from None
    return ShadowSettings(
        policies=policies,
        bundle=bundle,
        url=url,
        decision_path=decision_path,
        opa_binary=_path(base, _typed(table, "opa_binary", str, "shadow")),
        queue_size=_count(table, "queue_size", DEFAULT_QUEUE_SIZE),
        budget_s=_positive_number(table, "budget_s", DEFAULT_BUDGET_S),
        workers=_count(table, "workers", 1),
        timeout_s=_positive_number(table, "timeout_s", 1.0),
    )


def build_candidate(settings: ShadowSettings) -> PolicyEngine:
    """The candidate engine of ``[shadow]`` (an OPA server's still needs ``open()``).

    An embedded candidate evaluates every input on its own worker threads (never inline on
    the event loop), so that it cannot hold up enforced calls.

    Raises:
        SettingsError: the candidate does not load or cannot answer its decision path.
    """
    path = normalize_path(settings.decision_path)
    if settings.url is not None:
        try:
            return OpaRestEngine(settings.url, timeout=settings.timeout_s, revision_interval=0)
        except ValueError:
            raise SettingsError("shadow.url: must be http(s)://host[:port]") from None
    options: dict[str, Any] = {
        "timeout_s": settings.timeout_s,
        "inline_bytes": 0,
        "threads": settings.workers,
    }
    key = "shadow.policies" if settings.policies is not None else "shadow.bundle"
    try:
        if settings.policies is not None:
            engine = EmbeddedEngine.from_directory(
                settings.policies,
                entrypoints=(path,),
                opa_binary=settings.opa_binary,
                identity=f"shadow:{settings.policies}",
                **options,
            )
        else:
            assert settings.bundle is not None  # noqa: S101 - exactly one candidate
            engine = EmbeddedEngine.from_bundle(
                settings.bundle, identity=f"shadow:{settings.bundle}", **options
            )
    except PolicyLoadError as exc:
        detail = f": {' '.join(exc.detail.split())}" if exc.detail else ""
        raise SettingsError(f"{key}: the candidate does not load ({exc}){detail}") from None
    if path not in engine.entrypoints:
        engine.close()
        raise SettingsError(f"shadow.decision_path: {path!r} is not an entrypoint of {key}")
    return engine
