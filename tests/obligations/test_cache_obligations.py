"""The decision cache keeps a decision's obligations: a cached allow still redacts."""

from __future__ import annotations

import asyncio
import json

from gateway import Decision, Guard, ToolCall, ToolOutput, bind
from gateway.policy import CachingAuthorizer, DecisionCache, InputDocument, read_decision
from gateway.testing import RecordingTool

ROWS = json.dumps({"rows": [{"ssn": "123-45-6789"}]})


def test_a_cached_decision_keeps_its_obligations_and_they_are_fulfilled_again() -> None:
    asked: list[str] = []

    async def decide(document: InputDocument) -> Decision:
        asked.append(document.digest)
        return read_decision(
            {
                "allow": True,
                "cache": {"ttl_s": 60},
                "obligations": [{"type": "redact_output", "pointers": ["/rows/*/ssn"]}],
            }
        )

    authorizer = CachingAuthorizer(decide, engine="e", path="p", cache=DecisionCache())
    tool = RecordingTool("t", {"type": "object"}, output=ToolOutput.from_json(ROWS))
    binding = bind(Guard(tool=tool, authorizer=authorizer))

    async def twice() -> list[ToolOutput]:
        return [await binding.call(binding.prepare(ToolCall("c", "t", "{}"))) for _ in range(2)]

    outputs = asyncio.run(twice())
    assert len(asked) == 1
    assert [o.json() for o in outputs] == [{"rows": [{"ssn": "[redacted]"}]}] * 2
