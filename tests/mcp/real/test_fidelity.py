"""Real clients through ``gateway mcp`` in front of the real reference servers.

Each client (the Python SDK client, the TypeScript SDK client, the Inspector CLI) runs one
plan over stdio and over streamable HTTP, in each protocol era it can choose, through the
gateway and directly against the same servers:

- ``tools/list``: every upstream tool's metadata (title, annotations, output schema, input
  schema, description) reaches the client as the server sent it;
- allowed calls (text, image, structured content, embedded resources, resource links,
  annotated content) come back exactly as from the direct call, member for member and in
  the same order, but for the gateway's own ``_meta`` members;
- denied and invalid calls are refused by the gateway and never reach the upstream (the
  wire recorder in front of each server proves it).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.mcp.real.clients import (
    Call,
    Target,
    Transcript,
    inspector_client,
    python_client,
    typescript_client,
)
from tests.mcp.real.conftest import (
    HttpGateway,
    World,
    direct_command,
    gateway_stdio,
    reader_tools,
)

#: The tools the test policy lets the reader call: the ones its listing shows it.
GRANTED = reader_tools()

#: The calls the test policy allows, by upstream (``{acme}``: the caller tenant's folder).
ALLOWED: dict[str, list[Call]] = {
    "everything": [
        Call("echo", {"message": 'hello \u2603 "quoted" \\ back'}),
        Call("get-sum", {"a": 2, "b": 3.5}),
        Call("get-tiny-image", {}),
        Call("get-structured-content", {"location": "Chicago"}),
        Call("get-resource-links", {"count": 4}),
        Call("get-resource-reference", {"resourceType": "Text", "resourceId": 2}),
        Call("get-resource-reference", {"resourceType": "Blob", "resourceId": 3}),
        Call("get-annotated-message", {"messageType": "error", "includeImage": True}),
        Call("get-annotated-message", {"messageType": "success", "includeImage": False}),
    ],
    "fs": [
        Call("read_text_file", {"path": "{acme}/report.txt"}),
        Call("read_media_file", {"path": "{acme}/pixel.png"}),
        Call("list_directory", {"path": "{acme}"}),
    ],
    "time": [
        Call(
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        ),
    ],
    # Listed only: its one tool is not granted (and would need the network).
    "fetch": [],
}


@dataclass(frozen=True)
class Refused:
    call: Call
    codes: frozenset[str]
    #: True for a recorded upstream call that would mean this one got through.
    reached: Callable[[dict[str, Any]], bool]


def _refused(folder: Path) -> list[Refused]:
    acme, globex = folder / "acme", folder / "globex"

    def named(name: str) -> Callable[[dict[str, Any]], bool]:
        return lambda call: call.get("name") == name

    def touching(text: str) -> Callable[[dict[str, Any]], bool]:
        return lambda call: text in json.dumps(call.get("arguments"))

    return [
        # Not granted to the caller's role.
        Refused(Call("get-env", {}), frozenset({"denied"}), named("get-env")),
        # A destructive tool the role does not grant.
        Refused(
            Call("write_file", {"path": f"{acme}/new.txt", "content": "x"}),
            frozenset({"denied"}),
            named("write_file"),
        ),
        # Another tenant's folder, directly and by traversal.
        Refused(
            Call("read_text_file", {"path": f"{globex}/payroll.txt"}),
            frozenset({"denied"}),
            touching("payroll"),
        ),
        Refused(
            Call("read_text_file", {"path": f"{acme}/../globex/payroll.txt"}),
            frozenset({"denied"}),
            touching("payroll"),
        ),
        # Arguments the tool's input schema refuses.
        Refused(
            Call("echo", {"message": 42}),
            frozenset({"invalid_arguments"}),
            lambda call: call.get("name") == "echo" and call["arguments"] == {"message": 42},
        ),
        Refused(
            Call("get-sum", {"a": "two", "b": 3}),
            frozenset({"invalid_arguments"}),
            lambda call: call.get("name") == "get-sum" and call["arguments"].get("a") == "two",
        ),
        # mcp-server-fetch's tool: no settings in the policy data, so refused.
        Refused(
            Call("fetch", {"url": "http://127.0.0.1:9/"}), frozenset({"denied"}), named("fetch")
        ),
        # A tool no upstream serves.
        Refused(Call("no-such-tool", {}), frozenset({"unknown_tool"}), named("no-such-tool")),
    ]


def _resolve(calls: list[Call], folder: Path) -> list[Call]:
    def fill(value: Any) -> Any:
        return value.replace("{acme}", str(folder / "acme")) if isinstance(value, str) else value

    return [Call(c.name, {k: fill(v) for k, v in c.arguments.items()}) for c in calls]


def allowed(world: World) -> list[tuple[str, Call]]:
    return [
        (upstream, call)
        for upstream, calls in ALLOWED.items()
        for call in _resolve(calls, world.upstreams.folder)
    ]


#: ``_meta`` members that are the gateway's own (or a protocol era's own) and not the tool's.
def _own_meta(key: str) -> bool:
    return key.startswith(("gateway/", "io.modelcontextprotocol/"))


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A result without the members the gateway or the protocol era adds to every result."""
    out = {k: v for k, v in result.items() if k not in ("_meta", "resultType")}
    meta = {k: v for k, v in (result.get("_meta") or {}).items() if not _own_meta(k)}
    if meta:
        out["_meta"] = meta
    # A client fills in isError: false when the server leaves it out.
    if out.get("isError") is False:
        del out["isError"]
    return out


