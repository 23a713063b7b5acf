"""``completion/complete``: forwarded to the upstream serving the prompt or resource template,
decided by the policy as the action ``mcp.completion.complete`` (the shipped policies grant
it to no one). End to end: the service under uvicorn, the SDK client, the test upstream as a
stdio subprocess (2026-07-28).
"""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest
from mcp import MCPError

from tests.mcp.conftest import ConfigWriter, audit_records
from tests.mcp.test_bridge import connect, served
from tests.mcp.upstream_server import read_record

TEMPLATE = "file:///srv/tenants/{tenant}/{name}"


async def test_an_allowed_completion_is_the_upstreams_answer_for_its_prompt_or_template(
    write_config: ConfigWriter, record: Path, allow_all: Path
) -> None:
    config = write_config(stdio_context=None, policies=allow_all, decision_path="relay/decision")
    async with served(config) as url, connect(url, mode="2026-07-28") as client:
        prompt = await client.complete(
            types.PromptReference(name="summarize"), {"name": "topic", "value": "q"}
        )
        template = await client.complete(
            types.ResourceTemplateReference(uri=TEMPLATE), {"name": "name", "value": "x"}
        )
        unknown = await client.complete(
            types.PromptReference(name="nothing"), {"name": "topic", "value": "q"}
        )
    assert prompt.completion.values == ["q1", "q2", "q3"]
    assert template.completion.values == ["x9"]
    # A prompt no upstream serves: nothing to complete, nothing forwarded.
    assert unknown.completion.values == []
    asked = [(e["ref"], e["argument"]) for e in read_record(record) if e["event"] == "complete"]
    assert asked == [("summarize", "topic"), (TEMPLATE, "name")]


async def test_the_shipped_policies_refuse_a_completion_and_it_never_reaches_the_upstream(
    write_config: ConfigWriter, record: Path, audit_path: Path
) -> None:
    config = write_config(stdio_context=None)
    async with served(config) as url, connect(url) as client:
        with pytest.raises(MCPError) as refused:
            await client.complete(
                types.PromptReference(name="summarize"), {"name": "topic", "value": "q"}
            )
    assert refused.value.code == -32010
    assert not [e for e in read_record(record) if e["event"] == "complete"]
    decisions = [
        (r["tool"], r["result"]) for r in audit_records(audit_path) if r["type"] == "decision"
    ]
    assert decisions == [("mcp.completion.complete", "deny")]
