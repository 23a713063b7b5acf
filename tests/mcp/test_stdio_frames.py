"""The stdio frame reader on untrusted input: one answer or one message per line, in order.

Whatever arrives on stdin (lines cut anywhere across reads, lines over the limit, invalid
UTF-8, JSON that is not one object, batches, blank lines, a last line without a newline),
every line that is not blank becomes exactly one thing, in the order sent: a message handed
to the server, or one JSON-RPC error written back that quotes nothing of the line.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared.message import SessionMessage

from gateway.mcp._stdio import pump
from gateway.mcp._wire import MESSAGE_SCOPE_KEY, Message, WireError, read_message

LIMIT = 160
#: Every text a framing or reading error may carry: fixed, never a piece of the line.
PUBLIC_ERRORS = {
    "Parse error: the message is not strict JSON",
    "Invalid Request",
    "Invalid Request: too large",
    "Invalid Request: the message must be one JSON object",
    "Invalid Request: id must be a string or an integer",
}


class _Chunks(anyio.abc.ByteReceiveStream):
    """stdin: these chunks, one per read, then the end of the stream."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(reversed(chunks))

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._chunks:
            raise anyio.EndOfStream
        return self._chunks.pop()

    async def aclose(self) -> None:
        return None


class _Answers(anyio.abc.ByteSendStream):
    """stdout: each write, with how many messages had been handed on before it."""

    def __init__(self, handed: MemoryObjectSendStream[Any]) -> None:
        self.writes: list[tuple[int, bytes]] = []
        self._handed = handed

    async def send(self, item: bytes) -> None:
        self.writes.append((self._handed.statistics().current_buffer_used, item))

    async def aclose(self) -> None:
        return None


def _outcome(line: bytes) -> str | None:
    """What the transport makes of one line: ``message``, ``error`` or nothing (blank)."""
    if len(line) > LIMIT:
        return "error"
    if not line.strip(b" \t\r"):
        return None
    try:
        message = read_message(line)
        types.jsonrpc_message_adapter.validate_json(message.body, by_name=False)
    except (WireError, ValueError):
        return "error"
    return "message"


async def _serve(chunks: list[bytes]) -> tuple[list[str], list[SessionMessage | Exception]]:
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](
        math.inf
    )
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage]()
    stdout = _Answers(read_writer)
    async with read_stream, write_stream:
        await pump(
            _Chunks(chunks),
            stdout,
            read_writer,
            write_reader,
            context={"caller": "test"},
            max_line_bytes=LIMIT,
        )
        handed = [
            read_stream.receive_nowait()
            for _ in range(read_stream.statistics().current_buffer_used)
        ]
    order: list[str] = []
    for before, data in stdout.writes:
        order += ["message"] * (before - order.count("message"))
        assert data.endswith(b"\n")
        assert data.count(b"\n") == 1
        answer = json.loads(data)
        assert answer["jsonrpc"] == "2.0"
        assert answer["id"] is None
        assert answer["error"]["code"] in (-32700, -32600)
        assert answer["error"]["message"] in PUBLIC_ERRORS
        order.append("error")
    order += ["message"] * (len(handed) - order.count("message"))
    return order, handed


_MESSAGES = st.sampled_from(
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",'
        b'"arguments":{"message":"hi","n":1.50}}}',
        b'{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x",'
        b'"arguments":{"k":1,"k":2}}}',
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}',
        b'{"jsonrpc":"2.0","id":2,"result":{}}',
        b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
    ]
)
_HOSTILE = st.one_of(
    st.binary(max_size=2 * LIMIT).map(lambda data: data.replace(b"\n", b"")),
    st.sampled_from(
        [
            b"[]",
            b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]',
            b"17",
            b'"tools/call"',
            b"null",
            b'{"jsonrpc":"2.0","id":1,"method":"ping"',
            b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}',
            b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
            b"   \r",
            b"",
            b" " * (LIMIT + 1),
            b'{"jsonrpc":"2.0","id":4,"method":"ping","params":{"pad":"' + b"x" * LIMIT + b'"}}',
        ]
    ),
)


@given(
    lines=st.lists(st.one_of(_MESSAGES, _HOSTILE), max_size=8),
    final_newline=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=4 * LIMIT), max_size=12),
)
def test_every_line_becomes_one_message_or_one_public_error_in_order(
    lines: list[bytes], final_newline: bool, cuts: list[int]
) -> None:
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points) if b > a]

    order, handed = anyio.run(_serve, chunks)

    pieces = data.split(b"\n")
    if data.endswith(b"\n"):
        pieces.pop()
    expected = [outcome for outcome in map(_outcome, pieces) if outcome is not None]
    assert order == expected
    accepted = [piece for piece in pieces if _outcome(piece) == "message"]
    for message, piece in zip(handed, accepted, strict=True):
        assert isinstance(message, SessionMessage)
        scope = message.metadata.request_context.scope  # type: ignore[union-attr]
        assert scope["caller"] == "test"
        assert isinstance(scope[MESSAGE_SCOPE_KEY], Message)
        assert scope[MESSAGE_SCOPE_KEY] == read_message(piece)


