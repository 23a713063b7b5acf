"""Upstream MCP servers as gateway tools: import, forwarding, failures, reconnection, refresh.

The upstream is ``upstream_server.py``: a real SDK server in its own process (over stdio),
or in-process over streamable HTTP. Its record shows what reached it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from mcp import Client

from gateway import Failure, FailureKind, ToolCall, ToolOutput, bind
from gateway.mcp import McpService, UpstreamError, UpstreamSet, UpstreamTool
from gateway.policy import caller_context
from gateway.server import load_config
from gateway.service._config import McpUpstreamConfig
from tests.mcp.conftest import (
    ALLOWED_PATH,
    UPSTREAM,
    WRITER,
    ConfigWriter,
    calls,
    serving,
)
from tests.mcp.upstream_server import build_server, read_record


def _stdio(record: Path, variant: Path, **overrides: Any) -> McpUpstreamConfig:
    fields: dict[str, Any] = {
        "name": "files",
        "command": sys.executable,
        "args": (str(UPSTREAM), str(record), str(variant)),
        "timeout_s": 20.0,
    }
    fields.update(overrides)
    return McpUpstreamConfig(**fields)


def _tool(upstreams: UpstreamSet, name: str) -> UpstreamTool:
    return next(tool for tool in upstreams.tools() if tool.definition().name == name)


async def _call(tool: UpstreamTool, arguments: str) -> ToolOutput:
    binding = bind(tool)
    return await binding.call(
        binding.prepare(ToolCall("call-1", tool.definition().name, arguments))
    )


async def _failure(tool: UpstreamTool, arguments: str) -> Failure:
    with pytest.raises(Failure) as raised:
        await _call(tool, arguments)
    return raised.value


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _pids(record: Path) -> list[int]:
    return [entry["pid"] for entry in read_record(record) if entry["event"] == "start"]


async def test_tools_are_imported_with_prefix_schema_and_description_and_unusable_ones_reported(
    record: Path, variant: Path, tmp_path: Path
) -> None:
    long = "p" * 63  # the longest prefix: with the upstream's names, longer than 64
    configs = [
        _stdio(record, variant, prefix="fs__"),
        _stdio(tmp_path / "long.jsonl", variant, name="long", prefix=long),
    ]
    async with UpstreamSet(configs) as upstreams:
        tools = {tool.definition().name: tool for tool in upstreams.tools()}
        skipped = {item.name: item.reason for item in upstreams.skipped}
        output = await _call(tools["fs__read_file"], f'{{"path": "{ALLOWED_PATH}"}}')

    assert sorted(tools) == ["fs__read_file", "fs__search", long + "read_file", long + "search"]
    read_file = tools["fs__read_file"]
    assert read_file.remote_name == "read_file"
    assert read_file.definition().description == "Read a file."
    assert read_file.definition().input_schema == {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    }
    assert sorted(skipped) == sorted(
        [
            "fs__bad name",
            "fs__broken_ref",
            long + "bad name",
            long + "broken_ref",
        ]
    )
    assert "must be 1-128 characters of [A-Za-z0-9_.-]" in skipped["fs__bad name"]
    assert "external" in skipped["fs__broken_ref"]
    # The call went out under the upstream's own name.
    assert calls(read_record(record)) == [("read_file", {"path": ALLOWED_PATH})]
    assert output.text() == f"contents of {ALLOWED_PATH}"
    assert output.json() == {"path": ALLOWED_PATH, "size": 42}


async def test_calls_forward_the_admitted_document_and_map_error_results_to_failures(
    record: Path, variant: Path
) -> None:
    async with UpstreamSet([_stdio(record, variant)]) as upstreams:
        await _call(
            _tool(upstreams, "search"),
            '{"tenant": "acme", "query": "caf\\u00e9 \\"quoted\\" \\u2713", '
            '"extra": [1, 2.5, null]}',
        )
        failure = await _failure(_tool(upstreams, "read_file"), '{"path": "/x/missing"}')

    assert calls(read_record(record)) == [
        ("search", {"tenant": "acme", "query": 'café "quoted" ✓', "extra": [1, 2.5, None]}),
        ("read_file", {"path": "/x/missing"}),
    ]
    assert failure.kind is FailureKind.FAILED
    assert failure.output.text() == "no such file: /x/missing"
    assert isinstance(failure.cause, UpstreamError)
    assert failure.__cause__ is None
    assert failure.__context__ is None


async def test_the_next_call_reconnects_after_the_upstream_process_is_killed(
    record: Path, variant: Path
) -> None:
    async with UpstreamSet([_stdio(record, variant)]) as upstreams:
        upstream = upstreams["files"]
        tool = _tool(upstreams, "read_file")
        [first] = _pids(record)

        os.kill(first, signal.SIGKILL)
        await asyncio.wait_for(upstream.wait_disconnected(), 10)
        assert not upstream.connected
        output = await _call(tool, f'{{"path": "{ALLOWED_PATH}"}}')

        assert output.text() == f"contents of {ALLOWED_PATH}"
        assert upstream.connected
        assert upstreams.tools() == [tool, _tool(upstreams, "search")]  # same list, same tools

    pids = _pids(record)
    assert len(pids) == 2
    assert pids[0] == first
    assert pids[1] != first
    assert [entry["pid"] for entry in read_record(record) if entry["event"] == "call"] == [pids[1]]


async def test_transport_errors_are_failed_failures_and_the_session_comes_back(
    record: Path, variant: Path
) -> None:
    async with UpstreamSet([_stdio(record, variant)]) as upstreams:
        tool = _tool(upstreams, "read_file")

        # The process dies in the middle of the call: the connection closes under it.
        crashed = await _failure(tool, '{"path": "/srv/crash"}')
        # The upstream cannot be started again: the reconnection itself fails.
        _write(variant, "dead")
        unavailable = await _failure(tool, f'{{"path": "{ALLOWED_PATH}"}}')
        # It can again: the next call reconnects.
        _write(variant, "")
        recovered = await _call(tool, f'{{"path": "{ALLOWED_PATH}"}}')

    assert crashed.kind is FailureKind.FAILED
    assert (
        crashed.output.text()
        == "the upstream MCP server is unavailable; the call was not completed"
    )
    assert crashed.cause is not None
    assert unavailable.kind is FailureKind.FAILED
    assert isinstance(unavailable.cause, UpstreamError)
    assert "cannot connect" in str(unavailable.cause)
    assert recovered.text() == f"contents of {ALLOWED_PATH}"
    events = [entry["event"] for entry in read_record(record) if entry["event"] != "stop"]
    assert events == ["start", "call", "refused", "start", "call"]


async def test_refresh_picks_up_a_changed_tool_list_and_removed_tools_fail_closed(
    record: Path, variant: Path
) -> None:
    changes: list[int] = []
    async with UpstreamSet([_stdio(record, variant)]) as upstreams:
        upstreams.on_change = lambda: changes.append(1)
        search = _tool(upstreams, "search")
        read_file = _tool(upstreams, "read_file")
        unchanged = await upstreams.refresh()

        _write(variant, "v2")
        changed = await upstreams.refresh()
        names = [tool.definition().name for tool in upstreams.tools()]
        same = _tool(upstreams, "read_file") is read_file  # an unchanged tool is kept as is
        removed = await _failure(search, '{"query": "q", "tenant": "acme"}')
        kept = await _call(_tool(upstreams, "read_file"), f'{{"path": "{ALLOWED_PATH}"}}')
        wrote = await _call(_tool(upstreams, "write_file"), '{"path": "/a", "content": "abc"}')

    assert (unchanged, changed) == (False, True)
    assert changes == [1]
    assert names == ["files.stat_v1.2", "read_file", "write_file"]
    assert same
    assert removed.kind is FailureKind.FAILED
    assert "no longer available" in (removed.output.text() or "")
    assert kept.text() == f"contents of {ALLOWED_PATH}"
    assert wrote.text() == "wrote 3 bytes"
    # The removed tool's call never reached the upstream.
    assert calls(read_record(record)) == [
        ("read_file", {"path": ALLOWED_PATH}),
        ("write_file", {"path": "/a", "content": "abc"}),
    ]


async def test_an_unreachable_upstream_is_reported_and_serves_no_tools(
    record: Path, variant: Path, tmp_path: Path
) -> None:
    broken = McpUpstreamConfig(
        name="broken", command=str(tmp_path / "no-such-server"), timeout_s=10.0
    )
    async with UpstreamSet([broken, _stdio(record, variant)]) as upstreams:
        names = [tool.definition().name for tool in upstreams.tools()]
        errors = upstreams.errors

    assert names == ["read_file", "search"]
    assert list(errors) == ["broken"]
    assert "cannot connect" in errors["broken"]


async def test_names_served_by_the_gateway_or_an_earlier_upstream_are_not_imported_again(
    record: Path, variant: Path, tmp_path: Path
) -> None:
    second = _stdio(tmp_path / "second.jsonl", variant, name="second")
    async with UpstreamSet([_stdio(record, variant), second], reserved=["search"]) as upstreams:
        served = [(tool.upstream.name, tool.definition().name) for tool in upstreams.tools()]
        skipped = {(item.upstream, item.name): item.reason for item in upstreams.skipped}

    assert served == [("files", "read_file")]
    assert "already serves a tool of that name" in skipped[("files", "search")]
    assert skipped[("second", "read_file")] == "upstream 'files' already serves it"


async def test_an_upstream_over_streamable_http(record: Path, tmp_path: Path) -> None:
    app = build_server(record).streamable_http_app(host="127.0.0.1")
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", ws="none", lifespan="on", access_log=False)
    )
    async with serving(server) as url:
        config = McpUpstreamConfig(
            name="remote", url=f"{url}/mcp", prefix="remote__", timeout_s=20.0
        )
        async with UpstreamSet([config]) as upstreams:
            names = [tool.definition().name for tool in upstreams.tools()]
            output = await _call(
                _tool(upstreams, "remote__read_file"), f'{{"path": "{ALLOWED_PATH}"}}'
            )
            failure = await _failure(_tool(upstreams, "remote__read_file"), '{"path": "/missing"}')

    assert names == ["remote__read_file", "remote__search"]
    assert output.text() == f"contents of {ALLOWED_PATH}"
    assert failure.output.text() == "no such file: /missing"
    assert calls(read_record(record)) == [
        ("read_file", {"path": ALLOWED_PATH}),
        ("read_file", {"path": "/missing"}),
    ]


async def test_the_service_rebuilds_the_gateway_when_the_upstream_tools_change(
    write_config: ConfigWriter, record: Path, variant: Path
) -> None:
    service = McpService(load_config(write_config(stdio_context=WRITER)))
    async with service, Client(service.front.server, cache=None) as client:
        before = sorted(tool.name for tool in (await client.list_tools()).tools)
        old = service.gateway

        _write(variant, "v2")
        assert await service.refresh()
        after = sorted(tool.name for tool in (await client.list_tools()).tools)
        # In-process there is no HTTP request: the configured stdio context applies.
        wrote = await client.call_tool(
            "write_file", {"path": "/srv/tenants/acme/n.txt", "content": "x"}
        )
        # A gateway built before the change still holds the removed tool: it fails closed.
        with caller_context(WRITER):
            stale = await old.call(ToolCall("c-1", "search", '{"query": "q", "tenant": "acme"}'))
        gone = await client.call_tool("search", {"query": "q", "tenant": "acme"})

    assert before == ["read_file", "search"]
    # files.stat_v1.2 has no settings in the shipped policies: it is served, not listed.
    assert after == ["read_file", "write_file"]
    assert service.gateway is not old
    assert not wrote.is_error
    assert stale.code == "tool_failed"
    assert "no longer available" in (stale.message or "")
    assert gone.is_error
    assert (gone.meta or {}).get("gateway/code") == "unknown_tool"
    assert calls(read_record(record)) == [
        ("write_file", {"path": "/srv/tenants/acme/n.txt", "content": "x"})
    ]


class _Waits:
    """An injected ``sleep``: records each wait and returns when the test lets it."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._go = asyncio.Queue[None]()
        self.waiting = asyncio.Queue[float]()

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await self.waiting.put(delay)
        await self._go.get()

    def release(self) -> None:
        self._go.put_nowait(None)


