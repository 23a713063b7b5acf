"""The stdio transport: newline-delimited JSON-RPC read as bytes, before the SDK decodes it.

The SDK's own stdio reader decodes stdin as UTF-8 with replacement characters and parses
each line leniently, which would change a tool call's arguments before admission. Here each
line is read as bytes with :func:`~gateway.mcp._wire.read_jsonrpc`: the arguments reach
admission verbatim, and a line that is not strict JSON, or not a JSON-RPC message, is
answered with a JSON-RPC error that quotes nothing of it. Every error written back goes
through :func:`~gateway.mcp._wire.public_error_data` (the transport boundary): a protocol
error the server raises (an unknown method, invalid params) quotes nothing either.

While serving, file descriptor 0 points at the null device and 1 at stderr (as the SDK
does), so a child process or stray ``print`` can neither read the wire nor write to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Final

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.file import FileReadStream, FileWriteStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage

from gateway.mcp._wire import (
    INVALID_REQUEST,
    MESSAGE_SCOPE_KEY,
    WireError,
    public_error_data,
    read_jsonrpc,
)

#: The largest accepted line (one message), in bytes.
DEFAULT_MAX_LINE_BYTES: Final = 2 * 1024 * 1024
#: How long the messages already handed over may take to write once stdin has ended (s).
DRAIN_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class StdioRequest:
    """What a stdio message carries to the handler, shaped like an HTTP request's ``scope``."""

    scope: Mapping[str, Any] = field(default_factory=dict)


def _error_line(error: WireError) -> bytes:
    body = types.JSONRPCError(
        jsonrpc="2.0",
        id=error.request_id,
        error=public_error_data(types.ErrorData(code=error.code, message=error.message)),
    )
    return body.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


async def _lines(stdin: anyio.abc.ByteReceiveStream, limit: int) -> AsyncIterator[bytes | None]:
    """Each line without its newline; ``None`` for a line longer than ``limit``."""
    buffer = bytearray()
    skipping = False
    while True:
        try:
            chunk = await stdin.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            break
        buffer.extend(chunk)
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                if len(buffer) > limit:
                    if not skipping:
                        yield None
                    skipping = True
                    buffer.clear()
                break
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            if skipping:
                skipping = False
                continue
            yield None if len(line) > limit else line
    if buffer and not skipping:
        yield bytes(buffer) if len(buffer) <= limit else None


async def pump(
    stdin: anyio.abc.ByteReceiveStream,
    stdout: anyio.abc.ByteSendStream,
    read_writer: MemoryObjectSendStream[SessionMessage | Exception],
    write_reader: MemoryObjectReceiveStream[SessionMessage],
    *,
    context: Mapping[str, Any],
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    drain_s: float = DRAIN_S,
) -> None:
    """Move messages between the byte streams and the server's streams until stdin ends.

    ``context`` is put in every message's scope (the caller context of the stdio launcher).
    Once stdin ends, the messages the server has handed over are still written, whole, for
    at most ``drain_s``.
    """
    # The reader's error lines and the writer's messages never interleave. An asyncio lock,
    # not anyio's: anyio's yields to the loop on every acquire (about 10 us per message
    # written, measured here); this one waits only while another write is under way.
    lock = asyncio.Lock()

    async def write(data: bytes) -> None:
        async with lock:
            await stdout.send(data)

    async def reader() -> None:
        async with read_writer:
            async for line in _lines(stdin, max_line_bytes):
                if line is not None and not line.strip(b" \t\r"):
                    continue
                if line is None:
                    await write(
                        _error_line(WireError(INVALID_REQUEST, "Invalid Request: too large"))
                    )
                    continue
                try:
                    message, parsed = read_jsonrpc(line)
                except WireError as error:
                    await write(_error_line(error))
                    continue
                scope = {**context, MESSAGE_SCOPE_KEY: message}
                metadata = ServerMessageMetadata(request_context=StdioRequest(scope))
                await read_writer.send(SessionMessage(parsed, metadata=metadata))

    # A message the writer has taken from the server and not written yet.
    taken: list[SessionMessage] = []
    writing = anyio.CancelScope()

    def encoded(outgoing: SessionMessage) -> bytes:
        message = outgoing.message
        if isinstance(message, types.JSONRPCError):
            # The transport boundary: no protocol error quotes what the client sent.
            public = public_error_data(message.error)
            if public is not message.error:
                message = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=public)
        return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"

    async def writer() -> None:
        with writing:
            async for outgoing in write_reader:
                taken.append(outgoing)
                async with lock:
                    await stdout.send(encoded(outgoing))
                taken.clear()

    async with write_reader, anyio.create_task_group() as group:
        group.start_soon(writer)
        await reader()
        # stdin ended. The writer stops between two messages, never inside one: the lock
        # is taken once the line being written is whole. What the server has handed over
        # already is written after it, for at most drain_s (a client that closed stdin may
        # still read stdout; one that reads nothing cannot hold the gateway up longer).
        with anyio.move_on_after(drain_s):
            async with lock:
                writing.cancel()
                while True:
                    if not taken:
                        try:
                            taken.append(write_reader.receive_nowait())
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                    await stdout.send(encoded(taken[0]))
                    taken.clear()
        writing.cancel()