@given(size=st.integers(min_value=LIMIT + 1, max_value=20 * LIMIT), step=st.integers(1, 97))
def test_a_line_over_the_limit_read_in_any_pieces_is_one_error_and_the_next_line_is_read(
    size: int, step: int
) -> None:
    data = b'{"a":"' + b"x" * size + b'"}\n{"jsonrpc":"2.0","id":9,"method":"ping"}\n'
    chunks = [data[index : index + step] for index in range(0, len(data), step)]

    order, handed = anyio.run(_serve, chunks)

    assert order == ["error", "message"]
    assert isinstance(handed[0], SessionMessage)
    assert handed[0].message.id == 9  # type: ignore[union-attr]


class _GatedChunks(anyio.abc.ByteReceiveStream):
    """stdin: one line, sent only once ``gate`` is set; then the end of the stream."""

    def __init__(self, line: bytes, gate: anyio.Event) -> None:
        self._line: bytes | None = line
        self._gate = gate

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await self._gate.wait()
        if self._line is None:
            raise anyio.EndOfStream
        line, self._line = self._line, None
        return line

    async def aclose(self) -> None:
        return None


class _FullPipe(anyio.abc.ByteSendStream):
    """stdout whose first write stops half way, as on a full pipe, and lets others run."""

    def __init__(self, mid_write: anyio.Event) -> None:
        self.data = bytearray()
        self._mid_write = mid_write

    async def send(self, item: bytes) -> None:
        if self._mid_write.is_set():
            self.data += item
            return
        half = len(item) // 2
        self.data += item[:half]
        self._mid_write.set()
        for _ in range(50):  # the pipe drains late: the reader has all the time it needs
            await anyio.lowlevel.checkpoint()
        self.data += item[half:]

    async def aclose(self) -> None:
        return None


async def _pump_with(
    stdin: anyio.abc.ByteReceiveStream,
    stdout: anyio.abc.ByteSendStream,
    handed_over: list[SessionMessage],
    **options: Any,
) -> None:
    # The pump between these byte streams, with the server's answers already handed over.
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](
        math.inf
    )
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](8)
    async with read_stream, write_stream:
        for message in handed_over:
            await write_stream.send(message)
        await pump(stdin, stdout, read_writer, write_reader, context={}, **options)


def _answer(number: int) -> SessionMessage:
    return SessionMessage(
        types.JSONRPCResponse(jsonrpc="2.0", id=number, result={"n": "x" * 64 * number})
    )


def test_an_error_line_waits_for_a_message_whose_write_is_under_way() -> None:
    # The reader answers a bad line itself while the writer may be part way through a
    # message on a full pipe: each line must still reach stdout whole.
    async def serve() -> bytes:
        mid_write = anyio.Event()
        stdout = _FullPipe(mid_write)
        await _pump_with(
            _GatedChunks(b"not json\n", mid_write), stdout, [_answer(7)], max_line_bytes=LIMIT
        )
        return bytes(stdout.data)

    lines = anyio.run(serve).split(b"\n")

    assert lines.pop() == b""
    answers = [json.loads(line) for line in lines]
    assert [answer.get("id") for answer in answers] == [7, None]
    assert answers[1]["error"]["code"] == -32700


class _EndsMidWrite(anyio.abc.ByteReceiveStream):
    """stdin that ends (nothing sent) once a write to stdout is half way."""

    def __init__(self, gate: anyio.Event) -> None:
        self._gate = gate

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await self._gate.wait()
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        return None


class _NeverDrains(anyio.abc.ByteSendStream):
    """stdout nobody reads: every write blocks for good."""

    async def send(self, item: bytes) -> None:
        await anyio.sleep_forever()

    async def aclose(self) -> None:
        return None


def test_the_end_of_stdin_never_cuts_a_message_short_and_writes_those_handed_over() -> None:
    # A client may close stdin and go on reading stdout: the message being written when
    # stdin ends is finished, and those the server already handed over follow it, whole.
    async def serve() -> bytes:
        mid_write = anyio.Event()
        stdout = _FullPipe(mid_write)
        await _pump_with(_EndsMidWrite(mid_write), stdout, [_answer(n) for n in (1, 2, 3)])
        return bytes(stdout.data)

    lines = anyio.run(serve).split(b"\n")

    assert lines.pop() == b""
    assert [json.loads(line)["id"] for line in lines] == [1, 2, 3]


def test_a_client_that_reads_nothing_holds_the_end_of_stdin_up_for_drain_s_at_most() -> None:
    async def serve() -> bool:
        ended = anyio.Event()
        ended.set()
        # drain_s is the bound under test: a generous outer limit only catches a hang.
        with anyio.move_on_after(30) as outer:
            await _pump_with(_EndsMidWrite(ended), _NeverDrains(), [_answer(1)], drain_s=0.05)
        return not outer.cancelled_caught

    assert anyio.run(serve)
