"""Fuzzing ``Gateway.call``, the pipeline every surface shares, with a file audit trail.

``Gateway.call`` takes untrusted ToolCalls from library callers too, where ids and names
may hold anything a Python string can (lone surrogates included). Whatever arrives, the
call gets a documented code, nothing runs without an allow, and no input can break the
audit trail for the calls after it.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings

from gateway import ToolCall
from gateway.audit import AuditTrail, JsonlFileSink, head_path, trail_files, verify
from gateway.server import Gateway
from gateway.testing import RecordingAuthorizer, RecordingTool
from reliability.faults import DOCUMENTED_CODES
from tests.reliability.fuzzing import STRICT_SCHEMA, arguments, call_ids, check_admitted, names


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_any_tool_call_gets_a_documented_code_and_never_breaks_the_trail() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "audit.jsonl"
        sink = JsonlFileSink(path, fsync="none")
        tool = RecordingTool("strict", STRICT_SCHEMA)
        authorizer = RecordingAuthorizer(True)
        gateway = Gateway([tool], authorizer=authorizer, audit=AuditTrail(sink))
        runner = asyncio.Runner()
        seen: list[tuple[str, str, str]] = []
        try:

            @settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
            @given(call_id=call_ids, name=names("strict"), raw=arguments)
            @example(call_id="\ud800", name="strict", raw='{"a": 1}')
            @example(call_id="c", name="strict\udc00", raw='{"a": 1}')
            @example(call_id="c", name="strict", raw='{"a": 1, "n": 1e400}')
            def run(call_id: str, name: str, raw: str | bytes) -> None:
                before = tool.count
                result = runner.run(gateway.call(ToolCall(call_id, name, raw)))
                assert result.code in DOCUMENTED_CODES, result
                assert result.code != "tool_error", result
                assert (tool.count - before) == (1 if result.code == "ok" else 0)
                if _encodable(call_id) and _encodable(name):
                    # Only a call whose own id or name cannot be written may fail its audit.
                    assert result.code != "audit_failed", (call_id, name, raw)
                    seen.append((call_id, name, result.code))

            run()
            ok = runner.run(gateway.call(ToolCall("after", "strict", '{"a": 7}')))
            assert ok.code == "ok"
        finally:
            runner.close()
            sink.close()
        for raw in tool.calls:
            check_admitted(raw, STRICT_SCHEMA)
        verdict = verify(trail_files(path), head=head_path(path))
        assert verdict.ok, verdict.error
        records = [json.loads(line) for line in path.read_bytes().splitlines()]
        audited = {(r["call_id"], r["type"]) for r in records}
        for call_id, _, code in seen:
            if call_id:
                assert (call_id, "outcome") in audited, (call_id, code)
            if code == "ok":
                assert (call_id, "decision") in audited