class FdReceiveStream(anyio.abc.ByteReceiveStream):
    """Bytes read from a pipe, socket or terminal without a worker thread.

    A thread blocked in ``read`` cannot be cancelled, so a reader on it would keep the
    process alive after a signal until the launcher writes or closes the pipe. This reader
    waits in the event loop instead (the descriptor is non-blocking while it is used).

    While it is read, the descriptor stays registered with the loop, and the readiness
    callback reads what has arrived itself: a message waited for costs no registration and
    unregistration of the descriptor (about 14 us per message on asyncio's loop, measured
    here). At most one chunk is read ahead of the receiver: with one pending and nobody
    waiting, the descriptor is unregistered until the next wait, so a sender that floods
    the pipe fills it rather than the gateway's memory, and the loop never spins on it.
    """

    _CHUNK: Final = 65536

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it is registered with
        self._waiter: asyncio.Future[None] | None = None
        # What the callback read and no receive has taken yet: bytes (b"" at the end of
        # the stream) or the error of the read.
        self._pending: bytes | OSError | None = None

    @staticmethod
    def pollable(fd: int) -> bool:
        """Whether the event loop can wait on ``fd`` (not a regular file)."""
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(fd, lambda: None)
        except (OSError, ValueError, NotImplementedError):
            return False
        loop.remove_reader(fd)
        return True

    async def receive(self, max_bytes: int = _CHUNK) -> bytes:
        while True:
            data = self._pending
            if data is None:
                try:
                    data = os.read(self._fd, max_bytes)
                except BlockingIOError:
                    await self._readable()
                    continue
                except OSError as exc:
                    data = exc
            else:
                self._pending = None
            if isinstance(data, OSError):
                self.detach()
                raise anyio.BrokenResourceError from data
            if not data:
                self.detach()
                raise anyio.EndOfStream
            if len(data) > max_bytes:
                self._pending = data[max_bytes:]
                return data[:max_bytes]
            return data

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.detach()
            loop.add_reader(self._fd, self._on_readable)
            self._loop = loop
        waiter = loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def _on_readable(self) -> None:
        if self._pending is not None:
            # A chunk is read ahead already and nobody has taken it: stop watching until
            # the next wait.
            self.detach()
            return
        try:
            self._pending = os.read(self._fd, self._CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            self._pending = exc
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def detach(self) -> None:
        """Stop watching the descriptor; a later receive resumes.

        On the loop's thread, and before the descriptor is made blocking again: the loop
        may hold a readiness it saw, and a read of a blocking descriptor would block it.
        """
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._fd)

    async def aclose(self) -> None:
        self.detach()


class FdSendStream(anyio.abc.ByteSendStream):
    """Bytes written to a pipe, socket or terminal from the event loop, without a thread.

    A write handed to a worker thread waits for that thread to get the interpreter lock,
    which under load takes up to the switch interval (5 ms) per message. Here each message
    is written at once on the loop's thread (the descriptor is non-blocking while it is
    used); only a full pipe waits, in the event loop, until the reader drains it.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @staticmethod
    def pollable(fd: int) -> bool:
        """Whether the event loop can wait on ``fd`` for writing (not a regular file)."""
        loop = asyncio.get_running_loop()
        try:
            loop.add_writer(fd, lambda: None)
        except (OSError, ValueError, NotImplementedError):
            return False
        loop.remove_writer(fd)
        return True

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                await self._writable()
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            view = view[written:]

    async def _writable(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_writer(self._fd, wake)
        try:
            await ready
        finally:
            loop.remove_writer(self._fd)

    async def aclose(self) -> None:
        return None


@contextlib.contextmanager
def nonblocking(fd: int) -> Iterator[None]:
    """``fd`` is non-blocking while held; its previous mode is restored after."""
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.set_blocking(fd, blocking)


@contextlib.contextmanager
def std_streams() -> Iterator[tuple[anyio.abc.ByteReceiveStream, anyio.abc.ByteSendStream]]:
    """The wire streams over this process's stdin and stdout (see :func:`claim_std_fds`).

    On a pipe, socket or terminal they are read and written in the event loop without a
    worker thread (:class:`FdReceiveStream`, :class:`FdSendStream`): a signal can end the
    service while stdin is open, and each answer is written as soon as it is ready. On a
    regular file they fall back to anyio's threaded file streams. Call it on the loop.
    """
    with claim_std_fds() as (wire_in, wire_out), contextlib.ExitStack() as modes:
        stdin: anyio.abc.ByteReceiveStream = FileReadStream(wire_in)
        stdout: anyio.abc.ByteSendStream = FileWriteStream(wire_out)
        if FdReceiveStream.pollable(wire_in.fileno()):
            modes.enter_context(nonblocking(wire_in.fileno()))
            stdin = FdReceiveStream(wire_in.fileno())
            modes.callback(stdin.detach)  # before the descriptor's mode is restored
        if FdSendStream.pollable(wire_out.fileno()):
            modes.enter_context(nonblocking(wire_out.fileno()))
            stdout = FdSendStream(wire_out.fileno())
        yield stdin, stdout


@contextlib.contextmanager
def claim_std_fds() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """Private duplicates of fds 0 and 1 for the wire; 0 and 1 are diverted while held.

    The duplicates are never closed: a worker thread may still be blocked reading one
    after the transport ends, and a recycled descriptor must not land under it.
    """
    sys.stdout.flush()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    try:
        yield (
            os.fdopen(wire_in, "rb", buffering=0, closefd=False),
            os.fdopen(wire_out, "wb", buffering=0, closefd=False),
        )
    finally:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
