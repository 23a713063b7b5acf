"""Sinks: the protocol, the memory sink, and the JSONL file sink with its writer thread."""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import _json
from gateway.audit import (
    GENESIS,
    AuditSink,
    AuditWriteError,
    FsyncPolicy,
    JsonlFileSink,
    MemorySink,
    head_path,
    record_hash,
    trail_files,
    verify,
)
from gateway.audit._chain import read_head
from gateway.audit._sinks import _Chainer

WAIT = 30  # seconds; a safety net for a hung writer, never reached by a passing test

Future = concurrent.futures.Future[dict[str, Any]]


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def records_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for file in trail_files(path) for line in lines_of(file)]


def check(path: Path, key: bytes | None = None) -> tuple[bool, int, str | None]:
    result = verify(trail_files(path), key=key, head=head_path(path))
    return result.ok, result.records, result.error


def fill_disk(sink: JsonlFileSink) -> None:
    """Point the sink's descriptor at /dev/full: every later write fails with ENOSPC."""
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, sink._fd)
    finally:
        os.close(full)


needs_dev_full = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")


def write(path: Path, count: int, *, start: int = 1, **options: Any) -> list[dict[str, Any]]:
    """Write records one commit at a time with a fresh sink, then close it."""
    with JsonlFileSink(path, fsync="none", **options) as sink:
        return [sink.submit({"n": n}).result(WAIT) for n in range(start, start + count)]


# --- protocol --------------------------------------------------------------------------------


def test_memory_and_file_sinks_satisfy_the_sink_protocol(tmp_path: Path) -> None:
    with JsonlFileSink(tmp_path / "audit.jsonl") as file_sink:
        assert (isinstance(MemorySink(), AuditSink), isinstance(file_sink, AuditSink)) == (
            True,
            True,
        )


def test_an_object_without_close_is_not_a_sink() -> None:
    class SubmitOnly:
        def submit(self, record: dict[str, Any]) -> Future:
            return concurrent.futures.Future()

    assert isinstance(SubmitOnly(), AuditSink) is False


def test_audit_write_error_has_its_own_code() -> None:
    assert AuditWriteError.code == "audit_failed"


# --- memory sink ----------------------------------------------------------------------------


def test_memory_sink_chains_records_in_submission_order() -> None:
    sink = MemorySink()

    results = [sink.submit({"n": n}).result(0) for n in range(3)]

    prevs = [GENESIS, *(record["hash"] for record in results[:-1])]
    assert results == sink.records
    assert [(r["n"], r["seq"], r["prev"]) for r in results] == [
        (0, 1, prevs[0]),
        (1, 2, prevs[1]),
        (2, 3, prevs[2]),
    ]
    assert [r["hash"] for r in results] == [
        record_hash(r, prev) for r, prev in zip(results, prevs, strict=True)
    ]


def test_memory_sink_futures_are_resolved_before_submit_returns() -> None:
    # AuditedTool submits outcome records without awaiting them: they must need no loop.
    future = MemorySink().submit({"n": 1})

    assert (future.done(), future.result(0)["seq"]) == (True, 1)


def test_memory_sink_lines_are_a_trail_that_verifies(tmp_path: Path) -> None:
    sink = MemorySink(key=b"key")
    for n in range(4):
        sink.submit({"n": n})
    path = tmp_path / "memory.jsonl"
    path.write_bytes(b"".join(sink.lines()))

    assert sink.lines()[0] == _json.canonical(sink.records[0]) + b"\n"
    assert (verify([path], key=b"key").ok, verify([path]).ok) == (True, False)


def test_a_failing_memory_sink_fails_every_later_write_and_keeps_nothing() -> None:
    sink = MemorySink()
    sink.submit({"n": 1})
    sink.failing = True

    future = sink.submit({"n": 2})

    assert isinstance(future.exception(0), AuditWriteError)
    assert [record["n"] for record in sink.records] == [1]


# --- file sink: writing ----------------------------------------------------------------------


def test_a_file_sink_resolves_each_future_to_the_record_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path) as sink:
        record = sink.submit({"type": "test", "text": "héllo"}).result(WAIT)

    assert (record["seq"], record["prev"]) == (1, GENESIS)
    assert record["hash"] == record_hash(record, GENESIS)
    assert lines_of(path) == [_json.canonical(record) + b"\n"]
    assert read_head(head_path(path)) == (1, record["hash"])


