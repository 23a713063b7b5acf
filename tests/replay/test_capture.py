"""The capture's records and key rings: sealed, opened, and never trusted when altered."""

from __future__ import annotations

import base64
import json
import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.replay import (
    Captured,
    KeyRing,
    KeyRingError,
    Outcome,
    ReplayCapture,
    index_captures,
    new_key_entry,
    open_capture,
    seal,
)
from tests.replay.conftest import key_entry

RING = KeyRing.parse(key_entry("k1", 1))
DOCUMENT = b'{"arguments":{"n":1.10,"password":"hunter2"},"context":{},"facts":{},"tool":{}}'
RECORDED = Outcome("deny", "denied", "no", ("r",))


def _line(decision_id: str = "d-1") -> bytes:
    return seal(RING, decision_id, DOCUMENT, tool="t", roles=["a"], recorded=RECORDED)


def test_a_sealed_record_opens_to_the_exact_input_bytes_and_the_recorded_outcome() -> None:
    opened = open_capture(_line(), "d-1", RING)

    assert opened == Captured("d-1", "t", ("a",), RECORDED, DOCUMENT)


def test_a_sealed_record_holds_no_input_in_the_clear() -> None:
    line = _line()

    assert b"hunter2" not in line
    assert b"1.10" not in line


def test_a_record_opens_only_under_its_own_decision_id() -> None:
    assert open_capture(_line("d-1"), "d-2", RING) == "malformed"
    moved = json.loads(_line("d-1"))
    moved["id"] = "d-2"
    assert open_capture(json.dumps(moved).encode(), "d-2", RING) == "tampered"


@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=1, max_value=255))
def test_any_changed_byte_of_the_ciphertext_or_nonce_fails_authentication(
    position: int, flip: int
) -> None:
    record = json.loads(_line())
    for member in ("c", "n"):
        raw = bytearray(base64.b64decode(record[member]))
        raw[position % len(raw)] ^= flip
        altered = dict(record, **{member: base64.b64encode(bytes(raw)).decode()})
        assert open_capture(json.dumps(altered).encode(), "d-1", RING) == "tampered"


@given(st.binary(max_size=400))
def test_any_line_opens_to_a_record_or_a_reason_and_never_raises(line: bytes) -> None:
    assert isinstance(open_capture(line, "d-1", RING), str)


@given(st.dictionaries(st.sampled_from(["c", "id", "k", "kc", "n", "v"]), st.from_type(object)))
def test_records_of_any_shape_are_malformed_not_errors(record: dict[str, object]) -> None:
    try:
        line = json.dumps(record).encode()
    except (TypeError, ValueError):
        return
    assert open_capture(line, "d-1", RING) in {"malformed", "no-key", "unknown-key-id"}


def test_without_a_key_ring_a_well_formed_record_is_no_key() -> None:
    assert open_capture(_line(), "d-1", None) == "no-key"


def test_the_capture_writes_owner_only_files_and_indexes_them_by_decision_id(
    tmp_path: Path,
) -> None:
    with ReplayCapture(tmp_path / "capture", RING) as capture:
        assert capture.record("d-1", DOCUMENT, tool="t", roles=None, recorded=RECORDED)
        assert capture.record("d-2", DOCUMENT, tool="t", roles=None, recorded=RECORDED)

    assert stat.S_IMODE(os.stat(tmp_path / "capture").st_mode) == 0o700
    assert stat.S_IMODE(capture.path.stat().st_mode) == 0o600
    index = index_captures(tmp_path / "capture")
    try:
        assert sorted(index.entries) == ["d-1", "d-2"]
        line = index.read("d-2")
        assert line is not None
        opened = open_capture(line, "d-2", RING)
        assert isinstance(opened, Captured)
        assert opened.document == DOCUMENT
    finally:
        index.close()


def test_a_closed_capture_counts_the_records_it_could_not_write(tmp_path: Path) -> None:
    capture = ReplayCapture(tmp_path, RING)
    capture.close()

    assert capture.record("d-1", DOCUMENT, tool="t", roles=None, recorded=RECORDED) is False
    assert (capture.written, capture.failed) == (0, 1)


