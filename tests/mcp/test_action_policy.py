"""The shipped policy's MCP actions on the committed bundle (the embedded engine), fuzzed.

Whatever URI a client sends, a read the policy allows names a resource below the caller's
tenant prefix by a spelling no layer could read otherwise: no dot segment, no
percent-encoding, query, fragment, backslash, doubled slash, white space or non-ASCII.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy import EmbeddedEngine
from tests.mcp.conftest import REPO

PREFIX = "file:///srv/tenants/acme/"
CONTEXT = {"subject": "alice", "roles": ["reader"], "tenant": "acme"}
_ALPHABET = st.sampled_from(
    [
        *"abcXYZ019",
        ".",
        "..",
        "/",
        "//",
        "%2e",
        "%2F",
        "\\",
        "?",
        "#",
        " ",
        "\n",
        "é",
        ":",
        "@",
        "~",
    ]
)


@pytest.fixture(scope="module")
def engine() -> Iterator[EmbeddedEngine]:
    with EmbeddedEngine.from_bundle(REPO / "bundles" / "policies.tar.gz", timeout_s=10.0) as found:
        yield found


def _decide(engine: EmbeddedEngine, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    document = {
        "tool": {"name": tool, "description": "", "input_schema": {"type": "object"}},
        "arguments": arguments,
        "facts": {"version": 1, "arguments": {}},
        "context": CONTEXT,
    }
    answer = engine.evaluate_sync("gateway/authz/decision", json.dumps(document).encode())
    assert answer.defined
    value: dict[str, Any] = answer.value
    return value


def _read(uri: str) -> dict[str, Any]:
    return {"action": "resources/read", "version": 1, "server": "files", "uri": uri}


def _plainly_inside(uri: str) -> bool:
    rest = uri[len(PREFIX) :]
    return (
        uri.startswith(PREFIX)
        and uri.isascii()
        and not any(part in {".", ".."} for part in uri.split("/"))
        and not any(char in uri for char in "%?#\\ \n\t")
        and "//" not in "/" + rest
    )


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_ALPHABET, max_size=8), prefixed=st.booleans())
def test_an_allowed_read_is_plainly_inside_the_tenants_prefix(
    engine: EmbeddedEngine, parts: list[str], prefixed: bool
) -> None:
    uri = (PREFIX if prefixed else "file:///srv/tenants/") + "".join(parts)

    decision = _decide(engine, "mcp.resources.read", _read(uri))

    if decision["allow"] is True:
        assert _plainly_inside(uri), uri


@settings(max_examples=100, deadline=None)
@given(name=st.text(max_size=12), value=st.text(max_size=20))
def test_only_the_listed_prompt_with_plain_arguments_is_allowed(
    engine: EmbeddedEngine, name: str, value: str
) -> None:
    arguments = {
        "action": "prompts/get",
        "version": 1,
        "server": "files",
        "prompt": name,
        "arguments": {"topic": value},
    }

    decision = _decide(engine, "mcp.prompts.get", arguments)

    if decision["allow"] is True:
        assert name == "summarize"
        assert not any(ord(char) < 0x20 or ord(char) == 0x7F for char in value)


def test_an_action_of_another_contract_version_is_denied(engine: EmbeddedEngine) -> None:
    decision = _decide(engine, "mcp.resources.read", {**_read(PREFIX + "a.txt"), "version": 2})
    allowed = _decide(engine, "mcp.resources.read", _read(PREFIX + "a.txt"))

    assert decision["allow"] is False
    assert decision["message"] == "this request is not understood"
    assert allowed["allow"] is True
