"""[approvals]: a path when enabled, a sane ttl, and never without the audit trail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.service import ConfigError, parse_config
from gateway.service._builder import build_approvals


def _data(tmp_path: Path, approvals: dict[str, Any], *, audit: bool = True) -> dict[str, Any]:
    return {
        "engine": {"kind": "opa", "url": "http://127.0.0.1:8181"},
        "audit": (
            {"path": str(tmp_path / "audit.jsonl"), "unkeyed": True}
            if audit
            else {"enabled": False}
        ),
        "auth": {"api_keys": [{"sha256": "a" * 64, "context": {"subject": "alice"}}]},
        "tools": {"modules": ["tests.approvals.http_tools:TOOLS"]},
        "approvals": approvals,
    }


@pytest.mark.parametrize(
    ("approvals", "key"),
    [
        ({"enabled": True}, "approvals.path"),
        ({"enabled": True, "path": "a.json", "ttl_s": 0}, "approvals.ttl_s"),
        ({"enabled": True, "path": "a.json", "ttl_s": 8 * 86400}, "approvals.ttl_s"),
    ],
)
def test_a_bad_approvals_table_is_refused_naming_its_key(
    tmp_path: Path, approvals: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config(_data(tmp_path, approvals), base=tmp_path)


def test_the_approvals_path_is_read_against_the_config_folder(tmp_path: Path) -> None:
    config = parse_config(_data(tmp_path, {"enabled": True, "path": "a.json"}), base=tmp_path)
    assert config.approvals.path == str(tmp_path / "a.json")


def test_approvals_without_an_audit_trail_are_refused(tmp_path: Path) -> None:
    config = parse_config(
        _data(tmp_path, {"enabled": True, "path": "a.json"}, audit=False), base=tmp_path
    )
    with pytest.raises(ConfigError, match="approvals"):
        build_approvals(config, None)


def test_approvals_are_off_unless_enabled(tmp_path: Path) -> None:
    config = parse_config(_data(tmp_path, {}), base=tmp_path)
    assert build_approvals(config, None) == (None, None)
