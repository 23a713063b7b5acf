"""A misbehaving HTTP server standing in for OPA, switchable at run time.

:class:`FaultyFront` listens on 127.0.0.1 (its own event loop, in its own thread). In
``proxy`` mode it forwards every request to a real OPA and relays the answer, so the
gateway behind it decides with the real policy; in the other modes it misbehaves on every
request: a body that is not JSON, an HTTP 502 with an HTML page, a body dripped one byte at
a time past any deadline, or TCP resets (before and in the middle of an answer). Every body
it makes up carries :data:`MARKER`, text that must never reach a caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Final

import aiohttp

#: Text only the misbehaving server ever says; no response of the gateway may contain it.
MARKER: Final = "RELIABILITY-ENGINE-TEXT-7f3a"

_START_TIMEOUT: Final = 10.0
_STOP_TIMEOUT: Final = 10.0
_UPSTREAM_TIMEOUT: Final = 10.0
_MAX_HEAD: Final = 64 * 1024


class FrontMode(enum.StrEnum):
    """How the front answers."""

    PROXY = "proxy"
    GARBAGE = "garbage"
    BAD_GATEWAY = "bad_gateway"
    DRIP = "drip"
    RESET = "reset"


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    target: str
    body: bytes


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return None
    if len(head) > _MAX_HEAD:
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) != 3:
        return None
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return _Request(parts[0], parts[1], body)


def _head(status: int, length: int, content_type: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status} Status\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode("ascii")


def _reset(writer: asyncio.StreamWriter) -> None:
    # SO_LINGER with a zero timeout turns the close into a TCP RST.
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultyFront:
    """An HTTP/1.1 front for a real OPA that misbehaves on demand.

    Args:
        upstream: the real OPA's base URL (``http://127.0.0.1:<port>``).
        drip_length: how many body bytes a dripped answer promises.
        drip_every: seconds between two dripped bytes.
    """

    def __init__(self, upstream: str, *, drip_length: int = 64, drip_every: float = 0.1) -> None:
        self._upstream = upstream.rstrip("/")
        self._drip_length = drip_length
        self._drip_every = drip_every
        self._mode = FrontMode.PROXY
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faulty-front", daemon=True)
        self._port = 0
        self._failure: BaseException | None = None

    # -- control (any thread) -------------------------------------------------------------

    def start(self) -> FaultyFront:
        """Start listening; returns once the port is bound.

        Raises:
            RuntimeError: the server did not start in time.
        """
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT) or self._port == 0:
            raise RuntimeError(f"faulty front did not start: {self._failure!r}")
        return self

    def stop(self) -> None:
        """Drop every connection, stop the server and its thread (idempotent)."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(stopping.set)
            self._thread.join(_STOP_TIMEOUT)

    def __enter__(self) -> FaultyFront:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def mode(self) -> FrontMode:
        """The current behaviour."""
        with self._lock:
            return self._mode

    def set_mode(self, mode: FrontMode) -> None:
        """Switch behaviour; requests read from now on get the new one."""
        with self._lock:
            self._mode = mode

    def counts(self) -> dict[str, int]:
        """Requests answered per mode so far."""
        with self._lock:
            return dict(self._counts)

    # -- the server (its own thread and loop) ----------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported through start()
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        handlers: set[asyncio.Task[None]] = set()
        writers: set[asyncio.StreamWriter] = set()
        timeout = aiohttp.ClientTimeout(total=_UPSTREAM_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                task = asyncio.current_task()
                if task is not None:
                    handlers.add(task)
                writers.add(writer)
                try:
                    await self._connection(session, reader, writer)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    pass
                finally:
                    writer.transport.abort()
                    writers.discard(writer)
                    if task is not None:
                        handlers.discard(task)

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self._port = server.sockets[0].getsockname()[1]
            self._ready.set()
            try:
                await self._stopping.wait()
            finally:
                server.close()
                for writer in list(writers):
                    writer.transport.abort()
                for task in list(handlers):
                    task.cancel()
                await asyncio.gather(*handlers, return_exceptions=True)
                await server.wait_closed()

    async def _connection(
        self,
        session: aiohttp.ClientSession,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        while (request := await _read_request(reader)) is not None:
            mode = self.mode
            with self._lock:
                self._counts[mode.value] = self._counts.get(mode.value, 0) + 1
                number = self._counts[mode.value]
            if mode is FrontMode.PROXY:
                await self._proxy(session, request, writer)
            elif mode is FrontMode.GARBAGE:
                body = MARKER.encode() + b" <not json at all"
                writer.write(_head(200, len(body)) + body)
                await writer.drain()
            elif mode is FrontMode.BAD_GATEWAY:
                body = f"<html><body>502 {MARKER}</body></html>".encode()
                writer.write(_head(502, len(body), "text/html") + body)
                await writer.drain()
            elif mode is FrontMode.DRIP:
                await self._drip(writer)
                return
            else:
                if number % 2:
                    writer.write(_head(200, 100) + b'{"result": {"allow": tr')
                    await writer.drain()
                _reset(writer)
                return

    async def _proxy(
        self, session: aiohttp.ClientSession, request: _Request, writer: asyncio.StreamWriter
    ) -> None:
        headers = {"Content-Type": "application/json"} if request.body else None
        try:
            async with session.request(
                request.method,
                self._upstream + request.target,
                data=request.body or None,
                headers=headers,
            ) as response:
                status, body = response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError):
            status, body = 502, f"upstream unreachable {MARKER}".encode()
        writer.write(_head(status, len(body)) + body)
        await writer.drain()

    async def _drip(self, writer: asyncio.StreamWriter) -> None:
        writer.write(_head(200, self._drip_length))
        await writer.drain()
        for _ in range(self._drip_length):
            await asyncio.sleep(self._drip_every)
            writer.write(b" ")
            await writer.drain()
