"""The [console] table: off by default, and what it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.service import ConfigError, parse_config
from tests.server.conftest import ALICE, POLICIES, key_digest

AUDIT_KEY = b"a-test-audit-key-of-32-bytes-ok!"


def _data(tmp_path: Path, console: dict[str, Any] | None = None, **server: Any) -> dict[str, Any]:
    (tmp_path / "audit.key").write_bytes(AUDIT_KEY)
    data: dict[str, Any] = {
        "engine": {"kind": "embedded", "policies": str(POLICIES)},
        "audit": {"path": str(tmp_path / "audit.jsonl"), "key_file": str(tmp_path / "audit.key")},
        "auth": {"api_keys": [{"sha256": key_digest(ALICE), "context": {"subject": "alice"}}]},
        "tools": {"modules": ["examples.example_tools:TOOLS"]},
    }
    if console is not None:
        data["console"] = console
    if server:
        data["server"] = server
    return data


def test_the_console_is_off_by_default(tmp_path: Path) -> None:
    config = parse_config(_data(tmp_path), base=tmp_path)

    assert config.console.enabled is False


def test_an_enabled_console_keeps_its_roles_and_resolves_its_report_folder(
    tmp_path: Path,
) -> None:
    table = {"enabled": True, "approver_roles": ["treasurer"], "replay_reports": "reports"}
    config = parse_config(_data(tmp_path, table), base=tmp_path)

    assert config.console.approver_roles == ("treasurer",)
    assert config.console.replay_reports == str(tmp_path / "reports")


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"enabled": True}, "console: name approvers"),
        ({"enabled": True, "approvers": [""]}, "console.approvers"),
        ({"enabled": True, "auditors": ["a"], "path": "/v1"}, "console.path"),
        ({"enabled": True, "auditors": ["a"], "path": "/Console"}, "console.path"),
        ({"enabled": True, "auditors": ["a"], "path": "/a/b"}, "console.path"),
        ({"enabled": True, "auditors": ["a"], "path": "console"}, "console.path"),
        ({"enabled": True, "auditors": ["a"], "idle_timeout_s": 0}, "console.idle_timeout_s"),
        (
            {"enabled": True, "auditors": ["a"], "idle_timeout_s": 600, "max_age_s": 60},
            "console.max_age_s",
        ),
        ({"enabled": True, "auditors": ["a"], "max_sessions": 0}, "console.max_sessions"),
        ({"enabled": True, "auditors": ["a"], "trail_records": 0}, "console.trail_records"),
        ({"enabled": True, "auditors": ["a"], "unknown": 1}, "console.unknown"),
    ],
)
def test_a_console_table_that_does_not_fit_is_refused_naming_the_key(
    tmp_path: Path, table: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        parse_config(_data(tmp_path, table), base=tmp_path)


def test_the_console_with_several_workers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"server\.workers = 1"):
        parse_config(
            _data(tmp_path, {"enabled": True, "auditors": ["a"]}, workers=2), base=tmp_path
        )


@pytest.mark.parametrize(
    "path",
    [
        "/console",
        "/console/",
        "/console/login",
        "/console/decisions",
        "/console/static/console.css",
    ],
)
def test_with_the_console_off_nothing_is_served_under_its_path(tmp_path: Path, path: str) -> None:
    from starlette.testclient import TestClient

    from gateway.server import build_service

    def answer(config_data: dict[str, Any], where: str) -> tuple[int, str]:
        service = build_service(parse_config(config_data, base=tmp_path))
        with TestClient(service.app) as client:
            response = client.get(where, headers={"x-request-id": "r-1"})
        return response.status_code, response.text

    # The committed bundle of the shipped policies: nothing to compile for each service.
    engine = {
        "kind": "embedded",
        "bundle": str(Path(__file__).parents[2] / "bundles/policies.tar.gz"),
    }
    off = {**_data(tmp_path), "engine": engine}
    on = {**_data(tmp_path, {"enabled": True, "auditors": ["alice"]}), "engine": engine}

    status, body = answer(off, path)
    assert status == 404
    assert body == answer(off, "/no-such-path")[1]
    assert "console" not in body
    assert answer(on, path)[0] != 404
