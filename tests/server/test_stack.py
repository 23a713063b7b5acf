"""The service runs on uvicorn's fast stack: uvloop's event loop and httptools' parser."""

from __future__ import annotations

import asyncio

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.server import run_on_fastest_loop, server_stack
from gateway.testing import LiveServer


def test_the_service_is_served_with_uvloop_and_httptools() -> None:
    # Both are dependencies: a missing one is a broken install, not a platform choice here.
    assert server_stack() == {"loop": "uvloop", "http": "httptools"}


def test_a_server_configured_with_that_stack_parses_http_with_httptools() -> None:
    config = uvicorn.Config(Starlette(), **server_stack())
    config.load()

    assert config.http_protocol_class is HttpToolsProtocol


def test_a_command_runs_its_coroutine_on_a_uvloop_event_loop() -> None:
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run_on_fastest_loop(loop_module).startswith("uvloop")


def test_a_live_server_answers_over_httptools_on_uvloop() -> None:
    seen: dict[str, str] = {}

    async def where(request: Request) -> JSONResponse:
        seen["loop"] = type(asyncio.get_running_loop()).__module__
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/", where)])
    server = LiveServer(app).start()
    try:
        response = httpx.get(server.url + "/", timeout=30)
    finally:
        server.stop()

    assert response.json() == {"ok": True}
    assert seen["loop"].startswith("uvloop")
