"""Security properties of the service under hostile use.

- masked fields never reach an audit record or a log line, whatever path the call takes;
- no engine text (OPA's error bodies, a stand-in server's garbage, regorus' messages, an
  engine error's message or detail) ever reaches a response;
- unauthenticated requests never reach the policy, the tools or the audit trail;
- the size limits hold: request body, argument document, nesting, name length.
"""

from __future__ import annotations

import itertools
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import Failure, FailureKind, Invocation, ToolDefinition, ToolOutput
from gateway.policy import EngineError
from gateway.service._middleware import API_KEY_CHALLENGE
from gateway.testing import RecordingTool, StaticEngine
from reliability.faults import FAULTS, FaultEnvironment
from reliability.front import MARKER, FaultyFront, FrontMode
from reliability.service import build, service_config, serving
from tests.reliability.apps import AsgiCaller, assemble, check_response
from tests.reliability.fuzzing import MAX_BYTES, MAX_DEPTH, nested, sized

# -- masked fields -----------------------------------------------------------------------------

PASSWORD: Final = "pa55-\u2603-hunter2-XYZZY"  # noqa: S105 - a test secret
TOKEN: Final = "tok-0123456789abcdef-QWERTY"  # noqa: S105 - a test secret
API_KEY: Final = "ak-live-secret-PLUGH"
IBAN: Final = "DE44500105175407324931"
SECRETS: Final = (PASSWORD, TOKEN, API_KEY, IBAN)

LOGIN_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "password": {"type": "string", "maxLength": 40},
        "token": {"type": "string"},
        "nested": {"type": "object", "properties": {"api_key": {"type": "string"}}},
        "iban": {"type": "string"},
        "short": {"type": "string", "maxLength": 4},
    },
    "required": ["user"],
    "additionalProperties": False,
}


class LoginTool:
    """Fails with a message that echoes the password when the user is ``failing``."""

    def __init__(self) -> None:
        self._definition = ToolDefinition("login", LOGIN_SCHEMA)
        self.calls = 0

    def definition(self) -> ToolDefinition:
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        self.calls += 1
        arguments = json.loads(invocation.arguments)
        if arguments["user"] == "failing":
            raise Failure(
                FailureKind.FAILED,
                f"login failed for password {arguments.get('password')}",
                cause=ValueError(arguments.get("password")),
            )
        if arguments["user"] == "rejecting":
            raise Failure(FailureKind.REJECTED, f"token {arguments.get('token')} refused")
        return ToolOutput.from_text("welcome")


def login_policy(document: dict[str, Any]) -> dict[str, Any]:
    """Allows, denies echoing the secrets, or fails with the secrets in its detail."""
    arguments = document["arguments"]
    user = arguments["user"]
    if user == "engine-error":
        raise EngineError(
            f"engine failed on {arguments.get('password')}",
            detail=f"token={arguments.get('token')} key={arguments.get('nested')}",
        )
    if user == "mallory":
        return {
            "allow": False,
            "message": f"wrong password {arguments.get('password')}",
            "reasons": [
                f"token {arguments.get('token')} is revoked",
                f"iban {arguments.get('iban')}",
            ],
        }
    return {"allow": True, "reasons": [f"api key {arguments.get('nested')}"]}


