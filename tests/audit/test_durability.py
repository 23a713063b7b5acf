"""Durability of the file sink: fsync before acknowledgement, group fsync, the head slot.

With ``fsync=always`` a record's future resolves only after an fsync that began once its
bytes were in the file; records waiting together share one fsync; a failed fsync fails the
records it covered and every later one. The head is two fixed-size, keyed slots rewritten
in turn in place: a write torn by a crash damages only one, so the head reads as the other
(never as a plausible third) and the trail verifies and resumes; a writer killed mid-append
leaves a chain that verifies and resumes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import AuthorizationError, ToolCall, bind
from gateway.audit import (
    GENESIS,
    AuditTrail,
    AuditWriteError,
    JsonlFileSink,
    head_path,
    trail_files,
    verify,
)
from gateway.audit._chain import (
    HEAD_FILE_SIZE,
    HEAD_SLOT_SIZE,
    HEAD_SLOT_STRIDE,
    MalformedRecordError,
    encode_head,
    head_slots,
    read_head,
)
from gateway.server import Gateway
from gateway.testing import (
    FakeClock,
    GatedFsync,
    RecordingTool,
    StaticAuthorizer,
    TornWrite,
    WakeCountingLoop,
)

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30  # seconds; a safety net for a hung syncer, never reached by a passing test
KEY = b"durability-audit-chain-key-32-by"


def check(path: Path) -> bool:
    return verify(trail_files(path), key=KEY, head=head_path(path)).ok


# --- fsync=always ordering -------------------------------------------------------------------


def test_under_fsync_always_a_record_is_acknowledged_only_after_an_fsync_of_its_bytes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync()
    fsync.hold()
    sink = JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync)
    try:
        future = sink.submit({"n": 1})
        fsync.wait_entered()
        written = path.stat().st_size

        assert future.done() is False
        assert fsync.sizes == [written]  # the fsync began with the record in the file
        fsync.release()
        assert future.result(WAIT)["seq"] == 1
    finally:
        fsync.release()
        sink.close()
    assert check(path)


def test_records_waiting_for_one_fsync_share_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync()
    fsync.hold()
    sink = JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync)
    try:
        first = sink.submit({"n": 0})
        fsync.wait_entered()
        waiting = [sink.submit({"n": n}) for n in range(1, 6)]
        assert not any(future.done() for future in [first, *waiting])
        fsync.release()
        seqs = [future.result(WAIT)["seq"] for future in [first, *waiting]]
    finally:
        fsync.release()
        sink.close()

    assert seqs == [1, 2, 3, 4, 5, 6]
    # One fsync for the first record, one for the five that waited together (close adds
    # none: nothing is left unsynced).
    assert fsync.calls == 2
    assert check(path)


def test_a_failed_fsync_fails_the_records_it_covered_and_every_later_one(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync(error=OSError(5, "Input/output error"))
    sink = JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync)
    try:
        with pytest.raises(AuditWriteError, match="audit write failed"):
            sink.submit({"n": 1}).result(WAIT)
        with pytest.raises(AuditWriteError, match="failed earlier"):
            sink.submit({"n": 2}).result(WAIT)
    finally:
        sink.close()


@pytest.mark.parametrize("policy", ["batch", "none"])
def test_without_fsync_always_a_record_is_acknowledged_once_written(
    tmp_path: Path, policy: str
) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync()
    fsync.hold()
    sink = JsonlFileSink(path, fsync=policy, batch_interval=3600.0, key=KEY, sync_file=fsync)
    try:
        future = sink.submit({"n": 1})
        assert future.done() is True
        assert future.result()["seq"] == 1
        assert path.stat().st_size > 0
    finally:
        fsync.release()
        sink.close()


def test_under_fsync_batch_the_head_names_a_record_only_after_an_fsync_covering_it(
    tmp_path: Path,
) -> None:
    # Otherwise a power loss between a record's write and its batch's fsync could keep
    # the head and lose the record: a false truncation.
    path = tmp_path / "audit.jsonl"
    clock = FakeClock()
    fsync = GatedFsync()
    fsync.hold()
    sink = JsonlFileSink(
        path, fsync="batch", batch_interval=10.0, key=KEY, sync_file=fsync, clock=clock
    )
    try:
        sink.submit({"n": 1}).result(WAIT)
        clock.advance(10.0)
        second = sink.submit({"n": 2}).result(WAIT)  # the interval is up: a batch fsync
        fsync.wait_entered()
        assert read_head(head_path(path), KEY) == (0, GENESIS)
    finally:
        fsync.release()
        sink.close()
    assert read_head(head_path(path), KEY) == (2, second["hash"])
    assert check(path)


def test_a_rotation_under_fsync_always_syncs_the_file_it_rotates_away(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync()
    with JsonlFileSink(path, fsync="always", key=KEY, max_bytes=1, sync_file=fsync) as sink:
        records = [sink.submit({"n": n}).result(WAIT) for n in range(3)]

    assert [record["seq"] for record in records] == [1, 2, 3]
    assert len(trail_files(path)) >= 3
    assert fsync.calls >= 3
    assert check(path)


# --- the head slot ---------------------------------------------------------------------------


def test_the_head_is_two_fixed_size_slots_rewritten_in_turn(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        records = [sink.submit({"n": n}).result(WAIT) for n in range(3)]
        raw = head_path(path).read_bytes()

    assert len(raw) == HEAD_FILE_SIZE
    # The sink opened the head naming the empty chain in slot 0; then slots 1, 0, 1.
    assert head_slots(raw, KEY) == ((2, records[1]["hash"]), (3, records[2]["hash"]))
    assert read_head(head_path(path), KEY) == (3, records[2]["hash"])


def test_a_head_slot_is_intact_only_under_the_chains_key(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        sink.submit({"n": 0}).result(WAIT)

    assert head_slots(head_path(path).read_bytes(), b"another key") == (None, None)
    with pytest.raises(MalformedRecordError):
        read_head(head_path(path), None)


@pytest.mark.parametrize(
    "older",
    [
        pytest.param(lambda digest: f'[1,"{digest}"]'.encode(), id="json"),
        pytest.param(lambda digest: _v1_head(1, digest), id="single-slot"),
    ],
)
def test_a_head_of_an_earlier_form_is_read_and_replaced_by_two_slots(
    tmp_path: Path, older: Any
) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        first = sink.submit({"n": 0}).result(WAIT)
    head_path(path).write_bytes(older(first["hash"]))

    assert read_head(head_path(path), KEY) == (1, first["hash"])
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        assert len(head_path(path).read_bytes()) == HEAD_FILE_SIZE
        second = sink.submit({"n": 1}).result(WAIT)
    assert read_head(head_path(path), KEY) == (2, second["hash"])
    assert check(path)


def _v1_head(seq: int, digest: str) -> bytes:
    body = b"gateway-audit-head 1 %020d %s " % (seq, digest.encode())
    return body + b"%08x\n" % zlib.crc32(body)


def test_a_cut_at_a_line_boundary_is_caught_by_the_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        for n in range(3):
            sink.submit({"n": n}).result(WAIT)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]))

    result = verify(trail_files(path), key=KEY, head=head_path(path))
    assert result.ok is False
    assert "records were truncated" in str(result.error)
    with pytest.raises(AuditWriteError, match="truncated"):
        JsonlFileSink(path, fsync="none", key=KEY)


def test_a_truncation_with_the_newer_slot_damaged_is_still_caught_by_the_older(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        for n in range(4):
            sink.submit({"n": n}).result(WAIT)
    raw = bytearray(head_path(path).read_bytes())
    raw[HEAD_SLOT_STRIDE + 30] ^= 1  # slot 1 holds record 4; slot 0 record 3
    head_path(path).write_bytes(bytes(raw))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]))

    result = verify(trail_files(path), key=KEY, head=head_path(path))
    assert (result.ok, "records were truncated" in str(result.error)) == (False, True)


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda seq, digest: encode_head(seq, digest, None), id="unkeyed-slot"),
        pytest.param(lambda seq, digest: encode_head(seq, digest, b"guess"), id="other-key"),
        pytest.param(_v1_head, id="single-slot-form"),
        pytest.param(lambda seq, digest: f'[{seq},"{digest}"]'.encode(), id="json-form"),
    ],
)
def test_a_truncation_hidden_by_a_head_rewritten_without_the_key_fails_verification(
    tmp_path: Path, forge: Any
) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        records = [sink.submit({"n": n}).result(WAIT) for n in range(4)]
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]))
    # Whoever cut the chain rewrites the head to name its new end, in every form they can
    # make without the key: both slots of the keyed form, or a head of an earlier form.
    slot = forge(2, records[1]["hash"])
    if len(slot) == HEAD_SLOT_SIZE:
        slot = slot + bytes(HEAD_SLOT_STRIDE - HEAD_SLOT_SIZE) + slot
    head_path(path).write_bytes(slot)

    result = verify(trail_files(path), key=KEY, head=head_path(path))
    assert result.ok is False, "a head forged without the key was believed"


def test_a_head_with_both_slots_damaged_is_reported_by_verify_and_the_sink_resumes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        for n in range(3):
            sink.submit({"n": n}).result(WAIT)
    raw = bytearray(head_path(path).read_bytes())
    raw[40] ^= 1
    raw[HEAD_SLOT_STRIDE + 40] ^= 1
    head_path(path).write_bytes(bytes(raw))

    result = verify(trail_files(path), key=KEY, head=head_path(path))
    assert result.ok is False
    assert "unreadable head" in str(result.error)
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        assert sink.submit({"n": 3}).result(WAIT)["seq"] == 4
    assert check(path)


# Every byte a crash can leave of a slot write: before the first, inside, after the last.
@pytest.mark.parametrize(
    "cut", [0, 1, 21, 41, 60, 100, 107, HEAD_SLOT_SIZE - 9, HEAD_SLOT_SIZE - 1]
)
@pytest.mark.parametrize("policy", ["none", "always"])
def test_a_head_write_torn_by_a_crash_fails_closed_and_the_trail_verifies_and_resumes(
    tmp_path: Path, cut: int, policy: str
) -> None:
    path = tmp_path / "audit.jsonl"
    torn = TornWrite()
    sink = JsonlFileSink(path, fsync=policy, key=KEY, write_head=torn)
    try:
        records = [sink.submit({"n": n}).result(WAIT) for n in range(3)]
        torn.tear(cut)
        failed = sink.submit({"n": 3})
        assert isinstance(failed.exception(WAIT), AuditWriteError)  # not acknowledged
    finally:
        sink.close()  # the "crash": nothing more is written

    # Record 4 is in the file, unacknowledged. The torn slot is recovered from the other
    # one (record 3), unless the cut spared all but bytes the slot held already.
    result = verify(trail_files(path), key=KEY, head=head_path(path))
    assert result.ok is True, result.error
    expected = (3, records[2]["hash"]) if cut < HEAD_SLOT_SIZE - 1 else (4, result.last_hash)
    assert read_head(head_path(path), KEY) == expected
    with JsonlFileSink(path, fsync=policy, key=KEY) as sink:
        assert sink.submit({"n": 4}).result(WAIT)["seq"] == result.records + 1
    assert check(path)


_HEADS = st.tuples(st.integers(0, 10**19 - 1), st.binary(min_size=32, max_size=32).map(bytes.hex))


@given(
    heads=st.lists(_HEADS, min_size=1, max_size=6).map(sorted),
    cut=st.integers(0, HEAD_SLOT_SIZE),
)
def test_a_torn_last_slot_write_reads_as_the_last_or_the_one_before_it(
    tmp_path_factory: pytest.TempPathFactory, heads: list[tuple[int, str]], cut: int
) -> None:
    # The sink's order of writes: slot 0, 1, 0, 1 ... with the last one torn at ``cut``.
    head = tmp_path_factory.mktemp("head") / "audit.jsonl.head"
    raw = bytearray(HEAD_FILE_SIZE)
    for number, (seq, digest) in enumerate(heads):
        slot = encode_head(seq, digest, KEY)
        if number == len(heads) - 1:
            slot = slot[:cut]
        offset = (number % 2) * HEAD_SLOT_STRIDE
        raw[offset : offset + len(slot)] = slot
    head.write_bytes(bytes(raw))
    # A write torn after its last byte that differs from what the slot held is whole.
    last = (len(heads) - 1) % 2 * HEAD_SLOT_STRIDE
    whole = bytes(raw[last : last + HEAD_SLOT_SIZE]) == encode_head(*heads[-1], KEY)

    if cut == HEAD_SLOT_SIZE or whole:
        assert read_head(head, KEY) == heads[-1]
    elif len(heads) > 1:
        assert read_head(head, KEY) == heads[-2]
    else:
        with pytest.raises(MalformedRecordError):
            read_head(head, KEY)


@given(data=st.binary(max_size=HEAD_FILE_SIZE + 8), flips=st.lists(st.integers(0, 4267)))
def test_damaged_head_bytes_never_raise_anything_but_malformed(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, flips: list[int]
) -> None:
    head = tmp_path_factory.mktemp("head") / "audit.jsonl.head"
    raw = bytearray(encode_head(7, "a" * 64, KEY) + bytes(HEAD_SLOT_STRIDE - HEAD_SLOT_SIZE))
    raw += encode_head(8, "b" * 64, KEY)
    for flip in flips:
        raw[flip] ^= 0x20
    for candidate in (bytes(raw), data):
        head.write_bytes(candidate)
        try:
            seq, _ = read_head(head, KEY)
        except MalformedRecordError:
            continue
        assert candidate is data or seq in (7, 8)


# --- a writer killed mid-append --------------------------------------------------------------

# Appends records as fast as it can; says "ready" once some are written, and keeps going
# until it is killed.
APPENDER = """
import sys
from gateway.audit import JsonlFileSink
sink = JsonlFileSink(sys.argv[1], fsync=sys.argv[2], key=sys.argv[3].encode(), max_bytes=4096)
n = 0
while True:
    sink.submit({"n": n, "pad": "x" * (n % 97)})
    n += 1
    if n == 200:
        print("ready", flush=True)
