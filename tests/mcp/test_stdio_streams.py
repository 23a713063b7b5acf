"""The stdio wire streams: read and written in the event loop, never in a worker thread."""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import os
import termios
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.mcp._stdio import FdReceiveStream, FdSendStream, nonblocking

if TYPE_CHECKING:
    from _typeshed import HasFileno

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    try:
        yield read_fd, write_fd
    finally:
        for fd in (read_fd, write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


async def _drain(fd: int, size: int) -> bytes:
    received = bytearray()
    stream = FdReceiveStream(fd)
    while len(received) < size:
        received += await stream.receive()
    return bytes(received)


def test_an_answer_larger_than_the_pipe_arrives_whole_when_the_reader_drains_it_late(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe
    payload = bytes(range(256)) * 4096  # 1 MiB: many times a pipe's buffer

    async def main() -> bytes:
        with nonblocking(read_fd), nonblocking(write_fd):
            async with anyio.create_task_group() as group:
                group.start_soon(FdSendStream(write_fd).send, payload)
                await anyio.lowlevel.checkpoint()  # the writer fills the pipe, then waits
                received = await _drain(read_fd, len(payload))
        return received

    assert anyio.run(main) == payload


def test_an_answer_is_written_on_the_loop_thread_not_handed_to_a_worker_thread(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe
    threads_before = threading.active_count()

    async def main() -> None:
        with nonblocking(write_fd):
            stream = FdSendStream(write_fd)
            assert FdSendStream.pollable(write_fd)
            await stream.send(b'{"jsonrpc":"2.0","id":1,"result":{}}\n')
            # Written when send returns, with no thread started for it.
            assert threading.active_count() == threads_before

    anyio.run(main)
    assert os.read(read_fd, 4096) == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'


def test_a_write_to_a_pipe_whose_reader_is_gone_is_a_broken_resource(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe
    os.close(read_fd)

    async def main() -> None:
        with nonblocking(write_fd), pytest.raises(anyio.BrokenResourceError):
            await FdSendStream(write_fd).send(b"x\n")

    anyio.run(main)


def test_a_regular_file_is_not_pollable_so_the_threaded_file_stream_serves_it(
    tmp_path: os.PathLike[str],
) -> None:
    path = os.path.join(os.fspath(tmp_path), "out")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:

        async def main() -> bool:
            return FdSendStream.pollable(fd)

        assert anyio.run(main) is False
    finally:
        os.close(fd)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=200_000), min_size=1, max_size=4))
def test_messages_sent_in_turn_arrive_in_order_and_unchanged(chunks: list[bytes]) -> None:
    read_fd, write_fd = os.pipe()
    try:

        async def main() -> bytes:
            with nonblocking(read_fd), nonblocking(write_fd):
                stream = FdSendStream(write_fd)
                async with anyio.create_task_group() as group:

                    async def send_all() -> None:
                        for chunk in chunks:
                            await stream.send(chunk)

                    group.start_soon(send_all)
                    received = await _drain(read_fd, sum(map(len, chunks)))
            return received

        assert anyio.run(main) == b"".join(chunks)
    finally:
        os.close(read_fd)
        os.close(write_fd)


class _CountingLoop(asyncio.SelectorEventLoop):
    """asyncio's loop, counting how often a descriptor is registered and unregistered."""

    def __init__(self) -> None:
        super().__init__()
        self.added = 0
        self.removed = 0

    def add_reader(
        self, fd: int | HasFileno, callback: Callable[[*_Ts], object], *args: *_Ts
    ) -> None:
        self.added += 1
        super().add_reader(fd, callback, *args)

    def remove_reader(self, fd: int | HasFileno) -> bool:
        self.removed += 1
        return super().remove_reader(fd)


def _on_counting_loop(main: Callable[[_CountingLoop], Coroutine[Any, Any, _T]]) -> _T:
    with asyncio.Runner(loop_factory=_CountingLoop) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, _CountingLoop)
        return runner.run(main(loop))


async def _turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def _queued(fd: int) -> int:
    size = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, size)
    return size[0]