@pytest.mark.parametrize(
    ("user", "extra", "expected"),
    [
        ("alice", {}, "ok"),
        ("mallory", {}, "denied"),
        ("engine-error", {}, "engine_error"),
        ("failing", {}, "tool_failed"),
        ("rejecting", {}, "tool_rejected"),
        ("alice", {"short": PASSWORD}, "invalid_arguments"),  # the schema error quotes it
        ("alice", {"password": PASSWORD * 3}, "invalid_arguments"),
    ],
)
def test_masked_fields_never_reach_the_audit_trail_or_the_logs(
    user: str, extra: dict[str, str], expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    engine = StaticEngine({"gateway/authz/decision": login_policy})
    tool = LoginTool()
    context = {"subject": "carol", "tenant": "acme", "token": TOKEN}  # a secret in the context
    with tempfile.TemporaryDirectory() as folder:
        parts = assemble(
            Path(folder), engine, [tool], {"carol-key": context}, masked=["iban", "short"]
        )
        arguments = {
            "user": user,
            "password": PASSWORD,
            "token": TOKEN,
            "nested": {"api_key": API_KEY},
            "iban": IBAN,
            **extra,
        }
        body = json.dumps({"id": "login-1", "name": "login", "arguments": arguments})
        with AsgiCaller(parts.app) as caller:
            response = caller.post(body.encode(), {"X-API-Key": "carol-key"})
            unauthenticated = caller.post(body.encode(), {"X-API-Key": TOKEN})
        assert check_response(response) == expected, response.text
        assert unauthenticated.status_code == 401
        parts.verify()
        trail = parts.audit_bytes()
        records = parts.records()
    assert records, "nothing was audited"
    logged = caplog.text + "".join(
        f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records
    )
    for secret in SECRETS:
        for form in (secret, json.dumps(secret)[1:-1]):  # raw, and as JSON escapes it
            assert form.encode() not in trail, (secret, expected)
            assert form not in logged, (secret, expected)
    masked = [r for r in records if r["type"] == "decision"]
    for record in masked:
        assert str(record["arguments"]["password"]).startswith("masked:")
        assert str(record["context"]["token"]).startswith("masked:")


# -- engine text -------------------------------------------------------------------------------

#: Words only an engine (OPA, aiohttp, regorus, our stand-in) would say.
ENGINE_WORDS: Final = (
    MARKER,
    "eval_conflict_error",
    "conflicting",
    "internal_error",
    "aiohttp",
    "Traceback",
    "Errno",
    "ClientPayloadError",
    "ServerDisconnected",
    "not a JSON object",
    "OPA answered",
    "regorus",
    "inexact",
    "embedded engine",
    "ENGINE-PRIVATE",
)


FRESH: Final = itertools.count(1000)


def assert_no_engine_text(response: httpx.Response) -> None:
    """Neither the body nor any header carries engine text."""
    seen = response.text + json.dumps(dict(response.headers))
    for word in ENGINE_WORDS:
        assert word not in seen, (word, response.status_code, response.text)


@pytest.fixture(scope="module")
def opa_service(front: FaultyFront) -> Iterator[str]:
    """The real service, engine ``opa`` through the faulty front, on a real socket."""
    with tempfile.TemporaryDirectory() as folder:
        config = service_config(
            audit_path=Path(folder) / "audit.jsonl", opa_url=front.url, timeout_s=0.5
        )
        with serving(build(config).app) as url:
            yield url


@pytest.mark.parametrize(
    "fault",
    [f for f in FAULTS if f.kind in ("policy", "front")],
    ids=lambda f: f.name,
)
async def test_engine_text_never_reaches_a_response(
    fault: Any, environment: FaultEnvironment, opa_service: str
) -> None:
    headers = {"X-API-Key": "reliability-key-alice"}

    def body() -> dict[str, Any]:
        # Fresh arguments every time: a cached allow would not ask the engine at all.
        return {"id": "c1", "name": "add", "arguments": {"a": next(FRESH), "b": 2}}

    async with httpx.AsyncClient(base_url=opa_service, timeout=10.0) as client:
        healthy = await client.post("/v1/calls", json=body(), headers=headers)
        assert healthy.status_code == 200, healthy.text
        await environment.inject(fault)
        try:
            responses = [
                await client.post("/v1/calls", json=body(), headers=headers) for _ in range(3)
            ]
            responses.append(await client.get("/readyz"))
        finally:
            await environment.clear(fault)
        recovered = await client.post("/v1/calls", json=body(), headers=headers)
    for response in responses[:-1]:
        assert response.status_code == 503, response.text
        assert response.json()["code"] == fault.expected
        assert (
            response.json()["message"] == "no policy decision could be made; the call was not run"
        )
    for response in responses:
        assert_no_engine_text(response)
    assert recovered.status_code == 200


def test_front_modes_cover_every_misbehaviour() -> None:
    assert {f.mode for f in FAULTS if f.kind == "front"} == set(FrontMode) - {FrontMode.PROXY}


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (EngineError("ENGINE-PRIVATE message", detail="ENGINE-PRIVATE detail"), "engine_error"),
        ({"allow": "yes", "message": "ENGINE-PRIVATE"}, "malformed_decision"),
        ({"allow": True, "extra": "ENGINE-PRIVATE"}, "malformed_decision"),
        ("ENGINE-PRIVATE", "malformed_decision"),
    ],
    ids=["engine-error", "non-boolean", "extra-member", "string"],
)
def test_engine_errors_and_malformed_decisions_show_only_the_code(answer: Any, code: str) -> None:
    def decide(_: dict[str, Any]) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    engine = StaticEngine({"gateway/authz/decision": decide})
    parts = assemble(None, engine, [RecordingTool("open")], {"k": {"subject": "s"}})
    with AsgiCaller(parts.app) as caller:
        response = caller.post(b'{"id": "c", "name": "open", "arguments": {}}', {"X-API-Key": "k"})
    assert response.status_code == 503
    assert response.json()["code"] == code
    assert_no_engine_text(response)
    [decision] = [r for r in parts.records() if r["type"] == "decision"]
    assert decision["code"] == code  # the audit trail keeps what the caller does not see
    if isinstance(answer, EngineError):
        assert "ENGINE-PRIVATE detail" in decision["detail"]


