"""Durability of the file sink: fsync before acknowledgement, group fsync, the head slot.

With ``fsync=always`` a record's future resolves only after an fsync that began once its
bytes were in the file; records waiting together share one fsync; a failed fsync fails the
records it covered and every later one. The head is one fixed-size slot rewritten in place:
a torn rewrite is an unreadable head (never a plausible one), from which a sink resumes; a
writer killed mid-append leaves a chain that verifies and resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import AuthorizationError, ToolCall, bind
from gateway.audit import (
    AuditTrail,
    AuditWriteError,
    JsonlFileSink,
    head_path,
    trail_files,
    verify,
)
from gateway.audit._chain import HEAD_SLOT_SIZE, MalformedRecordError, encode_head, read_head
from gateway.testing import GatedFsync, RecordingTool, StaticAuthorizer

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


def test_the_head_is_one_fixed_size_slot_holding_the_last_record(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        for n in range(3):
            last = sink.submit({"n": n}).result(WAIT)
            assert head_path(path).stat().st_size == HEAD_SLOT_SIZE

    assert read_head(head_path(path)) == (3, last["hash"])


def test_an_older_json_head_is_read_and_replaced_by_a_slot(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        first = sink.submit({"n": 0}).result(WAIT)
    head_path(path).write_text(f'[1, "{first["hash"]}"]' + " " * 200)  # longer than a slot
    head_path(path).write_text(f'[1,"{first["hash"]}"]')

    assert read_head(head_path(path)) == (1, first["hash"])
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        second = sink.submit({"n": 1}).result(WAIT)
    assert head_path(path).read_bytes() == encode_head(2, second["hash"])
    assert check(path)


def test_a_cut_at_a_line_boundary_is_caught_by_the_head_slot(tmp_path: Path) -> None:
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


def _torn(old: bytes, new: bytes, cut: int) -> bytes:
    return new[:cut] + old[cut:]


_HEADS = st.tuples(st.integers(0, 10**19 - 1), st.binary(min_size=32, max_size=32).map(bytes.hex))


@given(old=_HEADS, new=_HEADS, cut=st.integers(0, HEAD_SLOT_SIZE))
def test_a_torn_head_slot_reads_as_the_old_or_the_new_head_or_not_at_all(
    tmp_path_factory: pytest.TempPathFactory,
    old: tuple[int, str],
    new: tuple[int, str],
    cut: int,
) -> None:
    head = tmp_path_factory.mktemp("head") / "audit.jsonl.head"
    head.write_bytes(_torn(encode_head(*old), encode_head(*new), cut))
    with contextlib.suppress(MalformedRecordError):
        assert read_head(head) in (old, new)


# Cuts inside the hash or the checksum: the torn slot is neither the old head nor the new.
@pytest.mark.parametrize("cut", [41, 60, 100, HEAD_SLOT_SIZE - 9, HEAD_SLOT_SIZE - 4])
def test_a_torn_head_is_reported_by_verify_and_the_sink_resumes_from_the_chain(
    tmp_path: Path, cut: int
) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        records = [sink.submit({"n": n}).result(WAIT) for n in range(3)]
    old = encode_head(2, records[1]["hash"])
    head_path(path).write_bytes(_torn(old, head_path(path).read_bytes(), cut))

    result = verify(trail_files(path), key=KEY, head=head_path(path))
    assert result.ok is False
    assert "unreadable head" in str(result.error)
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        assert sink.submit({"n": 3}).result(WAIT)["seq"] == 4
    assert check(path)


def test_a_damaged_head_slot_never_raises_anything_but_malformed(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl.head"
    slot = encode_head(7, "a" * 64)
    for damaged in [slot[:-1], slot + b"x", slot.replace(b"7", b"8"), slot.upper()]:
        path.write_bytes(damaged)
        with pytest.raises(MalformedRecordError):
            read_head(path)


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
    last_seq, _ = read_head(head_path(path))
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
        assert read_head(head_path(path)) == (1, first["hash"])
        fsync.release()
        second = future.result(WAIT)
        assert read_head(head_path(path)) == (2, second["hash"])
    finally:
        fsync.release()
        sink.close()
    assert check(path)
