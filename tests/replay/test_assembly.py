"""Capture and shadow together, as a service assembles them: one run, replayed afterwards."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway import Authorization, ToolDefinition
from gateway.audit import AuditingAuthorizer, AuditTrail, JsonlFileSink
from gateway.policy import CallerContext, EmbeddedEngine, PolicyAuthorizer, caller_context
from gateway.replay import KeyRing, SettingsError, assemble, parse_shadow, replay
from gateway.replay._settings import ReplaySettings
from gateway.testing import StaticAuthorizer
from tests.replay.conftest import CALLS, SCHEMA, expected_changes, key_entry

RING = KeyRing.parse(key_entry("k1", 1))


async def test_a_shadowed_and_captured_run_reports_the_same_changes_live_and_in_replay(
    tmp_path: Path,
    baseline_engine: EmbeddedEngine,
    candidate_engine: EmbeddedEngine,
    policy_dirs: tuple[Path, Path],
    opa_bin: str,
) -> None:
    sink = JsonlFileSink(tmp_path / "trail" / "audit.jsonl", fsync="none")
    shadow = parse_shadow(
        {"enabled": True, "policies": str(policy_dirs[1]), "opa_binary": opa_bin}, tmp_path
    )
    assembly = assemble(
        PolicyAuthorizer(baseline_engine),
        sink,
        replay=ReplaySettings(capture_dir=tmp_path / "capture", keyring=RING),
        shadow=shadow,
    )
    assert assembly is not None
    assert assembly.shadow is not None
    registry = CollectorRegistry()
    registry.register(assembly.collector)
    authorizer = AuditingAuthorizer(assembly.authorizer, AuditTrail(assembly.sink))
    await assembly.open()
    try:
        for call in CALLS:
            context = CallerContext({"subject": "s", "roles": list(call.roles)})
            # An error decision raises; it is recorded like any other.
            with caller_context(context), contextlib.suppress(Exception):
                await authorizer.authorize(
                    Authorization(ToolDefinition(call.tool, SCHEMA), call.arguments)
                )
        await assembly.shadow.drain()
    finally:
        await assembly.close()
        sink.close()

    live = dict(assembly.shadow.stats().disagreed)
    replayed = await replay(
        tmp_path / "trail",
        candidate_engine,
        path="gateway/authz/decision",
        capture=tmp_path / "capture",
        keyring=RING,
    )
    assert live == dict(replayed.changes) == expected_changes()
    scraped = generate_latest(registry).decode()
    assert 'gateway_shadow_disagreements_total{change="deny-to-allow"} 1.0' in scraped
    assert f"gateway_replay_captured_total {float(len(CALLS))}" in scraped
    assert "gateway_shadow_dropped_total 0.0" in scraped


def test_neither_is_assembled_unless_asked() -> None:
    assert assemble(StaticAuthorizer(True), None, replay=None, shadow=None) is None


def test_capture_or_shadow_without_an_audit_trail_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"replay\.capture: needs the audit trail"):
        assemble(
            StaticAuthorizer(True),
            None,
            replay=ReplaySettings(capture_dir=tmp_path, keyring=RING),
            shadow=None,
        )