def test_a_number_no_float_holds_is_decided_exactly_by_the_embedded_engine() -> None:
    # OPA's compiled policy reads numbers exactly: 2**53 + 1 is decided, not refused.
    with tempfile.TemporaryDirectory() as folder:
        built = build(service_config(audit_path=Path(folder) / "audit.jsonl"))
        with AsgiCaller(built.app) as caller:
            response = caller.post(
                b'{"id": "c", "name": "add", "arguments": {"a": 9007199254740993, "b": 1}}',
                {"X-API-Key": "reliability-key-alice"},
            )
        assert built.sink is not None
        built.sink.close()
    assert response.status_code == 200
    assert response.json()["output"]["content"][0]["text"] == "9007199254740994"


# -- authentication ----------------------------------------------------------------------------

printable = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80)
credentials: st.SearchStrategy[dict[str, str]] = st.one_of(
    st.just({}),
    printable.map(lambda key: {"X-API-Key": key}),
    printable.map(lambda value: {"Authorization": value}),
    printable.map(lambda token: {"Authorization": f"Bearer {token}"}),
    st.sampled_from(
        [
            {"Authorization": "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJyb290In0."},
            {"Authorization": "Basic cm9vdDpyb290"},
            {"X-API-Key": "x" * 9000},
            {"X-API-Key": "", "Authorization": "Bearer good-key"},
            {"X-Api-Key": "GOOD-KEY"},
        ]
    ),
)


def test_unauthenticated_requests_never_reach_the_policy_the_tools_or_the_trail() -> None:
    engine = StaticEngine({"gateway/authz/decision": {"allow": True}})
    tool = RecordingTool("open")
    parts = assemble(None, engine, [tool], {"good-key": {"subject": "s"}})
    statuses: set[int] = set()
    with AsgiCaller(parts.app) as caller:

        @settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
        @given(headers=credentials, body=st.sampled_from([b'{"id":"c","name":"open"}', b"junk"]))
        def run(headers: dict[str, str], body: bytes) -> None:
            if any(value.strip() == "good-key" for value in headers.values()):
                return  # that one is a real credential
            response = caller.post(body, headers)
            statuses.add(response.status_code)
            assert response.status_code == 401, (headers, response.text)
            assert response.json()["code"] == "unauthenticated"
            # Only API keys are configured: the challenge names their header.
            assert response.headers["WWW-Authenticate"] == API_KEY_CHALLENGE
            listing = caller.request("GET", "/v1/tools", headers=headers)
            assert listing.status_code == 401

        run()
        control = caller.post(b'{"id":"c","name":"open"}', {"X-API-Key": "good-key"})
    assert statuses == {401}
    assert engine.count == 1, "only the control call reached the policy"
    assert tool.count == 1, "only the control call reached the tool"
    assert control.status_code == 200
    assert [r["call_id"] for r in parts.records()] == ["c", "c"]


