"""The ``[mcp]`` configuration: stdio context and upstream servers, errors naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.server import ConfigError, parse_config
from gateway.service._config import McpConfig, McpUpstreamConfig
from tests.mcp.conftest import POLICIES


def _config(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "engine": {"kind": "embedded", "policies": str(POLICIES)},
        "audit": {"enabled": False},
        "auth": {"api_keys": [{"sha256": "0" * 64, "context": {"subject": "alice"}}]},
        "tools": {"modules": ["example_tools:TOOLS"]},
    }
    data.update(sections)
    return data


def test_a_configuration_without_mcp_gets_the_empty_default(tmp_path: Path) -> None:
    config = parse_config(_config(tmp_path), base=tmp_path)

    assert config.mcp == McpConfig()
    assert config.mcp.upstreams == ()
    assert config.mcp.stdio_context is None


def test_upstreams_are_parsed_with_defaults_and_paths_resolved(tmp_path: Path) -> None:
    data = _config(
        tmp_path,
        mcp={
            "stdio_context": {"subject": "alice", "roles": ["reader"], "tenant": "acme"},
            "upstreams": [
                {
                    "name": "fs",
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
                    "env": {"NODE_ENV": "production"},
                    "cwd": "servers",
                    "prefix": "fs__",
                },
                {
                    "name": "remote",
                    "url": "https://tools.example.com/mcp",
                    "headers": {"Authorization": "Bearer t"},
                    "timeout_s": 5,
                },
            ],
        },
    )
    del data["tools"]  # an MCP-only gateway needs no local tools

    config = parse_config(data, base=tmp_path)

    assert config.tools == ()
    assert config.mcp.stdio_context == {"subject": "alice", "roles": ["reader"], "tenant": "acme"}
    assert config.mcp.upstreams == (
        McpUpstreamConfig(
            name="fs",
            command="npx",
            args=("-y", "@modelcontextprotocol/server-filesystem", "/srv"),
            env={"NODE_ENV": "production"},
            cwd=(tmp_path / "servers").resolve(),
            prefix="fs__",
        ),
        McpUpstreamConfig(
            name="remote",
            url="https://tools.example.com/mcp",
            headers={"Authorization": "Bearer t"},
            timeout_s=5.0,
        ),
    )


def test_without_tools_or_upstreams_there_is_nothing_to_serve(tmp_path: Path) -> None:
    data = _config(tmp_path)
    del data["tools"]

    with pytest.raises(ConfigError, match=r"^tools\.modules: list at least one"):
        parse_config(data, base=tmp_path)


@pytest.mark.parametrize(
    ("mcp", "message"),
    [
        ({"stdio": {}}, r"^mcp\.stdio: unknown key"),
        ({"stdio_context": "alice"}, r"^mcp\.stdio_context: must be"),
        ({"stdio_context": {"roles": ["reader"]}}, r"^mcp\.stdio_context: must be a table"),
        ({"stdio_context": {"subject": " "}}, r"^mcp\.stdio_context: must be a table"),
        ({"upstreams": {"name": "x"}}, r"^mcp\.upstreams: must be an array of tables"),
        ({"upstreams": ["x"]}, r"^mcp\.upstreams\[0\]: must be a table"),
        ({"upstreams": [{"command": "x"}]}, r"^mcp\.upstreams\[0\]\.name: required"),
        ({"upstreams": [{"name": "a b", "command": "x"}]}, r"^mcp\.upstreams\[0\]\.name:"),
        ({"upstreams": [{"name": "a"}]}, r"^mcp\.upstreams\[0\]\.command: set exactly one"),
        (
            {"upstreams": [{"name": "a", "command": "x", "url": "http://h/mcp"}]},
            r"^mcp\.upstreams\[0\]\.command: set exactly one",
        ),
        ({"upstreams": [{"name": "a", "command": " "}]}, r"^mcp\.upstreams\[0\]\.command: must"),
        ({"upstreams": [{"name": "a", "url": "ftp://h"}]}, r"^mcp\.upstreams\[0\]\.url: must"),
        (
            {"upstreams": [{"name": "a", "url": "http://h/mcp", "args": ["x"]}]},
            r"^mcp\.upstreams\[0\]\.args: only for a command",
        ),
        (
            {"upstreams": [{"name": "a", "command": "x", "headers": {}}]},
            r"^mcp\.upstreams\[0\]\.headers: only for a url",
        ),
        ({"upstreams": [{"name": "a", "command": "x", "args": "y"}]}, r"\]\.args: must be a list"),
        ({"upstreams": [{"name": "a", "command": "x", "env": {"K": 1}}]}, r"\]\.env: must be a"),
        ({"upstreams": [{"name": "a", "command": "x", "prefix": "fs."}]}, r"\]\.prefix: must"),
        ({"upstreams": [{"name": "a", "command": "x", "timeout_s": 0}]}, r"\]\.timeout_s: must"),
        ({"upstreams": [{"name": "a", "command": "x", "port": 1}]}, r"\]\.port: unknown key"),
        (
            {"upstreams": [{"name": "a", "command": "x"}, {"name": "a", "url": "http://h/"}]},
            r"^mcp\.upstreams\[1\]\.name: duplicate upstream name 'a'",
        ),
    ],
)
def test_invalid_mcp_settings_are_refused_naming_the_key(
    tmp_path: Path, mcp: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(_config(tmp_path, mcp=mcp), base=tmp_path)


def test_the_session_limit_and_idle_timeout_are_configured_with_defaults(tmp_path: Path) -> None:
    default = parse_config(_config(tmp_path), base=tmp_path).mcp
    chosen = parse_config(
        _config(tmp_path, mcp={"max_sessions_per_caller": 2, "session_idle_timeout_s": 30}),
        base=tmp_path,
    ).mcp

    assert (default.max_sessions_per_caller, default.session_idle_timeout_s) == (8, 1800.0)
    assert (chosen.max_sessions_per_caller, chosen.session_idle_timeout_s) == (2, 30.0)


@pytest.mark.parametrize(
    ("mcp", "message"),
    [
        ({"max_sessions_per_caller": 0}, "mcp.max_sessions_per_caller: must be at least 1"),
        ({"max_sessions_per_caller": 1.5}, "mcp.max_sessions_per_caller: must be int"),
        ({"max_sessions_per_caller": True}, "mcp.max_sessions_per_caller: must be int"),
        ({"session_idle_timeout_s": 0}, "mcp.session_idle_timeout_s: must be positive"),
        ({"session_idle_timeout_s": float("inf")}, "mcp.session_idle_timeout_s: must be finite"),
        ({"session_idle_timeout_s": "1"}, "mcp.session_idle_timeout_s: must be int or float"),
    ],
)
def test_a_bad_session_setting_is_refused_naming_its_key(
    tmp_path: Path, mcp: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(_config(tmp_path, mcp=mcp), base=tmp_path)
