"""The stdio wire streams: read and written in the event loop, never in a worker thread."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.mcp._stdio import FdReceiveStream, FdSendStream, nonblocking


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