def test_messages_waited_for_one_by_one_register_the_descriptor_once(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe
    messages = [b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % n for n in range(20)]

    async def main(loop: _CountingLoop) -> list[bytes]:
        stream = FdReceiveStream(read_fd)
        received = []
        with nonblocking(read_fd):
            for message in messages:
                # Sent once the receiver waits for it, as a client sends its next request.
                loop.call_later(0, os.write, write_fd, message)
                received.append(await stream.receive())
            await stream.aclose()
        return received

    counts: list[int] = []

    async def counted(loop: _CountingLoop) -> list[bytes]:
        received = await main(loop)
        counts.extend((loop.added, loop.removed))
        return received

    assert _on_counting_loop(counted) == messages
    assert counts == [1, 1]


def test_a_stream_nobody_receives_from_reads_at_most_one_chunk_ahead(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe

    async def main(loop: _CountingLoop) -> tuple[list[bytes], int, int]:
        stream = FdReceiveStream(read_fd)
        with nonblocking(read_fd):
            loop.call_later(0, os.write, write_fd, b"a" * 1000)
            received = [await stream.receive()]
            os.write(write_fd, b"b" * 1000)  # read by the watcher: nobody receives now
            await _turns(10)
            os.write(write_fd, b"c" * 1000)  # left in the pipe, and the watching stops
            await _turns(10)
            queued, removed = _queued(read_fd), loop.removed
            received += [await stream.receive(1000), await stream.receive(1000)]
        return received, queued, removed

    received, queued, removed = _on_counting_loop(main)

    assert received == [b"a" * 1000, b"b" * 1000, b"c" * 1000]
    assert queued == 1000
    assert removed == 1


def test_a_receive_cancelled_while_waiting_loses_nothing_of_what_arrives_after(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe

    async def main() -> tuple[bool, bytes]:
        stream = FdReceiveStream(read_fd)
        with nonblocking(read_fd):
            with anyio.move_on_after(0):
                await stream.receive()
            os.write(write_fd, b"after\n")
            await _turns(3)
            taken = _queued(read_fd) == 0  # by the watcher, with nobody waiting
            received = await stream.receive()
            await stream.aclose()  # before the descriptor blocks again
        return taken, received

    assert anyio.run(main) == (True, b"after\n")


def test_the_end_of_the_stream_is_reported_and_the_descriptor_no_longer_watched(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe

    async def main(loop: _CountingLoop) -> tuple[int, int]:
        stream = FdReceiveStream(read_fd)
        with nonblocking(read_fd):
            loop.call_later(0, os.close, write_fd)
            with pytest.raises(anyio.EndOfStream):
                await stream.receive()
            with pytest.raises(anyio.EndOfStream):
                await stream.receive()
        return loop.added, loop.removed

    assert _on_counting_loop(main) == (1, 1)


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=150_000), min_size=1, max_size=4),
    asks=st.lists(st.integers(min_value=1, max_value=100_000), min_size=1, max_size=8),
)
@settings(max_examples=25, deadline=None)
def test_receives_of_any_size_read_what_was_sent_in_order(
    sizes: list[int], asks: list[int]
) -> None:
    payload = b"".join(bytes([n % 251]) * size for n, size in enumerate(sizes))
    read_fd, write_fd = os.pipe()
    try:

        async def main() -> bytes:
            received = bytearray()
            with nonblocking(read_fd), nonblocking(write_fd):
                stream = FdReceiveStream(read_fd)
                async with anyio.create_task_group() as group:
                    group.start_soon(FdSendStream(write_fd).send, payload)
                    turn = 0
                    while len(received) < len(payload):
                        ask = asks[turn % len(asks)]
                        chunk = await stream.receive(ask)
                        assert 0 < len(chunk) <= ask
                        received += chunk
                        turn += 1
                        if turn % 3 == 0:
                            await _turns(2)  # now and then the watcher reads ahead
                await stream.aclose()
            return bytes(received)

        assert anyio.run(main) == payload
    finally:
        os.close(read_fd)
        os.close(write_fd)