def test_two_captures_in_one_folder_write_separate_files(tmp_path: Path) -> None:
    with ReplayCapture(tmp_path, RING) as one, ReplayCapture(tmp_path, RING) as two:
        assert one.path != two.path


# -- key rings ------------------------------------------------------------------------------


def test_the_first_key_of_a_ring_is_active_and_every_key_opens_its_records() -> None:
    old = KeyRing.parse(key_entry("k1", 1))
    rotated = KeyRing.parse(f"{key_entry('k2', 2)},\n{key_entry('k1', 1)}")
    line = seal(old, "d-1", DOCUMENT, tool="t", roles=None, recorded=RECORDED)

    assert rotated.active_id == "k2"
    assert rotated.ids == ("k2", "k1")
    assert isinstance(open_capture(line, "d-1", rotated), Captured)
    assert json.loads(seal(rotated, "d-2", DOCUMENT, tool="t", roles=None, recorded=RECORDED))[
        "k"
    ] == ("k2")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no key"),
        ("k1", "not KEY_ID:BASE64"),
        (":" + base64.b64encode(b"x" * 32).decode(), "not KEY_ID:BASE64"),
        ("k1:not-base64!", "not base64"),
        ("k1:" + base64.b64encode(b"x" * 16).decode(), "32-byte"),
        (f"{key_entry('k1', 1)} {key_entry('k1', 2)}", "twice"),
    ],
)
def test_a_malformed_ring_is_refused_without_quoting_it(text: str, problem: str) -> None:
    with pytest.raises(KeyRingError, match=problem) as caught:
        KeyRing.parse(text)

    secret = text.partition(":")[2]
    assert not secret or secret not in str(caught.value)


@given(st.text(max_size=200))
def test_any_text_is_a_ring_or_a_refusal_that_never_quotes_key_material(text: str) -> None:
    refusal = ""
    try:
        KeyRing.parse(text)
    except KeyRingError as exc:
        refusal = str(exc)
    for entry in text.split():
        _, colon, material = entry.partition(":")
        if colon and len(material) >= 8:
            assert material not in refusal


def test_a_ring_is_read_from_the_environment_or_an_owner_only_file(tmp_path: Path) -> None:
    entry = new_key_entry("prod-1")
    path = tmp_path / "ring"
    path.write_text(entry + "\n")
    path.chmod(0o600)

    assert KeyRing.from_env("RING", environ={"RING": entry}).active_id == "prod-1"
    assert KeyRing.from_file(path).active_id == "prod-1"
    path.chmod(0o640)
    with pytest.raises(KeyRingError, match="chmod 600"):
        KeyRing.from_file(path)
    with pytest.raises(KeyRingError, match="RING is not set"):
        KeyRing.from_env("RING", environ={})
    with pytest.raises(KeyRingError, match="cannot read"):
        KeyRing.from_file(tmp_path / "missing")


def test_a_ring_never_shows_its_keys() -> None:
    entry = key_entry("k1", 1)

    assert entry.partition(":")[2] not in repr(KeyRing.parse(entry))


def test_a_line_longer_than_any_record_is_read_in_bounded_parts_and_reported(
    tmp_path: Path,
) -> None:
    (tmp_path / "capture.1.jsonl").write_bytes(_line("d-1") + b"x" * 2500 + b"\n" + _line("d-2"))

    index = index_captures(tmp_path, max_line=1000)
    index.close()

    assert sorted(index.entries) == ["d-1", "d-2"]
    assert index.malformed == [f"{tmp_path / 'capture.1.jsonl'}:{n}" for n in (2, 3, 4)]


@given(st.lists(st.binary(max_size=80), max_size=8))
def test_any_capture_file_indexes_without_raising(lines: list[bytes]) -> None:
    data = b"\n".join(lines)
    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch, "capture.1.jsonl").write_bytes(data)
        index = index_captures(Path(scratch))
        index.close()
    assert len(index.entries) + len(index.malformed) <= data.count(b"\n") + 1
