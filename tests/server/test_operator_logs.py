"""The service's operator lines with a real OPA: one that dies while serving, one never there."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from gateway.testing import OpaServer
from tests.server.conftest import ALICE, GatewayFactory, call_body, key, start_opa


class Lines(logging.Handler):
    """Keeps the text of every gateway record."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage())


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


async def test_an_opa_that_dies_while_serving_is_one_line_however_many_calls_it_refuses(
    start_gateway: GatewayFactory, opa_binary: str, lines: Lines
) -> None:
    opa: OpaServer = start_opa(opa_binary)
    try:
        running = start_gateway("opa", opa_url=opa.url)
        async with running.client() as http:
            body = call_body("add", {"a": 1, "b": 2})
            assert (await http.post("/v1/calls", json=body, headers=key(ALICE))).status_code == 200
            opa.stop()
            for a in range(2, 5):  # not the cached decision's arguments
                other = call_body("add", {"a": a, "b": 2})
                refused = await http.post("/v1/calls", json=other, headers=key(ALICE))
                assert refused.status_code == 503
    finally:
        opa.stop()
    down = [text for text in lines.texts if "is not answering" in text]
    assert len(down) == 1
    assert down[0].startswith(f"engine opa:{opa.url} is not answering (engine_unavailable)")
    assert any(text.startswith("gateway serve: serving") for text in lines.texts)


async def test_an_opa_that_is_not_there_at_start_is_said_at_start(
    start_gateway: GatewayFactory, lines: Lines
) -> None:
    start_gateway("opa", opa_url="http://127.0.0.1:9")
    (line,) = [text for text in lines.texts if "is not ready" in text]
    assert line.startswith("engine opa:http://127.0.0.1:9 is not ready (engine_unavailable)")
    startup = next(text for text in lines.texts if text.startswith("gateway serve: serving"))
    assert "engine opa:http://127.0.0.1:9" in startup
    assert "policy revision unknown" in startup
