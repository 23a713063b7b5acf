"""The hash chain: record_hash, trail_files, head_path, and verify against every tampering."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway import _json
from gateway.audit import (
    GENESIS,
    JsonlFileSink,
    VerifyResult,
    head_path,
    record_hash,
    trail_files,
    verify,
)

RECORDS = 5


def write_trail(
    path: Path,
    count: int = RECORDS,
    *,
    key: bytes | None = None,
    max_bytes: int | None = None,
    note: str = "record",
) -> list[dict[str, Any]]:
    """Write ``count`` records one at a time (one commit each) and return them as chained."""
    with JsonlFileSink(path, fsync="none", key=key, max_bytes=max_bytes) as sink:
        return [
            sink.submit({"type": "test", "n": n, "note": f"{note} {n}"}).result(timeout=30)
            for n in range(1, count + 1)
        ]


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def check(path: Path, key: bytes | None = None) -> VerifyResult:
    """Verify a trail the way the CLI does: every file, then the head."""
    return verify(trail_files(path), key=key, head=head_path(path))


def rechain(lines: list[bytes], start: int, key: bytes | None) -> list[bytes]:
    """Recompute prev and hash from line ``start`` (0-based) on, as a forger would."""
    records = [json.loads(line) for line in lines]
    prev = records[start - 1]["hash"] if start else GENESIS
    for record in records[start:]:
        record["prev"] = prev
        record["hash"] = record_hash(record, prev, key)
        prev = record["hash"]
    return [_json.canonical(record) + b"\n" for record in records]


# --- record_hash ----------------------------------------------------------------------------


def test_genesis_is_sixty_four_zeros() -> None:
    assert GENESIS == "0" * 64


def test_record_hash_is_sha256_of_prev_and_the_canonical_record_without_its_hash() -> None:
    record = {"seq": 1, "prev": GENESIS, "b": [1, 2], "a": "x", "hash": "ignored"}
    payload = GENESIS.encode() + b"\n" + b'{"a":"x","b":[1,2],"prev":"' + GENESIS.encode()
    payload += b'","seq":1}'

    assert record_hash(record, GENESIS) == hashlib.sha256(payload).hexdigest()


def test_record_hash_with_a_key_is_hmac_sha256_of_the_same_payload() -> None:
    record = {"seq": 1, "a": "x"}
    payload = GENESIS.encode() + b"\n" + _json.canonical(record)

    assert record_hash(record, GENESIS, b"k") == hmac.new(b"k", payload, "sha256").hexdigest()


def test_record_hash_ignores_member_order_and_the_hash_member() -> None:
    first = {"a": 1, "b": 2}
    second = {"hash": "anything", "b": 2, "a": 1}

    assert record_hash(first, GENESIS) == record_hash(second, GENESIS)


@pytest.mark.parametrize(
    ("record", "prev", "key"),
    [
        pytest.param({"a": 1, "b": 3}, GENESIS, None, id="other-value"),
        pytest.param({"a": 1, "b": 2, "c": None}, GENESIS, None, id="extra-member"),
        pytest.param({"a": 1, "b": 2}, "1" * 64, None, id="other-prev"),
        pytest.param({"a": 1, "b": 2}, GENESIS, b"key", id="keyed"),
    ],
)
def test_record_hash_changes_with_any_member_prev_or_key(
    record: dict[str, Any], prev: str, key: bytes | None
) -> None:
    assert record_hash(record, prev, key) != record_hash({"a": 1, "b": 2}, GENESIS)


# --- files ----------------------------------------------------------------------------------


def test_head_path_sits_beside_the_active_file() -> None:
    assert head_path(Path("/var/log/audit.jsonl")) == Path("/var/log/audit.jsonl.head")


def test_trail_files_lists_numbered_segments_in_order_then_the_active_file(
    tmp_path: Path,
) -> None:
    names = [
        "audit.jsonl",
        "audit.jsonl.000002",
        "audit.jsonl.000010",
        "audit.jsonl.000001",
        "audit.jsonl.head",
        "audit.jsonl.head.tmp",
        "audit.jsonl.bak",
        "other.jsonl.000001",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"")

    actual = trail_files(tmp_path / "audit.jsonl")

    expected = [
        tmp_path / "audit.jsonl.000001",
        tmp_path / "audit.jsonl.000002",
        tmp_path / "audit.jsonl.000010",
        tmp_path / "audit.jsonl",
    ]
    assert actual == expected


def test_trail_files_without_an_active_file_lists_only_the_segments(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl.000001").write_bytes(b"")

    assert trail_files(tmp_path / "audit.jsonl") == [tmp_path / "audit.jsonl.000001"]


# --- verify: intact trails -------------------------------------------------------------------


def test_an_intact_trail_verifies(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    records = write_trail(path)

    actual = check(path)

    assert actual == VerifyResult(True, RECORDS, None, RECORDS, records[-1]["hash"], RECORDS)


def test_no_files_and_an_empty_file_verify_as_an_empty_trail(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")

    assert (verify([]), verify([empty])) == (VerifyResult(True, 0), VerifyResult(True, 0))


# --- verify: tampering -----------------------------------------------------------------------


@pytest.mark.parametrize("target", [1, 3, RECORDS], ids=["first", "middle", "last"])
def test_flipping_any_single_byte_of_a_record_fails_verification_at_that_record(
    tmp_path: Path, target: int
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    original = lines_of(path)
    start = sum(len(line) for line in original[: target - 1])
    missed = []

    for offset in range(start, start + len(original[target - 1])):
        data = bytearray(b"".join(original))
        data[offset] ^= 0x01
        path.write_bytes(bytes(data))
        result = check(path)
        if result.ok or not str(result.error).startswith(f"{path}:{target}: "):
            missed.append((offset - start, result.error))

    assert missed == []


def _delete(index: int) -> Callable[[list[bytes]], list[bytes]]:
    return lambda lines: lines[:index] + lines[index + 1 :]


def _swap(first: int, second: int) -> Callable[[list[bytes]], list[bytes]]:
    def swap(lines: list[bytes]) -> list[bytes]:
        lines = list(lines)
        lines[first], lines[second] = lines[second], lines[first]
        return lines

    return swap


def _cut_last(keep: Callable[[bytes], int]) -> Callable[[list[bytes]], list[bytes]]:
    return lambda lines: [*lines[:-1], lines[-1][: keep(lines[-1])]]


def _cut_line(index: int) -> Callable[[list[bytes]], list[bytes]]:
    return lambda lines: [*lines[:index], lines[index][: len(lines[index]) // 2]]


# (how the file is changed, the line verify must name, words its message must contain)
TAMPERING = [
    pytest.param(_delete(2), 3, "sequence 4, expected 3", id="delete-a-middle-line"),
    pytest.param(_delete(0), 1, "sequence 2, expected 1", id="delete-the-first-line"),
    pytest.param(_swap(1, 2), 2, "sequence 3, expected 2", id="swap-two-lines"),
    pytest.param(_swap(0, 4), 1, "sequence 5, expected 1", id="swap-first-and-last"),
    pytest.param(
        lambda lines: [*lines[:2], lines[1], *lines[2:]],
        3,
        "sequence 2, expected 3",
        id="duplicate-a-line",
    ),
    pytest.param(_cut_last(lambda line: 1), 5, "truncated record", id="cut-after-one-byte"),
    pytest.param(_cut_last(lambda line: len(line) // 2), 5, "truncated record", id="cut-mid-line"),
    pytest.param(_cut_last(lambda line: len(line) - 1), 5, "truncated record", id="cut-newline"),
    pytest.param(_cut_line(2), 3, "truncated record", id="cut-mid-file"),
    pytest.param(lambda lines: lines[:-1], 5, "record 5 is missing", id="drop-the-last-line"),
    pytest.param(lambda lines: lines[:-2], 4, "record 4 is missing", id="drop-two-lines"),
    pytest.param(lambda lines: [], 1, "record 1 is missing", id="empty-the-file"),
]


@pytest.mark.parametrize(("tamper", "line", "words"), TAMPERING)
def test_tampering_fails_verification_naming_the_first_bad_record(
    tmp_path: Path, tamper: Callable[[list[bytes]], list[bytes]], line: int, words: str
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    path.write_bytes(b"".join(tamper(lines_of(path))))

    actual = check(path)

    assert (actual.ok, actual.records) == (False, line - 1)
    assert str(actual.error).startswith(f"{path}:{line}: ")
    assert words in str(actual.error)


def test_a_record_spliced_in_from_another_trail_breaks_the_chain(tmp_path: Path) -> None:
    path, other = tmp_path / "audit.jsonl", tmp_path / "other.jsonl"
    write_trail(path)
    write_trail(other, note="forged")
    lines = lines_of(path)
    lines[2] = lines_of(other)[2]
    path.write_bytes(b"".join(lines))

    actual = check(path)

    assert actual.error == f"{path}:3: chain broken (prev does not match)"


def test_a_cut_at_a_line_boundary_is_invisible_without_the_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    records = write_trail(path)
    path.write_bytes(b"".join(lines_of(path)[:-1]))

    actual = verify(trail_files(path))

    assert actual == VerifyResult(True, RECORDS - 1, None, RECORDS - 1, records[-2]["hash"])


def test_a_head_one_record_behind_the_trail_is_accepted(tmp_path: Path) -> None:
    # The head is rewritten after each group commit, so a crash can leave it one batch behind.
    path = tmp_path / "audit.jsonl"
    records = write_trail(path)
    head_path(path).write_text(json.dumps([RECORDS - 1, records[-2]["hash"]]))

    assert check(path).ok is True


def test_a_last_record_replaced_with_a_rehashed_one_disagrees_with_the_head(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    lines = lines_of(path)
    lines[-1] = lines[-1].replace(b"record 5", b"record X")
    path.write_bytes(b"".join(rechain(lines, RECORDS - 1, None)))

    actual = check(path)

    assert (actual.ok, actual.records) == (False, RECORDS)
    assert str(actual.error).startswith(f"{path}:{RECORDS}: ")


@pytest.mark.parametrize(
    "content",
    ["", "garbage", "{}", "[1]", "[1, 2, 3]", '["a", "b"]', "[5, 7]", '[true, "x"]', "null"],
    ids=["empty", "text", "object", "short", "long", "strings", "int-hash", "bool-seq", "null"],
)
def test_an_unreadable_head_fails_verification(tmp_path: Path, content: str) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    head_path(path).write_text(content)

    actual = check(path)

    assert actual.ok is False
    assert "unreadable head" in str(actual.error)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b"not json\n", id="not-json"),
        pytest.param(b"[1, 2]\n", id="array"),
        pytest.param(b'"text"\n', id="string"),
        pytest.param(b"\n", id="blank"),
        pytest.param(b'{"seq": 1, "seq": 1}\n', id="duplicate-member"),
        pytest.param(b'{"seq": NaN}\n', id="nan"),
        pytest.param(b"\xff\n", id="not-utf8"),
    ],
)
def test_a_line_that_is_not_a_json_object_is_a_malformed_record(
    tmp_path: Path, line: bytes
) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(line)

    actual = verify([path])

    assert (actual.ok, actual.records) == (False, 0)
    assert str(actual.error).startswith(f"{path}:1: malformed record")


# --- keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", [pytest.param(b"wrong key", id="wrong-key"), pytest.param(None, id="no-key")]
)
def test_a_keyed_trail_fails_verification_without_its_key(
    tmp_path: Path, key: bytes | None
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path, key=b"right key")

    assert check(path, b"right key").ok is True
    assert check(path, key).error == f"{path}:1: record was modified (hash mismatch)"


def test_a_forger_without_the_key_cannot_rechain_a_keyed_trail(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path, key=b"right key")
    lines = lines_of(path)
    lines[2] = lines[2].replace(b"record 3", b"record X")
    forged = rechain(lines, 2, b"guessed key")
    path.write_bytes(b"".join(forged))
    last = json.loads(forged[-1])
    head_path(path).write_text(json.dumps([last["seq"], last["hash"]]))

    assert check(path, b"right key").error == f"{path}:3: record was modified (hash mismatch)"


# --- rotation --------------------------------------------------------------------------------


def test_rotated_segments_verify_as_one_trail_whose_chain_continues_across_files(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    records = write_trail(path, 20, max_bytes=400)
    files = trail_files(path)
    per_file = [[json.loads(line) for line in lines_of(file)] for file in files]
    seams = [
        (before[-1]["seq"] + 1, before[-1]["hash"], after[0]["seq"], after[0]["prev"])
        for before, after in itertools.pairwise(per_file)
        if after
    ]

    assert len(files) >= 4
    assert check(path) == VerifyResult(True, 20, None, 20, records[-1]["hash"], 20)
    assert seams == [(seq, digest, seq, digest) for seq, digest, _, _ in seams]
    assert [record for chunk in per_file for record in chunk] == records


def test_tampering_inside_a_rotated_segment_names_that_segment(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path, 20, max_bytes=400)
    segment = trail_files(path)[1]
    lines = lines_of(segment)
    lines[1] = lines[1].replace(b'"type":"test"', b'"type":"tost"')
    segment.write_bytes(b"".join(lines))

    assert check(path).error == f"{segment}:2: record was modified (hash mismatch)"


def test_deleting_a_whole_segment_fails_at_the_start_of_the_next_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path, 20, max_bytes=400)
    files = trail_files(path)
    files[1].unlink()

    actual = check(path)

    assert str(actual.error).startswith(f"{files[2]}:1: sequence ")
