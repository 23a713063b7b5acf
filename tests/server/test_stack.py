"""The service runs on uvicorn's fast stack: uvloop's event loop and httptools' parser."""

from __future__ import annotations

import asyncio
import pathlib
import socket
import threading

import anyio
import httpx
import sniffio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

import gateway
from gateway.policy import caller_context, current_caller
from gateway.server import named_asyncio, run_on_fastest_loop, server_stack
from gateway.service import loop_context
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


def test_a_command_names_its_loop_to_anyio_in_every_task_and_only_while_it_runs() -> None:
    # anyio asks which loop it runs on before every primitive; the name answers in one
    # context-variable read instead of asking asyncio (a getpid system call on 3.11).
    async def names() -> list[str | None]:
        seen = [sniffio.current_async_library_cvar.get()]

        async def child() -> None:
            seen.append(sniffio.current_async_library_cvar.get())

        async with anyio.create_task_group() as group:
            group.start_soon(child)
        await asyncio.create_task(child())
        return seen

    assert run_on_fastest_loop(names) == ["asyncio", "asyncio", "asyncio"]
    assert sniffio.current_async_library_cvar.get() is None


def test_a_uvicorn_server_run_inside_the_name_sees_it_in_each_request() -> None:
    # How `gateway serve` and each worker run uvicorn: Server.run inside named_asyncio.
    seen: list[str | None] = []

    async def where(request: Request) -> JSONResponse:
        seen.append(sniffio.current_async_library_cvar.get())
        return JSONResponse({"ok": True})

    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            Starlette(routes=[Route("/", where)]),
            log_config=None,
            access_log=False,
            lifespan="off",
            **server_stack(),
        )
    )

    def serve() -> None:
        with named_asyncio():
            server.run(sockets=[sock])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for _ in range(300):
            if server.started:
                break
            thread.join(0.05)
        assert server.started
        responses = [httpx.get(f"http://127.0.0.1:{port}/", timeout=30) for _ in range(2)]
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()

    assert [response.json() for response in responses] == [{"ok": True}] * 2
    assert seen == ["asyncio", "asyncio"]


def test_a_fresh_task_context_keeps_the_loop_name_and_nothing_else() -> None:
    # Upstream sessions run in a fresh context (no caller's client request may leak into
    # them); a bare contextvars.Context() would also drop the loop's name.
    async def seen() -> tuple[str | None, object]:
        return sniffio.current_async_library_cvar.get(), current_caller().as_dict()

    async def main() -> tuple[str | None, object]:
        with caller_context(subject="alice"):
            task = asyncio.get_running_loop().create_task(seen(), context=loop_context())
            return await task

    assert run_on_fastest_loop(main) == ("asyncio", {})
    # Outside a named loop there is no name to carry.
    assert loop_context().run(sniffio.current_async_library_cvar.get) is None


def test_the_gateway_makes_fresh_task_contexts_only_through_loop_context() -> None:
    # A task started in a bare contextvars.Context() loses the loop's name: every anyio
    # primitive in it pays a getpid again. Fresh contexts come from loop_context().
    root = pathlib.Path(gateway.__file__).parent
    bare = [
        str(path.relative_to(root))
        for path in sorted(root.rglob("*.py"))
        if "contextvars.Context()" in path.read_text()
    ]
    # loop_context itself, and the shadow worker, which runs no anyio.
    assert bare == ["replay/_shadow.py", "service/_stack.py"]
