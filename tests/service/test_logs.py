"""Operator logs: state lines (engine, audit, upstream), start-up line, JSON format, access log."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway import ToolCall
from gateway.audit import AuditTrail, MemorySink
from gateway.policy import (
    DEFAULT_DECISION_PATH,
    CallerContext,
    EngineTimeoutError,
    EngineUnavailableError,
    PolicyAuthorizer,
)
from gateway.service import AccessLog, Gateway, ServiceLog, StateLog, configure_logging
from gateway.service._config_models import ConfigError, LogTable
from gateway.service._logs import (
    Startup,
    check_log_table,
    engine_name,
    public_url,
    startup_line,
)
from gateway.service._observe import ServiceObserver
from gateway.testing import FakeClock, RecordingTool, StaticEngine
from tests.logging_capture import restored_logging

SECRET = "engine-internal-s3cr3t"  # noqa: S105 - a canary, not a credential
ALICE = CallerContext(subject="alice")


class Lines(logging.Handler):
    """Keeps every record's final text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def texts(self) -> list[str]:
        return [record.getMessage() for record in self.records]


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("gateway")
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


# -- StateLog ----------------------------------------------------------------------------------


def _state(clock: FakeClock, interval: float = 10.0) -> StateLog:
    return StateLog(logging.getLogger("gateway.test"), "thing", interval=interval, clock=clock)


def test_a_state_change_is_one_line_and_the_same_state_again_is_none(lines: Lines) -> None:
    clock = FakeClock()
    state = _state(clock)
    assert state.report("down", level=logging.ERROR, text="is down")
    clock.advance(60)
    assert not state.report("down", level=logging.ERROR, text="is down")
    assert not state.report("down", level=logging.ERROR, text="is down")
    assert lines.texts == ["thing is down (0.0 s after the last change logged)"]


def test_a_flapping_component_gets_at_most_one_line_per_interval_and_the_rest_counted(
    lines: Lines,
) -> None:
    clock = FakeClock()
    state = _state(clock)
    state.report("down", level=logging.ERROR, text="is down")
    for _ in range(50):
        clock.advance(0.01)
        state.report("up", level=logging.INFO, text="is up")
        clock.advance(0.01)
        state.report("down", level=logging.ERROR, text="is down")
    clock.advance(0.01)
    state.report("up", level=logging.INFO, text="is up")
    assert len(lines.records) == 1
    clock.advance(10)
    state.report("up", level=logging.INFO, text="is up")
    assert len(lines.records) == 2
    assert lines.texts[1].startswith("thing is up (")
    assert "100 more change(s) in between not logged" in lines.texts[1]


def test_the_state_held_back_by_the_interval_is_written_at_the_next_report_after_it(
    lines: Lines,
) -> None:
    clock = FakeClock()
    state = _state(clock)
    state.report("down", level=logging.ERROR, text="is down")
    clock.advance(1)
    assert not state.report("up", level=logging.INFO, text="is up")  # held back
    clock.advance(10)
    assert state.report("up", level=logging.INFO, text="is up")  # the current state, now
    assert [r.levelno for r in lines.records] == [logging.ERROR, logging.INFO]


# -- engine and audit state through the pipeline -----------------------------------------------


def _gateway(
    engine: StaticEngine, sink: MemorySink, clock: FakeClock
) -> tuple[Gateway, ServiceLog]:
    log = ServiceLog("opa:http://user:pw@127.0.0.1:8181/base?token=t", interval=10, clock=clock)
    gateway = Gateway(
        [RecordingTool("echo")],
        authorizer=PolicyAuthorizer(engine),
        audit=AuditTrail(sink),
        observer=ServiceObserver(log, audited=True),
    )
    return gateway, log


def _call(arguments: str = '{"text": "hello"}') -> ToolCall:
    return ToolCall("c1", "echo", arguments)


