"""The service with [replay] and [shadow]: every call captured and shadowed, none changed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gateway import ToolCall
from gateway.policy import CallerContext, EmbeddedEngine
from gateway.replay import KeyRing, replay
from gateway.service import Components, ConfigError, build_components, parse_config
from gateway.testing import RecordingTool
from tests.replay.conftest import CALLS, SCHEMA, expected_changes, key_entry

TOOLS = sorted({call.tool for call in CALLS})


def _config(tmp_path: Path, engine: dict[str, Any], **tables: Any) -> Any:
    return parse_config(
        {
            "engine": engine,
            "audit": {
                "enabled": True,
                "path": str(tmp_path / "trail" / "audit.jsonl"),
                "unkeyed": True,
            },
            "auth": {"api_keys": [{"sha256": "a" * 64, "context": {"subject": "alice"}}]},
            "tools": {"modules": ["examples.example_tools:TOOLS"]},
            **tables,
        },
        base=tmp_path,
    )


async def _serve(components: Components) -> list[tuple[str, str | None]]:
    gateway = components.gateway([RecordingTool(name, dict(SCHEMA)) for name in TOOLS])
    results = []
    await components.open()
    try:
        for number, call in enumerate(CALLS):
            result = await gateway.call(
                ToolCall(f"call-{number}", call.tool, call.arguments),
                caller=CallerContext({"subject": "s", "roles": list(call.roles)}),
            )
            results.append((result.code, result.decision_id))
        if components.replay is not None and components.replay.shadow is not None:
            await components.replay.shadow.drain()
    finally:
        await components.close()
    return results


async def test_a_service_captures_and_shadows_every_call_without_changing_any(
    tmp_path: Path,
    policy_dirs: tuple[Path, Path],
    opa_bin: str,
    candidate_engine: EmbeddedEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RING", key_entry("k1", 1))
    engine = {"kind": "embedded", "policies": str(policy_dirs[0]), "opa_binary": opa_bin}
    plain = await _serve(build_components(_config(tmp_path / "plain", engine)))
    config = _config(
        tmp_path,
        engine,
        replay={"capture": True, "capture_dir": "capture", "key_env": "RING"},
        shadow={"enabled": True, "policies": str(policy_dirs[1]), "opa_binary": opa_bin},
    )
    components = build_components(config)

    served = await _serve(components)

    assert [code for code, _ in served] == [code for code, _ in plain]
    records = [
        json.loads(line) for line in (tmp_path / "trail" / "audit.jsonl").read_text().splitlines()
    ]
    ids = [r["decision_id"] for r in records if r["type"] == "decision"]
    shadowed = {r["decision_id"]: r["change"] for r in records if r["type"] == "shadow"}
    assert shadowed == {ids[n]: call.change for n, call in enumerate(CALLS) if call.change}
    report = await replay(
        tmp_path / "trail",
        candidate_engine,
        path="gateway/authz/decision",
        capture=tmp_path / "capture",
        keyring=KeyRing.parse(key_entry("k1", 1)),
    )
    assert dict(report.changes) == expected_changes()
    assert report.replayed == len(CALLS)
    metrics = components.metrics.render().decode()
    assert 'gateway_shadow_disagreements_total{change="deny-to-allow"} 1.0' in metrics
    assert f"gateway_replay_captured_total {float(len(CALLS))}" in metrics


def test_replay_and_shadow_are_off_by_default(tmp_path: Path) -> None:
    bundle = Path(__file__).resolve().parents[2] / "bundles" / "policies.tar.gz"
    config = _config(tmp_path, {"kind": "embedded", "bundle": str(bundle)})

    components = build_components(config)
    try:
        assert components.replay is None
        assert "gateway_shadow" not in components.metrics.render().decode()
    finally:
        components.engine.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("tables", "problem"),
    [
        ({"replay": {"capture": True, "capture_dir": "c"}}, "replay.key_env"),
        ({"shadow": {"enabled": True}}, "shadow.policies"),
        ({"shadow": {"enabled": True, "url": "http://127.0.0.1:1", "x": 1}}, "shadow.x"),
    ],
)
def test_an_invalid_replay_or_shadow_table_is_a_config_error_naming_its_key(
    tmp_path: Path, tables: dict[str, Any], problem: str
) -> None:
    bundle = Path(__file__).resolve().parents[2] / "bundles" / "policies.tar.gz"

    with pytest.raises(ConfigError, match=problem):
        _config(tmp_path, {"kind": "embedded", "bundle": str(bundle)}, **tables)


def test_capture_or_shadow_without_the_audit_trail_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RING", key_entry("k1", 1))
    bundle = Path(__file__).resolve().parents[2] / "bundles" / "policies.tar.gz"
    config = _config(
        tmp_path,
        {"kind": "embedded", "bundle": str(bundle)},
        replay={"capture": True, "capture_dir": "capture", "key_env": "RING"},
    )
    unaudited = dataclasses.replace(config, audit=dataclasses.replace(config.audit, enabled=False))

    with pytest.raises(ConfigError, match=r"replay\.capture: needs the audit trail"):
        build_components(unaudited)


def test_a_capture_folder_that_cannot_be_made_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RING", key_entry("k1", 1))
    blocker = tmp_path / "file"
    blocker.write_text("")
    bundle = Path(__file__).resolve().parents[2] / "bundles" / "policies.tar.gz"
    config = _config(
        tmp_path,
        {"kind": "embedded", "bundle": str(bundle)},
        replay={"capture": True, "capture_dir": str(blocker / "capture"), "key_env": "RING"},
    )

    with pytest.raises(ConfigError, match=r"replay\.capture_dir: cannot open it"):
        build_components(config)