async def test_an_upstream_down_at_start_is_retried_with_backoff_and_served_when_it_comes_up(
    record: Path, variant: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _write(variant, "dead")
    waits = _Waits()
    changes: list[int] = []
    listed = asyncio.Event()

    def changed() -> None:
        changes.append(1)
        listed.set()

    upstreams = UpstreamSet(
        [_stdio(record, variant)],
        on_change=changed,
        retry_s=(0.5, 1.5),
        sleep=waits,
    )
    with caplog.at_level("WARNING", logger="gateway.mcp"):
        async with upstreams:
            assert upstreams.tools() == []
            assert list(upstreams.errors) == ["files"]
            await asyncio.wait_for(waits.waiting.get(), 30)
            for _ in range(2):  # still down: each wait is longer, up to the longest
                waits.release()
                await asyncio.wait_for(waits.waiting.get(), 30)
            _write(variant, "")
            waits.release()
            await asyncio.wait_for(listed.wait(), 30)  # the retry listed the tools
            names = [tool.definition().name for tool in upstreams.tools()]
            errors = upstreams.errors

    assert waits.delays == [0.5, 1.0, 1.5]
    assert names == ["read_file", "search"]
    assert errors == {}
    assert changes == [1]
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(m.startswith("upstream files is down:") for m in messages)
    assert "upstream files is back: serving 2 tool(s)" in messages