def test_a_file_sink_creates_missing_directories_and_reports_its_path(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "audit.jsonl"
    with JsonlFileSink(path, fsync="batch") as sink:
        sink.submit({"n": 1}).result(WAIT)

    assert (sink.path, sink.fsync_policy, check(path)) == (
        path,
        FsyncPolicy.BATCH,
        (True, 1, None),
    )


@pytest.mark.parametrize(
    "policy",
    [
        *(pytest.param(policy, id=policy.value) for policy in FsyncPolicy),
        *(pytest.param(policy.value, id=f"{policy.value}-as-text") for policy in FsyncPolicy),
    ],
)
def test_every_fsync_policy_writes_a_verifiable_trail(
    tmp_path: Path, policy: FsyncPolicy | str
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(path, fsync=policy, batch_interval=0.0)
    futures = [sink.submit({"n": n}) for n in range(200)]
    sink.close()

    assert sink.fsync_policy is FsyncPolicy(policy)
    assert [future.result(0)["seq"] for future in futures] == list(range(1, 201))
    assert check(path) == (True, 200, None)


def test_an_unknown_fsync_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sometimes"):
        JsonlFileSink(tmp_path / "audit.jsonl", fsync="sometimes")


def test_close_writes_everything_queued_before_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(path, fsync="batch")
    futures = [sink.submit({"n": n}) for n in range(2000)]

    sink.close()

    assert [future.done() for future in futures] == [True] * 2000
    assert [record["n"] for record in records_of(path)] == list(range(2000))
    assert check(path) == (True, 2000, None)


def test_submit_after_close_fails_with_audit_write_error(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(path)
    sink.submit({"n": 1}).result(WAIT)
    sink.close()

    future = sink.submit({"n": 2})

    assert isinstance(future.exception(0), AuditWriteError)
    assert [record["n"] for record in records_of(path)] == [1]


def test_close_is_idempotent(tmp_path: Path) -> None:
    sink = JsonlFileSink(tmp_path / "audit.jsonl")
    sink.close()
    sink.close()

    assert isinstance(sink.submit({}).exception(0), AuditWriteError)


def test_concurrent_submitters_on_many_threads_share_one_unbroken_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    threads, each = 8, 250
    start = threading.Barrier(threads)
    submitted: dict[int, list[Future]] = {}

    def submitter(worker: int) -> None:
        start.wait(WAIT)
        submitted[worker] = [sink.submit({"worker": worker, "n": n}) for n in range(each)]

    with JsonlFileSink(path, fsync="batch") as sink:
        workers = [threading.Thread(target=submitter, args=(w,)) for w in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(WAIT)
    seqs = {w: [f.result(0)["seq"] for f in futures] for w, futures in submitted.items()}

    assert sorted(seq for chunk in seqs.values() for seq in chunk) == list(
        range(1, threads * each + 1)
    )
    assert {w: chunk == sorted(chunk) for w, chunk in seqs.items()} == dict.fromkeys(
        range(threads), True
    )
    assert check(path) == (True, threads * each, None)


@needs_dev_full
def test_a_failed_write_fails_that_record_and_every_later_one(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(path)
    fill_disk(sink)

    first = sink.submit({"n": 1}).exception(WAIT)
    later = sink.submit({"n": 2}).exception(WAIT)
    sink.close()

    assert isinstance(first, AuditWriteError)
    assert "audit write failed" in str(first)
    assert isinstance(later, AuditWriteError)
    assert path.read_bytes() == b""


# --- file sink: rotation --------------------------------------------------------------------


def test_rotation_starts_a_numbered_segment_at_the_first_record_that_reaches_max_bytes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    max_bytes = 300
    write(path, 20, max_bytes=max_bytes)
    files = trail_files(path)
    segments = files[:-1]

    assert [file.name for file in segments] == [
        f"audit.jsonl.{n:06d}" for n in range(1, len(segments) + 1)
    ]
    assert len(segments) >= 3
    assert [
        len(segment.read_bytes()) - len(lines_of(segment)[-1])
        < max_bytes
        <= len(segment.read_bytes())
        for segment in segments
    ] == [True] * len(segments)
    assert len(path.read_bytes()) < max_bytes
    assert check(path) == (True, 20, None)


# --- file sink: reopening -------------------------------------------------------------------


def test_reopening_a_trail_continues_its_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    first = write(path, 3)

    second = write(path, 2, start=4)

    assert (second[0]["seq"], second[0]["prev"]) == (4, first[-1]["hash"])
    assert [record["n"] for record in records_of(path)] == [1, 2, 3, 4, 5]
    assert check(path) == (True, 5, None)


def test_reopening_a_rotated_trail_continues_the_chain_and_the_segment_numbers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    write(path, 10, max_bytes=200)
    before = len(trail_files(path))

    write(path, 10, start=11, max_bytes=200)
    files = trail_files(path)

    assert len(files) > before
    assert [file.name for file in files[:-1]] == [
        f"audit.jsonl.{n:06d}" for n in range(1, len(files))
    ]
    assert [record["n"] for record in records_of(path)] == list(range(1, 21))
    assert check(path) == (True, 20, None)


def test_reopening_an_empty_file_starts_a_new_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"")

    (record,) = write(path, 1)

    assert (record["seq"], record["prev"]) == (1, GENESIS)


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda line: line[:-1], id="newline-missing"),
        pytest.param(lambda line: line[: len(line) // 2], id="half-a-line"),
        pytest.param(lambda line: line + b'{"seq":', id="a-partial-line-appended"),
    ],
)
def test_reopening_refuses_a_trail_whose_last_line_is_partial(tmp_path: Path, cut: Any) -> None:
    path = tmp_path / "audit.jsonl"
    write(path, 3)
    lines = lines_of(path)
    damaged = b"".join([*lines[:-1], cut(lines[-1])])
    path.write_bytes(damaged)

    with pytest.raises(AuditWriteError, match="partial record"):
        JsonlFileSink(path)
    assert path.read_bytes() == damaged


def test_reopening_refuses_a_trail_cut_at_a_line_boundary(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write(path, 3)
    path.write_bytes(b"".join(lines_of(path)[:-1]))

    with pytest.raises(AuditWriteError, match="truncated"):
        JsonlFileSink(path)


def test_reopening_refuses_a_trail_whose_last_record_is_malformed(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write(path, 2)
    with path.open("ab") as handle:
        handle.write(b"not a record\n")

    with pytest.raises(AuditWriteError, match="malformed last record"):
        JsonlFileSink(path)


# --- one encoding per record -----------------------------------------------------------------

_NAMES = st.one_of(
    st.sampled_from(["hash", "seq", "prev", "has", "hasg", "hash_", "hasi", "h", "", "é", "type"]),
    st.text(max_size=6),
)
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    records=st.lists(st.dictionaries(_NAMES, _VALUES, max_size=8), min_size=1, max_size=4),
    key=st.one_of(st.none(), st.binary(min_size=1, max_size=100)),  # past one SHA-256 block
)
def test_each_line_is_the_canonical_encoding_of_its_record_and_its_hash_the_chain_hash(
    records: list[dict[str, Any]], key: bytes | None
) -> None:
    sink = MemorySink(key=key)
    prev = GENESIS
    for record in records:
        chained = sink.submit(record).result(WAIT)
        assert chained == {**record, "seq": chained["seq"], "prev": prev, "hash": chained["hash"]}
        assert chained["hash"] == record_hash(chained, prev, key)
        prev = chained["hash"]
    chainer = _Chainer(key)
    for record, line in zip(records, sink.lines(), strict=True):
        assert chainer.chain_line(record)[1] == line


def _cyclic() -> dict[str, Any]:
    record: dict[str, Any] = {"n": 1}
    record["self"] = [record]
    return record


def _deep() -> dict[str, Any]:
    value: Any = 1
    for _ in range(100_000):
        value = [value]
    return {"deep": value}


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda: {1: "x"}, id="name-not-a-string"),
        pytest.param(_cyclic, id="cycle"),
        pytest.param(_deep, id="nested-past-the-limit"),
        pytest.param(lambda: {"n": float("nan")}, id="nan"),
        pytest.param(lambda: {"s": "\ud800"}, id="lone-surrogate"),
    ],
)
def test_a_record_that_is_not_json_fails_alone_and_the_chain_goes_on(
    tmp_path: Path, bad: Any
) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none") as sink:
        failed = sink.submit(bad())
        good = sink.submit({"n": 1}).result(WAIT)
    assert isinstance(failed.exception(WAIT), AuditWriteError)
    assert good["seq"] == 1
    assert check(path) == (True, 1, None)
