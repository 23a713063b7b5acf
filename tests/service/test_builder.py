"""The one builder both surfaces assemble from: engine, cache, authorizer, audit, metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.mcp import McpService
from gateway.server import ConfigError, build_service, parse_config

REPO_ROOT = Path(__file__).resolve().parents[2]
BUNDLE = REPO_ROOT / "bundles" / "policies.tar.gz"


def _config(tmp_path: Path, audit_path: Path) -> Any:
    return parse_config(
        {
            "engine": {"kind": "embedded", "bundle": str(BUNDLE)},
            "audit": {"enabled": True, "path": str(audit_path), "unkeyed": True},
            "auth": {"api_keys": [{"sha256": "a" * 64, "context": {"subject": "alice"}}]},
            "tools": {"modules": ["examples.example_tools:TOOLS"]},
        },
        base=tmp_path,
    )


@pytest.mark.parametrize(
    "build",
    [pytest.param(build_service, id="http"), pytest.param(McpService, id="mcp")],
)
def test_every_surface_refuses_an_audit_path_it_cannot_open_as_a_config_error_naming_the_key(
    tmp_path: Path, build: Any
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("", encoding="utf-8")

    with pytest.raises(ConfigError) as raised:
        build(_config(tmp_path, blocker / "trail.jsonl"))

    assert str(raised.value).startswith("audit.path: cannot open ")