# -- size limits -------------------------------------------------------------------------------

SMALL_BODY: Final = 4096


def test_the_body_limit_holds_with_and_without_a_declared_length() -> None:
    engine = StaticEngine({"gateway/authz/decision": {"allow": True}})
    tool = RecordingTool("open")
    parts = assemble(None, engine, [tool], {"k": {"subject": "s"}}, max_body_bytes=SMALL_BODY)
    padding = "x" * SMALL_BODY
    over = json.dumps({"id": "c", "name": "open", "arguments": {"s": padding}}).encode()
    fits = json.dumps({"id": "c", "name": "open", "arguments": {"s": "x" * 4000}}).encode()
    assert len(fits) <= SMALL_BODY < len(over)

    def chunks(data: bytes) -> Iterator[bytes]:
        for start in range(0, len(data), 1000):
            yield data[start : start + 1000]

    with serving(parts.app) as url, httpx.Client(base_url=url, timeout=10.0) as client:
        declared = client.post("/v1/calls", content=over, headers={"X-API-Key": "k"})
        streamed = client.post("/v1/calls", content=chunks(over), headers={"X-API-Key": "k"})
        small = client.post("/v1/calls", content=chunks(fits), headers={"X-API-Key": "k"})
    assert "content-length" not in streamed.request.headers
    for response in (declared, streamed):
        assert response.status_code == 413, response.text
        assert response.json()["code"] == "body_too_large"
    assert small.status_code == 200, small.text
    assert engine.count == tool.count == 1


@pytest.mark.parametrize(
    ("arguments", "status", "code"),
    [
        (sized(MAX_BYTES), 200, "ok"),
        (sized(MAX_BYTES + 1), 400, "invalid_arguments"),
        (nested(MAX_DEPTH), 200, "ok"),
        (nested(MAX_DEPTH + 1), 400, "invalid_arguments"),
    ],
    ids=["1MiB", "1MiB+1", "depth-64", "depth-65"],
)
def test_the_argument_limits_hold_through_the_api(arguments: str, status: int, code: str) -> None:
    engine = StaticEngine({"gateway/authz/decision": {"allow": True}})
    tool = RecordingTool("open", output=ToolOutput.from_text("ran"))
    parts = assemble(None, engine, [tool], {"k": {"subject": "s"}}, max_body_bytes=4 * MAX_BYTES)
    for form in ("text", "object"):
        member = json.dumps(arguments) if form == "text" else arguments
        body = ('{"id": "c", "name": "open", "arguments": ' + member + "}").encode()
        with AsgiCaller(parts.app) as caller:
            response = caller.post(body, {"X-API-Key": "k"})
        assert response.status_code == status, (form, response.text[:300])
        assert check_response(response) == code
    assert engine.count == tool.count == (2 if status == 200 else 0)


def _deep_body(levels: int) -> bytes:
    """A call body whose arguments nest ``levels`` objects (the body one more)."""
    return b'{"id":"c","name":"open","arguments":' + b'{"x":' * levels + b"1" + b"}" * (levels + 1)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        # The body may nest 80 levels (admission then refuses arguments past 64), not 81.
        (_deep_body(79), 400, "invalid_arguments"),
        (_deep_body(80), 400, "malformed_request"),
        (b'{"id":"c","name":"' + b"n" * 65 + b'"}', 404, "unknown_tool"),
        (b'{"id":"' + b"i" * 100_000 + b'","name":"open"}', 200, "ok"),
    ],
    ids=["body-depth-80", "body-depth-81", "name-65", "long-id"],
)
def test_request_limits_hold(body: bytes, status: int, code: str) -> None:
    engine = StaticEngine({"gateway/authz/decision": {"allow": True}})
    tool = RecordingTool("open")
    parts = assemble(None, engine, [tool], {"k": {"subject": "s"}}, max_body_bytes=4 * MAX_BYTES)
    with AsgiCaller(parts.app) as caller:
        response = caller.post(body, {"X-API-Key": "k"})
    assert response.status_code == status, response.text[:300]
    assert check_response(response) == code
    assert tool.count == (1 if status == 200 else 0)
