"""The gateway changes nothing but the decision: tool metadata, result content, names.

A real SDK client talks to ``python -m gateway mcp`` over stdio (or to the service
in-process), in front of the real test upstream (``upstream_server.py``). What the upstream
lists and answers is compared with what reaches the client.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from gateway import Authorization
from gateway.mcp import McpService
from gateway.policy import CallerContext, InputDocument
from gateway.server import ConfigError, load_config
from tests.mcp.conftest import (
    OTHER_TENANT_PATH,
    REPO,
    WRITER,
    ConfigWriter,
    audit_records,
    calls,
)
from tests.mcp.upstream_server import (
    EVERY_CONTENT,
    EVERY_STRUCTURED,
    READ_FILE_METADATA,
    read_record,
)

EVERY = "/srv/tenants/acme/every-content.txt"
EVERY_ERROR = "/srv/tenants/acme/every-error.txt"


def _gateway(config: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway", "mcp", "--config", str(config), "--transport", "stdio"],
        cwd=REPO,
        env=dict(os.environ),
    )


def _wire(model: Any) -> Any:
    # What was on the wire: the members the sender set, in the wire's names.
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


async def test_tools_list_passes_every_member_of_the_upstreams_tool_through(
    write_config: ConfigWriter, variant: Path
) -> None:
    variant.write_text("v2", encoding="utf-8")  # noqa: ASYNC240 - before anything runs
    # A writer: the shipped policies show it read_file and write_file.
    config = write_config(stdio_context=WRITER)
    async with Client(_gateway(config), cache=None, read_timeout_seconds=30) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert _wire(listed["read_file"]) == {
        "name": "read_file",
        "description": "Read a file.",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
        **READ_FILE_METADATA,
    }
    # The host decides when to ask the user from destructiveHint: it must arrive.
    write_file = listed["write_file"]
    assert write_file.annotations is not None
    assert write_file.annotations.destructive_hint is True
    assert _wire(write_file)["annotations"] == {"destructiveHint": True}


async def test_the_policy_sees_the_upstream_tools_title_annotations_and_output_schema(
    write_config: ConfigWriter, variant: Path
) -> None:
    variant.write_text("v2", encoding="utf-8")  # noqa: ASYNC240 - before anything runs
    async with McpService(load_config(write_config(stdio_context=WRITER))) as service:
        read_file = service.gateway.registry.resolve("read_file")
        write_file = service.gateway.registry.resolve("write_file")
    assert read_file is not None
    assert write_file is not None

    def tool(definition: Any) -> Any:
        authorization = Authorization(definition, b"{}")
        return InputDocument(authorization, CallerContext(subject="w")).to_dict()["tool"]

    assert tool(read_file.definition) == {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": read_file.definition.input_schema,
        "title": "Read file",
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
        "output_schema": READ_FILE_METADATA["outputSchema"],
    }
    assert tool(write_file.definition)["annotations"] == {"destructiveHint": True}
    assert "output_schema" not in tool(write_file.definition)


async def test_every_kind_of_content_passes_through_the_gateway_unchanged(
    write_config: ConfigWriter, record: Path, audit_path: Path
) -> None:
    async with Client(_gateway(write_config()), cache=None, read_timeout_seconds=30) as client:
        allowed = await client.call_tool("read_file", {"path": EVERY})
        failed = await client.call_tool("read_file", {"path": EVERY_ERROR})
        denied = await client.call_tool("read_file", {"path": OTHER_TENANT_PATH + "/every-x"})

    # Text with annotations, empty text, image, audio with _meta, an embedded text resource
    # with its uri and mimeType, a blob resource with its own uri, a resource link with
    # name, title, description and size: exactly as the upstream sent them.
    assert [_wire(block) for block in allowed.content] == EVERY_CONTENT
    assert allowed.structured_content == EVERY_STRUCTURED
    assert not allowed.is_error
    assert (allowed.meta or {}).get("gateway/code") == "ok"
    # The upstream's own error result passes through as well (it is the tool's answer).
    assert [_wire(block) for block in failed.content] == EVERY_CONTENT
    assert failed.is_error
    assert (failed.meta or {}).get("gateway/code") == "tool_failed"
    # A denial stays the gateway's own result: public text only, never the upstream's.
    assert denied.is_error
    assert [_wire(block) for block in denied.content] == [
        {
            "type": "text",
            "text": "path is not allowed: it is outside the allowed directories",
        }
    ]
    assert denied.structured_content is None
    assert [path for _, arguments in calls(read_record(record)) for path in arguments.values()] == [
        EVERY,
        EVERY_ERROR,
    ]
    outcomes = [r["outcome"] for r in audit_records(audit_path) if r["type"] == "outcome"]
    assert outcomes == ["executed", "failed", "rejected"]


async def test_a_dotted_upstream_name_is_served_and_decided_under_its_exact_name(
    write_config: ConfigWriter, variant: Path, audit_path: Path
) -> None:
    variant.write_text("v2", encoding="utf-8")  # noqa: ASYNC240 - before anything runs
    async with Client(_gateway(write_config()), cache=None, read_timeout_seconds=30) as client:
        names = sorted(tool.name for tool in (await client.list_tools()).tools)
        called = await client.call_tool("files.stat_v1.2", {})

    # alice is shown what she may call; the unconfigured tool is not listed, yet a call of
    # it is still decided, under its exact name.
    assert names == ["read_file"]
    # The shipped policies do not configure the tool: the policy saw its exact name.
    assert called.is_error
    assert (called.meta or {}).get("gateway/code") == "denied"
    decisions = [r for r in audit_records(audit_path) if r["type"] == "decision"]
    assert [r["tool"] for r in decisions] == ["files.stat_v1.2"]


@pytest.mark.parametrize("transport", ["stdio", "service"])
async def test_a_local_tool_with_an_upstream_tools_name_is_a_configuration_error_naming_both(
    write_config: ConfigWriter, transport: str
) -> None:
    config = write_config(modules=["example_tools:TOOLS"])
    (config.parent / "example_tools.py").write_text(
        (REPO / "examples" / "example_tools.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    if transport == "service":
        with pytest.raises(ConfigError) as raised:
            async with McpService(load_config(config)):
                pass
        message = str(raised.value)
    else:
        params = _gateway(config)
        done = subprocess.run(  # noqa: ASYNC221 - the command must exit; nothing else runs
            [params.command, *params.args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert done.returncode == 2
        message = done.stderr

    for name in ("read_file", "search"):
        assert (
            f"tool name {name!r} is served twice: by the gateway's own tool {name!r} "
            f"(tools.modules) and by upstream 'files' tool {name!r}"
        ) in message


async def test_two_upstreams_serving_one_name_are_a_configuration_error_naming_both(
    write_config: ConfigWriter,
) -> None:
    config = write_config(second_upstream="mirror")
    with pytest.raises(ConfigError) as raised:
        async with McpService(load_config(config)):
            pass

    assert (
        "tool name 'read_file' is served twice: by upstream 'files' tool 'read_file' and by "
        "upstream 'mirror' tool 'read_file'"
    ) in str(raised.value)