async def test_an_engine_that_stops_answering_is_one_line_with_its_code_only_and_recovery_one(
    lines: Lines,
) -> None:
    clock = FakeClock()
    down: dict[str, Exception | None] = {
        "error": EngineUnavailableError("OPA is unreachable", detail=f"ECONNREFUSED {SECRET}")
    }

    def answer(document: Any) -> Any:
        error = down["error"]
        if error is not None:
            raise error
        return {"allow": True}

    gateway, _ = _gateway(StaticEngine({DEFAULT_DECISION_PATH: answer}), MemorySink(), clock)
    for _ in range(5):
        assert (await gateway.call(_call(), caller=ALICE)).code == "engine_unavailable"
    down["error"] = None
    clock.advance(30)
    assert (await gateway.call(_call(), caller=ALICE)).code == "ok"
    assert (await gateway.call(_call(), caller=ALICE)).code == "ok"

    engine_lines = [r for r in lines.records if "engine" in r.getMessage()]
    assert [r.levelno for r in engine_lines] == [logging.ERROR, logging.WARNING]
    failed, recovered = (r.getMessage() for r in engine_lines)
    assert failed.startswith(
        "engine opa:http://127.0.0.1:8181 is not answering (engine_unavailable)"
    )
    assert recovered.startswith(
        "engine opa:http://127.0.0.1:8181 answers again (5 call(s) refused)"
    )
    everything = "\n".join(lines.texts)
    assert SECRET not in everything
    assert "pw" not in everything
    assert "token" not in everything
    assert "hello" not in everything


async def test_a_timeout_after_unavailability_is_a_change_of_state_of_its_own(lines: Lines) -> None:
    clock = FakeClock()
    errors: list[Exception] = [EngineUnavailableError("x"), EngineTimeoutError("y")]

    def answer(document: Any) -> Any:
        raise errors[0]

    gateway, _ = _gateway(StaticEngine({DEFAULT_DECISION_PATH: answer}), MemorySink(), clock)
    await gateway.call(_call(), caller=ALICE)
    errors.pop(0)
    clock.advance(11)
    assert (await gateway.call(_call(), caller=ALICE)).code == "engine_timeout"
    assert ["engine_unavailable" in t or "engine_timeout" in t for t in lines.texts] == [True, True]
    assert "(engine_timeout)" in lines.texts[1]


async def test_an_audit_trail_that_cannot_be_written_is_one_line_and_its_recovery_one_line(
    lines: Lines,
) -> None:
    clock = FakeClock()
    sink = MemorySink()
    engine = StaticEngine({DEFAULT_DECISION_PATH: {"allow": True}})
    gateway, _ = _gateway(engine, sink, clock)
    sink.failing = True
    for arguments in ('{"text": "hello"}', "{", '{"text": "hello again"}'):
        code = (await gateway.call(_call(arguments), caller=ALICE)).code
        assert code in ("audit_failed", "invalid_arguments")
    sink.failing = False
    clock.advance(11)
    assert (await gateway.call(_call(), caller=ALICE)).code == "ok"
    audit_lines = [r for r in lines.records if r.getMessage().startswith("audit trail")]
    assert [r.levelno for r in audit_lines] == [logging.ERROR, logging.WARNING]
    assert "cannot be written (audit sink is failing)" in audit_lines[0].getMessage()
    assert audit_lines[1].getMessage().startswith("audit trail is written again")
    assert "hello" not in "\n".join(lines.texts)


async def test_cached_decisions_do_not_count_as_the_engine_answering() -> None:
    clock = FakeClock()
    log = ServiceLog("embedded", interval=0, clock=clock)
    log.engine_failed("engine_timeout")
    observer = ServiceObserver(log, audited=False)
    from gateway import Decision

    with observer.deciding(None) as watch:  # type: ignore[arg-type]
        watch.answered(Decision(True, cached=True))
    assert log.engine.state == "engine_timeout"
    with observer.deciding(None) as watch:  # type: ignore[arg-type]
        watch.answered(Decision(True))
    assert log.engine.state == "up"


# -- names, the start-up line ------------------------------------------------------------------


@given(
    user=st.text("abcdefghij:%", min_size=1, max_size=8),
    secret=st.text("ABCDEFGHIJ", min_size=4, max_size=12),
    path=st.text("abcdef/", max_size=10),
)
def test_a_url_in_a_log_line_keeps_only_scheme_host_and_port(
    user: str, secret: str, path: str
) -> None:
    url = f"https://{user}:{secret}@opa.example:8181/{path}?token={secret}#{secret}"
    shown = public_url(url)
    assert shown == "https://opa.example:8181"
    assert secret not in engine_name(f"opa:{url}")