#: server-everything stamps its generated resources with the time the server started.
_STARTED_AT = re.compile(r"\b\d{1,2}:\d{2}:\d{2}\s?[AP]M\b")


def _unstamped(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _unstamped(v) for k, v in value.items()}
        if isinstance(out.get("blob"), str):
            text = base64.b64decode(out["blob"]).decode("utf-8", "replace")
            if _STARTED_AT.search(text):
                out["blob"] = _STARTED_AT.sub("<time>", text)
        return out
    if isinstance(value, list):
        return [_unstamped(v) for v in value]
    if isinstance(value, str):
        return _STARTED_AT.sub("<time>", value)
    return value


def encoded(result: dict[str, Any]) -> str:
    """The comparable result as JSON text, members in the order the client got them.

    The one thing that differs between two runs of server-everything, the start time it
    writes into its generated resources, is masked on both sides.
    """
    return json.dumps(_unstamped(comparable(result)), ensure_ascii=False)


# --- the runs -------------------------------------------------------------------------------

CLIENTS = [
    ("python", "stdio", "legacy"),
    ("python", "stdio", "2026-07-28"),
    ("python", "http", "legacy"),
    ("python", "http", "2026-07-28"),
    ("typescript", "stdio", "legacy"),
    ("typescript", "http", "legacy"),
    ("inspector", "stdio", "legacy"),
    ("inspector", "http", "legacy"),
    ("inspector", "http", "modern"),
]


@dataclass
class Run:
    client: str
    transport: str
    era: str
    gateway: Transcript
    allowed: list[tuple[str, Call]]
    refused: list[Refused]


def _client(world: World, client: str, era: str, tmp: Path) -> Callable[..., Transcript]:
    def run(target: Target, calls: list[Call]) -> Transcript:
        if client == "python":
            return python_client(target, era, calls)  # type: ignore[arg-type]
        if client == "typescript":
            return typescript_client(world.peers, target, calls, tmp)
        return inspector_client(world.peers, target, era, calls)  # type: ignore[arg-type]

    return run


@pytest.fixture(scope="module", params=CLIENTS, ids=["-".join(c) for c in CLIENTS])
def run(
    request: pytest.FixtureRequest,
    world: World,
    tmp_path_factory: pytest.TempPathFactory,
) -> Run:
    client, transport, era = request.param
    tmp = tmp_path_factory.mktemp("plans")
    drive = _client(world, client, era, tmp)
    if transport == "stdio":
        target = Target(command=tuple(gateway_stdio(world.config)))
    else:
        http: HttpGateway = request.getfixturevalue("http_gateway")
        target = Target(url=http.url)
    calls = allowed(world)
    refused = _refused(world.upstreams.folder)
    if client == "inspector":
        # The Inspector refuses a tool the listing does not show itself, before sending it:
        # one no upstream serves, and one the policy does not show the caller.
        refused = [r for r in refused if r.call.name in GRANTED]
    if client == "inspector" and transport == "stdio":
        # Every Inspector run launches its own gateway: a text, an image and a refusal do.
        calls = [c for c in calls if c[1].name in ("get-tiny-image", "read_text_file")]
        refused = refused[2:3]
    transcript = drive(target, [c for _, c in calls] + [r.call for r in refused])
    return Run(client, transport, era, transcript, calls, refused)


@dataclass
class Direct:
    tools: dict[str, dict[str, Any]]
    results: list[dict[str, Any]]


_DIRECT: dict[str, Direct] = {}


