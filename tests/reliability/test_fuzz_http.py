"""Fuzzing the HTTP API: hostile bodies, ids, names and arguments, in process and on a socket.

Every answer is a documented status and code with a JSON body; nothing is ever a 500; every
argument document a tool received validates against its schema; and afterwards the service
still answers a normal call and its audit trail verifies (no input can break the trail).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.testing import RecordingTool, StaticEngine
from reliability.service import build, service_config, serving
from tests.reliability.apps import AsgiCaller, Assembled, assemble, check_response
from tests.reliability.fuzzing import (
    OPEN_SCHEMA,
    STRICT_SCHEMA,
    arguments,
    call_ids,
    check_admitted,
    hostile_text,
    json_objects,
    json_texts,
    names,
    plausible_objects,
)

KEY: Final = "fuzz-key"
HEADERS: Final = {"X-API-Key": KEY, "Content-Type": "application/json"}
CONTEXT: Final = {"subject": "fuzzer", "roles": ["tester"], "tenant": "acme"}
ALLOW: Final = {"allow": True, "cache": {"ttl_s": 60}}


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


def _argument_member(raw: str | bytes | None) -> str:
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if raw.lstrip().startswith("{"):
        return ',"arguments":' + raw  # spliced in as a JSON value, verbatim
    return ',"arguments":' + _string(raw)  # as JSON text in a string


@st.composite
def call_bodies(draw: st.DrawFn) -> bytes:
    """``{"id", "name", "arguments"}`` with hostile parts, encoded by hand."""
    call_id = draw(st.one_of(call_ids, hostile_text))
    name = draw(st.one_of(names("strict"), names("open")))
    raw = draw(st.one_of(st.none(), plausible_objects, json_objects, arguments))
    text = '{"id":' + _string(call_id) + ',"name":' + _string(name) + _argument_member(raw) + "}"
    return text.encode("utf-8", "surrogatepass")


odd_bodies = st.one_of(
    st.binary(max_size=120),
    json_texts.map(lambda text: text.encode("utf-8")),
    st.sampled_from(
        [
            b"",
            b"{}",
            b"[]",
            b"null",
            b'{"id": 1, "name": "open"}',
            b'{"id": "a", "name": "open", "arguments": []}',
            b'{"id": "a", "name": "open", "arguments": 1}',
            b'{"id": "a", "name": "open", "extra": 1}',
            b'{"id": "a", "id": "b", "name": "open"}',
            b'{"id": "a", "name": "open", "arguments": {"x": 1}} trailing',
            b'{"id": "\\ud800", "name": "open"}',
            b'{"id": "a", "name": "open", "arguments": "{\\"s\\": \\"\\\\ud800\\"}"}',
            b'{"id": "a", "name": "open", "arguments": {"n": 1e400}}',
            b'{"id": "a", "name": "open", "arguments": {"n": ' + b"1" * 5000 + b"}}",
            b'{"id": "a", "name": "open", "arguments": ' + b'{"x":' * 85 + b"1" + b"}" * 85 + b"}",
            b'{"id": "a", "name": "open", "arguments": ' + b"[" * 70 + b"]" * 70 + b"}",
            b'{"id": "a", "name": "' + b"n" * 100 + b'"}',
        ]
    ),
)
bodies = st.one_of(call_bodies(), call_bodies(), odd_bodies)


class Service:
    """An in-process service with a permissive engine and two recording tools."""

    def __init__(self, folder: Path) -> None:
        self.strict = RecordingTool("strict", STRICT_SCHEMA)
        self.open = RecordingTool("open", OPEN_SCHEMA)
        self.engine = StaticEngine({"gateway/authz/decision": ALLOW})
        self.parts: Assembled = assemble(
            folder, self.engine, [self.strict, self.open], {KEY: CONTEXT}
        )

    def check_tools(self) -> None:
        """Every argument document a tool received validates against its schema."""
        for raw in self.strict.calls:
            check_admitted(raw, STRICT_SCHEMA)
        for raw in self.open.calls:
            check_admitted(raw, OPEN_SCHEMA)

    def check_still_serving(self, post: Any) -> None:
        """A normal call still runs, and the audit trail verifies."""
        response = post(b'{"id": "after", "name": "open", "arguments": {"ok": true}}', HEADERS)
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "ok"
        self.parts.verify()


@pytest.fixture
def service() -> Iterator[Service]:
    with tempfile.TemporaryDirectory() as folder:
        yield Service(Path(folder))


def test_hostile_bodies_in_process_get_only_documented_answers(service: Service) -> None:
    codes: dict[str, int] = {}
    with AsgiCaller(service.parts.app) as caller:

        @settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(body=bodies)
        @example(body=b'{"id": "a", "name": "open", "arguments": {"n": 1e400}}')
        @example(body=b'{"id": "a", "name": "open", "arguments": {"n": -1E+999999999}}')
        def run(body: bytes) -> None:
            code = check_response(caller.post(body, HEADERS))
            codes[code] = codes.get(code, 0) + 1

        run()
        service.check_tools()
        service.check_still_serving(caller.post)
    assert codes.get("ok", 0) > 0, codes  # the fuzzer reached the tools
    assert codes.get("invalid_arguments", 0) > 0, codes
    assert codes.get("malformed_request", 0) > 0, codes
    assert "audit_failed" not in codes, codes


def test_hostile_bodies_on_a_real_socket_get_only_documented_answers(service: Service) -> None:
    with serving(service.parts.app) as url, httpx.Client(base_url=url, timeout=30.0) as client:

        def post(body: bytes, headers: dict[str, str]) -> httpx.Response:
            return client.post("/v1/calls", content=body, headers=headers)

        @settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
        @given(body=bodies)
        @example(body=b'{"id": "a", "name": "open", "arguments": {"n": 1e400}}')
        def run(body: bytes) -> None:
            check_response(post(body, HEADERS))

        run()
        service.check_tools()
        service.check_still_serving(post)


def test_hostile_bodies_against_the_shipped_policies_on_the_embedded_engine() -> None:
    # The service exactly as `gateway serve` builds it: the embedded engine refuses numbers
    # it cannot hold exactly (engine_error, 503), the policies deny, admission refuses.
    with tempfile.TemporaryDirectory() as folder:
        built = build(service_config(audit_path=Path(folder) / "audit.jsonl"))
        headers = {"X-API-Key": "reliability-key-alice"}
        with AsgiCaller(built.app) as caller:

            @settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
            @given(
                call_id=call_ids,
                name=st.sampled_from(["add", "pay", "nope"]),
                raw=st.one_of(json_objects, arguments),
            )
            @example(call_id="c", name="add", raw='{"a": 1e400, "b": 1}')
            @example(call_id="c", name="add", raw='{"a": 9007199254740993, "b": 1}')
            def run(call_id: str, name: str, raw: str | bytes) -> None:
                body = (
                    '{"id":'
                    + _string(call_id)
                    + ',"name":'
                    + _string(name)
                    + _argument_member(raw)
                    + "}"
                ).encode("utf-8", "surrogatepass")
                check_response(caller.post(body, headers))

            run()
            ok = caller.post(b'{"id": "z", "name": "add", "arguments": {"a": 1, "b": 2}}', headers)
            assert ok.status_code == 200, ok.text
        assert built.sink is not None
        built.sink.close()