def test_the_start_up_line_says_surface_where_tools_engine_decision_revision_and_audit() -> None:
    line = startup_line(
        Startup(
            surface="serve",
            tools=("add", "search"),
            engine="opa:http://u:p@127.0.0.1:8181",
            revision="bundle:v7",
            decision_path="gateway/authz/decision",
            audit="/var/log/gateway/audit.jsonl",
            listening="http://127.0.0.1:8080",
        )
    )
    assert line == (
        "gateway serve: serving 2 tools on http://127.0.0.1:8080 [add, search]; engine "
        "opa:http://127.0.0.1:8181, decision gateway/authz/decision, policy revision "
        "bundle:v7; audit /var/log/gateway/audit.jsonl"
    )


# -- configure_logging: format, level, libraries -----------------------------------------------


@pytest.fixture
def root_restored() -> Iterator[None]:
    with restored_logging():
        yield


@pytest.mark.usefixtures("root_restored")
def test_the_json_format_writes_one_json_object_a_line() -> None:
    stream = io.StringIO()
    configure_logging(LogTable(format="json", level="info"), stream=stream)
    logging.getLogger("gateway.service").warning("engine %s is down", "opa:x")
    logging.getLogger("gateway.access").info("GET / 200", extra={"status": 200})
    logging.getLogger("gateway.service").debug("not at info")
    parsed = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(p["level"], p["logger"], p["message"]) for p in parsed] == [
        ("warning", "gateway.service", "engine opa:x is down"),
        ("info", "gateway.access", "GET / 200"),
    ]
    assert parsed[0]["time"].endswith("Z")
    assert parsed[1]["status"] == 200


@pytest.mark.usefixtures("root_restored")
def test_the_start_up_line_is_written_at_every_level_and_library_debug_lines_never() -> None:
    stream = io.StringIO()
    configure_logging(LogTable(level="error"), stream=stream)
    logging.getLogger("gateway.startup").info("gateway serve: serving 1 tools")
    configure_logging(LogTable(level="debug"), stream=stream)
    logging.getLogger("mcp.server").debug("Received message: {...}")
    logging.getLogger("httpx").info("HTTP Request: POST ...")
    logging.getLogger("any_library.module").info("sending %s", "CANARY")
    logging.getLogger("gatewayish").info("not the gateway's own: CANARY")
    logging.getLogger("any_library.module").warning("a warning passes")
    logging.getLogger("gateway.policy").debug("the gateway's own debug line")
    written = stream.getvalue()
    assert written.count("\n") == 3
    assert "serving 1 tools" in written
    assert "a warning passes" in written
    assert "the gateway's own debug line" in written
    assert "CANARY" not in written


@pytest.mark.parametrize(
    ("table", "key"),
    [
        (LogTable(format="yaml"), "log.format"),
        (LogTable(level="verbose"), "log.level"),
        (LogTable(state_interval_s=-1), "log.state_interval_s"),
    ],
)
def test_a_log_value_no_logger_takes_is_refused_by_its_key(table: LogTable, key: str) -> None:
    with pytest.raises(ConfigError, match=f"^{key}: "):
        check_log_table(table)


# -- the access log ----------------------------------------------------------------------------


async def test_the_access_log_has_method_path_status_duration_and_request_id_never_the_query(
    lines: Lines,
) -> None:
    async def home(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hi", headers={"X-Request-ID": "req-1"}, status_code=201)

    clock = FakeClock()
    app = AccessLog(Starlette(routes=[Route("/v1/calls", home, methods=["POST"])]), clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        await c.post("/v1/calls?api_key=SECRET-QUERY", content=b'{"secret": "BODY"}')
    (record,) = [r for r in lines.records if r.name == "gateway.access"]
    assert record.getMessage() == "POST /v1/calls 201 0.0 ms request req-1"
    assert "SECRET" not in record.getMessage()
    assert "BODY" not in record.getMessage()