"""


@pytest.mark.parametrize("policy", ["none", "always"])
def test_a_writer_killed_mid_append_leaves_a_chain_that_verifies_and_resumes(
    tmp_path: Path, policy: str
) -> None:
    path = tmp_path / "audit.jsonl"
    with subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(path), policy, KEY.decode()],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(WAIT)

    assert check(path)
    last_seq, _ = read_head(head_path(path), KEY)
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        resumed = sink.submit({"n": "after"}).result(WAIT)
    assert resumed["seq"] >= 200
    assert resumed["seq"] >= last_seq + 1
    assert check(path)


# --- awaited on a loop (what the audit trail does) -------------------------------------------


async def test_an_awaited_write_under_fsync_always_returns_only_after_its_fsync(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync()
    fsync.hold()
    sink = JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync)
    try:
        task = asyncio.ensure_future(sink.write({"n": 1}))
        await asyncio.to_thread(fsync.wait_entered)

        assert task.done() is False
        assert fsync.sizes == [path.stat().st_size]
        fsync.release()
        assert (await task)["seq"] == 1
    finally:
        fsync.release()
        sink.close()


async def test_writes_awaited_together_share_one_fsync_and_each_gets_its_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync()
    fsync.hold()
    sink = JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync)
    try:
        first = asyncio.ensure_future(sink.write({"n": 0}))
        await asyncio.to_thread(fsync.wait_entered)
        rest = [asyncio.ensure_future(sink.write({"n": n})) for n in range(1, 50)]
        await asyncio.sleep(0)  # let every write append before the gate opens
        fsync.release()
        records = await asyncio.gather(first, *rest)
    finally:
        fsync.release()
        sink.close()

    assert [record["n"] for record in records] == list(range(50))
    assert [record["seq"] for record in records] == list(range(1, 51))
    assert fsync.calls == 2
    assert check(path)


async def test_a_write_cancelled_while_waiting_leaves_its_record_and_the_sink_working(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync()
    fsync.hold()
    sink = JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync)
    try:
        task = asyncio.ensure_future(sink.write({"n": 0}))
        await asyncio.to_thread(fsync.wait_entered)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        fsync.release()
        assert (await sink.write({"n": 1}))["seq"] == 2
    finally:
        fsync.release()
        sink.close()
    assert check(path)


async def test_an_awaited_write_whose_fsync_fails_raises_audit_write_error(tmp_path: Path) -> None:
    fsync = GatedFsync(error=OSError(28, "No space left on device"))
    sink = JsonlFileSink(tmp_path / "audit.jsonl", fsync="always", key=KEY, sync_file=fsync)
    try:
        with pytest.raises(AuditWriteError, match="audit write failed"):
            await sink.write({"n": 1})
        with pytest.raises(AuditWriteError, match="failed earlier"):
            await sink.write({"n": 2})
    finally:
        sink.close()


async def test_a_guarded_call_whose_decision_record_cannot_be_fsynced_is_denied(
    tmp_path: Path,
) -> None:
    fsync = GatedFsync(error=OSError(5, "Input/output error"))
    sink = JsonlFileSink(tmp_path / "audit.jsonl", fsync="always", key=KEY, sync_file=fsync)
    tool = RecordingTool("search")
    guarded = bind(AuditTrail(sink).guard(tool, StaticAuthorizer(True)))
    try:
        with pytest.raises(AuthorizationError) as raised:
            await guarded.call(guarded.prepare(ToolCall("c", "search", "{}")))
    finally:
        sink.close()

    assert raised.value.code == "audit_failed"
    assert tool.calls == []


def test_under_fsync_always_the_head_names_a_record_only_after_its_fsync(tmp_path: Path) -> None:
    # Otherwise a power loss could keep the head and lose the record: a false truncation.
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="always", key=KEY) as sink:
        first = sink.submit({"n": 0}).result(WAIT)
    fsync = GatedFsync()
    fsync.hold()
    sink = JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync)
    try:
        future = sink.submit({"n": 1})
        fsync.wait_entered()
        assert read_head(head_path(path), KEY) == (1, first["hash"])
        fsync.release()
        second = future.result(WAIT)
        assert read_head(head_path(path), KEY) == (2, second["hash"])
    finally:
        fsync.release()
        sink.close()
    assert check(path)


# --- group commit under concurrency ------------------------------------------------------------


def test_each_loop_is_woken_once_per_fsync_for_every_record_it_made_durable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync()

    async def scenario() -> list[dict[str, Any]]:
        fsync.hold()
        with JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync) as sink:
            first = asyncio.ensure_future(sink.write({"n": 0}))
            await asyncio.to_thread(fsync.wait_entered)
            rest = [asyncio.ensure_future(sink.write({"n": n})) for n in range(1, 40)]
            await asyncio.sleep(0)  # every write appends before the gate opens
            fsync.release()
            return list(await asyncio.gather(first, *rest))

    with asyncio.Runner(loop_factory=WakeCountingLoop) as runner:
        records = runner.run(scenario())
        loop = runner.get_loop()
        assert isinstance(loop, WakeCountingLoop)
        # Two fsyncs (the first record, then the 39 that waited together): two wake-ups
        # from the syncer, plus the one of asyncio.to_thread.
        assert (fsync.calls, loop.threadsafe_calls) == (2, 2 + 1)
    assert [record["seq"] for record in records] == list(range(1, 41))
    assert check(path)


async def test_every_concurrent_write_returns_only_after_an_fsync_that_covered_its_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync()
    sink = JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync)

    async def one(n: int) -> None:
        for _ in range(n % 3):
            await asyncio.sleep(0)  # spread the writes over several batches
        record = await sink.write({"n": n})
        lines = path.read_bytes().splitlines(keepends=True)
        end = sum(len(line) for line in lines[: record["seq"]])
        assert any(size >= end for size in list(fsync.sizes)), (record["seq"], fsync.sizes)

    try:
        await asyncio.gather(*(one(n) for n in range(60)))
    finally:
        sink.close()
    assert 1 <= fsync.calls < 60  # shared
    assert check(path)


async def test_a_failed_fsync_fails_every_waiter_of_its_batch_and_nothing_after_succeeds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    fsync = GatedFsync(error=OSError(5, "Input/output error"))
    fsync.hold()
    sink = JsonlFileSink(path, fsync="always", key=KEY, sync_file=fsync)
    try:
        writes = [asyncio.ensure_future(sink.write({"n": n})) for n in range(30)]
        await asyncio.sleep(0)
        await asyncio.to_thread(fsync.wait_entered)
        later = [asyncio.ensure_future(sink.write({"n": n})) for n in range(30, 40)]
        fsync.release()
        outcomes = await asyncio.gather(*writes, *later, return_exceptions=True)
    finally:
        fsync.release()
        sink.close()
    assert all(isinstance(outcome, AuditWriteError) for outcome in outcomes), outcomes


# --- a failed write denies, whatever fails ------------------------------------------------------


def _fsync_fails(path: Path, policy: str) -> JsonlFileSink:
    fsync = GatedFsync(error=OSError(5, "Input/output error"))
    return JsonlFileSink(path, fsync=policy, key=KEY, sync_file=fsync)


def _head_write_torn(path: Path, policy: str) -> JsonlFileSink:
    torn = TornWrite()
    sink = JsonlFileSink(path, fsync=policy, key=KEY, write_head=torn)
    torn.tear(50)
    return sink


def _closed(path: Path, policy: str) -> JsonlFileSink:
    sink = JsonlFileSink(path, fsync=policy, key=KEY)
    sink.close()
    return sink


@pytest.mark.parametrize(
    ("policy", "failing"),
    [
        pytest.param("always", _fsync_fails, id="always-fsync-fails"),
        pytest.param("always", _head_write_torn, id="always-head-write-torn"),
        pytest.param("none", _head_write_torn, id="none-head-write-torn"),
        pytest.param("always", _closed, id="always-sink-closed"),
        pytest.param("none", _closed, id="none-sink-closed"),
    ],
)
async def test_a_call_whose_decision_record_fails_in_any_way_is_503_audit_failed_and_never_runs(
    tmp_path: Path, policy: str, failing: Any
) -> None:
    sink = failing(tmp_path / "audit.jsonl", policy)
    recording = RecordingTool("search")
    gateway = Gateway([recording], authorizer=StaticAuthorizer(True), audit=AuditTrail(sink))
    try:
        for _ in range(2):  # the failing write, and the next one on the broken sink
            result = await gateway.call(ToolCall("c", "search", "{}"))
            assert (result.status, result.code) == (503, "audit_failed")
    finally:
        sink.close()
    assert recording.calls == []