@pytest.fixture(scope="module")
def direct(run: Run, world: World, tmp_path_factory: pytest.TempPathFactory) -> Direct:
    """The same plan by the same client directly against each server (its own era: legacy)."""
    key = f"{run.client}:{','.join(c.name + json.dumps(c.arguments) for _, c in run.allowed)}"
    if key in _DIRECT:
        return _DIRECT[key]
    drive = _client(world, run.client, "legacy", tmp_path_factory.mktemp("direct"))
    tools: dict[str, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    for upstream in ALLOWED:
        calls = [c for name, c in run.allowed if name == upstream]
        target = Target(command=tuple(direct_command(world.peers, world.upstreams, upstream)))
        transcript = drive(target, calls)
        tools.update((tool["name"], tool) for tool in transcript.tools)
        results += transcript.results
    # Back in the plan's order.
    order = [name for name in ALLOWED for n, _ in run.allowed if n == name]
    assert len(order) == len(results)
    _DIRECT[key] = Direct(tools, results)
    return _DIRECT[key]


def _listed(tool: dict[str, Any], era: str) -> dict[str, Any]:
    tool = dict(tool)
    if era != "legacy":
        # 2026-07-28 moved task support (`execution`) into the tasks extension.
        tool.pop("execution", None)
    return tool


# --- the tests ------------------------------------------------------------------------------


def test_tools_list_shows_each_tool_the_caller_may_call_as_its_upstream_lists_it(
    run: Run, direct: Direct
) -> None:
    listed = {tool["name"]: tool for tool in run.gateway.tools}
    # What the policy's visibility decision shows the reader: the tools it may call.
    assert set(listed) == GRANTED & set(direct.tools)
    for name, tool in listed.items():
        assert _listed(tool, run.era) == _listed(direct.tools[name], run.era), name
    # The members a host decides on are there, as the server sent them.
    read = listed["read_text_file"]
    assert read["annotations"]["readOnlyHint"] is True
    assert read["title"] == direct.tools["read_text_file"]["title"]
    assert listed["get-structured-content"]["outputSchema"]["required"] == [
        "temperature",
        "conditions",
        "humidity",
    ]


def test_tools_list_never_shows_a_tool_the_caller_may_not_call(run: Run, direct: Direct) -> None:
    listed = {tool["name"] for tool in run.gateway.tools}
    hidden = set(direct.tools) - GRANTED
    assert {"write_file", "get-env", "fetch"} <= hidden
    assert not listed & hidden


def test_an_allowed_call_comes_back_exactly_as_from_a_direct_call_of_the_same_server(
    run: Run, direct: Direct
) -> None:
    got = run.gateway.results[: len(run.allowed)]
    for (upstream, call), through, plain in zip(run.allowed, got, direct.results, strict=True):
        assert encoded(through) == encoded(plain), (upstream, call.name)
        assert through.get("isError") in (None, False), (upstream, call.name)


def test_allowed_results_cover_text_image_structured_embedded_resources_and_links(
    run: Run,
) -> None:
    got = run.gateway.results[: len(run.allowed)]
    kinds = {block["type"] for result in got for block in result["content"]}
    if run.client == "inspector" and run.transport == "stdio":
        assert {"text", "image"} <= kinds
        return
    assert {"text", "image", "resource", "resource_link"} <= kinds
    assert any("structuredContent" in result for result in got)
    embedded = [b for r in got for b in r["content"] if b["type"] == "resource"]
    assert any("blob" in b["resource"] for b in embedded)
    assert any("text" in b["resource"] for b in embedded)
    assert all(b["resource"]["uri"] and b["resource"].get("mimeType") for b in embedded)
    assert any("annotations" in b for r in got for b in r["content"])


def test_a_denied_or_invalid_call_is_refused_and_never_reaches_the_upstream(
    run: Run, world: World
) -> None:
    got = run.gateway.results[len(run.allowed) :]
    reached = world.upstreams.all_calls()
    for refused, result in zip(run.refused, got, strict=True):
        assert result.get("isError") is True, refused.call
        assert result["_meta"]["gateway/code"] in refused.codes, (refused.call, result)
        assert not any(refused.reached(call) for call in reached), refused.call
    # And the allowed ones did reach it (the recorder sees what the gateway forwards).
    assert any(call.get("name") == "get-tiny-image" for call in reached)


def test_the_negotiated_protocol_revision_is_the_one_the_client_asked_for(run: Run) -> None:
    if run.client == "inspector":
        # A pinned modern era has no fallback in the Inspector: a run that listed tools
        # negotiated it; the legacy runs used the Inspector's own handshake.
        assert run.gateway.tools
        return
    expected = "2026-07-28" if run.era == "2026-07-28" else "2025-11-25"
    assert run.gateway.version == expected
