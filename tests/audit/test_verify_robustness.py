"""The verifier reads hostile trails: every malformed record or head is a named failure.

Whatever a trail's files hold (numbers no float holds, nesting past any limit, values of the
wrong type, bytes that are not UTF-8), ``verify`` returns a failed result naming the file and
record and ``gateway audit verify`` exits 1: never a traceback, never a record taken for
another (``"seq": true`` is not record 1). Fuzzed with mutations of real trails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.audit import (
    GENESIS,
    AuditWriteError,
    JsonlFileSink,
    head_path,
    record_hash,
    trail_files,
    verify,
)
from gateway.audit._chain import encode, verify_trail
from gateway.cli import main

KEY = b"robustness-test-key-32-bytes-ok!"
DEEP = 100_000


def write_trail(path: Path, count: int = 3, *, key: bytes | None = KEY) -> list[dict[str, Any]]:
    with JsonlFileSink(path, fsync="none", key=key) as sink:
        return [sink.submit({"type": "test", "n": n}).result(30) for n in range(1, count + 1)]


def forged(body: dict[str, Any], prev: str, key: bytes | None = KEY) -> bytes:
    """A line as a forger holding the key would write it: hashed over whatever it holds."""
    record = {**body, "prev": prev}
    record["hash"] = record_hash(record, prev, key)
    return encode(record) + b"\n"


def check(path: Path, key: bytes | None = KEY) -> Any:
    return verify(trail_files(path), key=key, head=head_path(path))


# Second lines for a one-record trail: (id, the line given the first record's hash).
BAD_SECOND_LINES: list[tuple[str, Callable[[str], bytes]]] = [
    ("number-beyond-float", lambda prev: _respelt(forged({"seq": 2, "n": 1.5}, prev), b"1e999")),
    ("negative-beyond-float", lambda prev: _respelt(forged({"seq": 2, "n": 1.5}, prev), b"-1e999")),
    ("integer-past-the-digit-limit", lambda prev: b'{"seq":' + b"9" * 5000 + b"}\n"),
    ("seq-a-huge-integer", lambda prev: b'{"seq":' + b"9" * 4000 + b"}\n"),
    ("nesting-past-the-limit", lambda prev: b'{"n":' + b"[" * DEEP + b"]" * DEEP + b"}\n"),
    ("nesting-deep-but-parsable", lambda prev: b'{"n":' + b"[" * 900 + b"]" * 900 + b"}\n"),
    ("not-utf8", lambda prev: b'{"seq":2,"n":"\xff\xfe"}\n'),
    ("encoded-surrogate", lambda prev: b'{"seq":2,"n":"\xed\xa0\x80"}\n'),
    ("escaped-surrogate", lambda prev: forged({"seq": 2}, prev)[:-2] + b',"n":"\\ud800"}\n'),
    ("utf16", lambda prev: forged({"seq": 2}, prev).decode().encode("utf-16")),
    ("bom", lambda prev: b"\xef\xbb\xbf" + forged({"seq": 2}, prev)),
    ("seq-true", lambda prev: forged({"seq": True}, prev)),
    ("seq-float", lambda prev: forged({"seq": 2.0}, prev)),
    ("seq-text", lambda prev: forged({"seq": "2"}, prev)),
    ("seq-null", lambda prev: forged({"seq": None}, prev)),
    ("seq-list", lambda prev: forged({"seq": [2]}, prev)),
    ("seq-missing", lambda prev: forged({}, prev)),
    ("prev-a-number", lambda prev: b'{"hash":"' + b"a" * 64 + b'","prev":1,"seq":2}\n'),
    ("prev-nested", lambda prev: b'{"prev":' + b"[" * 500 + b"]" * 500 + b',"seq":2}\n'),
    ("hash-an-object", lambda prev: b'{"hash":{},"prev":"' + prev.encode() + b'","seq":2}\n'),
    ("hash-not-hex", lambda prev: forged({"seq": 2}, prev).replace(b'"hash":"', b'"hash":"z')),
    ("spaced-out", lambda prev: json.dumps(json.loads(forged({"seq": 2}, prev))).encode() + b"\n"),
    ("keys-reordered", lambda prev: _reordered(forged({"seq": 2, "z": 1}, prev))),
    ("number-respelt", lambda prev: forged({"seq": 2, "n": 10}, prev).replace(b"10", b"1e1")),
    ("duplicate-member", lambda prev: forged({"seq": 2}, prev)[:-2] + b',"seq":2}\n'),
    ("not-an-object", lambda prev: b"[2]\n"),
    ("a-string", lambda prev: b'"seq"\n'),
    ("blank", lambda prev: b"\n"),
    ("nan", lambda prev: b'{"seq":NaN}\n'),
    ("truncated", lambda prev: forged({"seq": 2}, prev)[:-5]),
    ("cr-lf", lambda prev: forged({"seq": 2}, prev)[:-1] + b"\r\n"),
    ("nul", lambda prev: b"\x00\n"),
]


def _respelt(line: bytes, number: bytes) -> bytes:
    return line.replace(b'"n":1.5', b'"n":' + number)


def _reordered(line: bytes) -> bytes:
    record = json.loads(line)
    return json.dumps(dict(reversed(record.items())), separators=(",", ":")).encode() + b"\n"


@pytest.mark.parametrize(
    "second", [case for _, case in BAD_SECOND_LINES], ids=[name for name, _ in BAD_SECOND_LINES]
)
def test_every_malformed_record_is_a_failure_naming_it_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], second: Callable[[str], bytes]
) -> None:
    path = tmp_path / "audit.jsonl"
    first = write_trail(path, 1)[0]
    path.write_bytes(path.read_bytes() + second(first["hash"]))
    head_path(path).unlink()
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)

    result = check(path)
    status = main(["audit", "verify", "--key-file", str(key_file), str(path)])
    out, err = capsys.readouterr()

    assert (result.ok, result.records) == (False, 1)
    assert str(result.error).startswith(f"{path}:2: ")
    assert (status, out) == (1, "")
    assert err.startswith(f"FAILED: {path}:2: ")
    assert "Traceback" not in err
    assert len(err) < 400  # the message names the record; it never quotes it


def test_a_seq_of_true_is_not_record_one(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(forged({"seq": True, "note": "forged"}, GENESIS))

    actual = verify([path], key=KEY)

    assert (actual.ok, actual.error) == (
        False,
        f"{path}:1: malformed record (seq is not an integer)",
    )


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"[" * DEEP + b"]" * DEEP, id="nesting-past-the-limit"),
        pytest.param(b"[1e999, 1]", id="number-beyond-float"),
        pytest.param(b"[" + b"9" * 5000 + b', "' + b"a" * 64 + b'"]', id="huge-integer"),
        pytest.param(b'[3, "' + b"a" * 64 + b'"' + b" " * 500 + b"]", id="oversized"),
        pytest.param(b"\xff\xfe[", id="not-utf8"),
        pytest.param(b'[-1, "' + b"a" * 64 + b'"]', id="negative-seq"),
        pytest.param(b'[true, "' + b"a" * 64 + b'"]', id="seq-true"),
        pytest.param(b'[3, "' + b"A" * 64 + b'"]', id="hash-upper-case"),
        pytest.param(b'[3, "abc"]', id="hash-short"),
        pytest.param(b'{"seq": 3}', id="object"),
        pytest.param(b"", id="empty"),
    ],
)
def test_every_malformed_head_is_a_failure_naming_it_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    head_path(path).write_bytes(content)
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)

    result = check(path)
    status = main(["audit", "verify", "--key-file", str(key_file), str(path)])
    err = capsys.readouterr().err

    assert result.ok is False
    assert str(result.error).startswith(f"{head_path(path)}: unreadable head")
    assert status == 1
    assert err.startswith(f"FAILED: {head_path(path)}: unreadable head")


def test_a_sink_refuses_to_resume_a_chain_whose_last_record_is_hostile(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b'{"seq":' + b"[" * DEEP + b"]" * DEEP + b"}\n")

    with pytest.raises(AuditWriteError, match="malformed last record"):
        JsonlFileSink(path)


def test_a_sink_resumes_despite_a_hostile_head_which_verify_reports(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    head_path(path).write_bytes(b"[" * DEEP + b"]" * DEEP)

    assert "unreadable head" in str(check(path).error)
    with JsonlFileSink(path, key=KEY) as sink:
        assert sink.submit({"n": 4}).result(30)["seq"] == 4
    assert check(path).ok is True


# --- fuzzing ---------------------------------------------------------------------------------

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` changed somewhere: bytes flipped, inserted, deleted, or lines moved."""
    kind = draw(st.sampled_from(["flip", "insert", "delete", "replace", "lines", "respace"]))
    at = draw(st.integers(0, len(data) - 1))
    if kind == "respace":  # the same values, spelt otherwise
        separators = [index for index, byte in enumerate(data) if byte in b",:"]
        at = draw(st.sampled_from(separators)) + 1
        return data[:at] + draw(st.sampled_from([b" ", b"\t", b"  "])) + data[at:]
    if kind == "flip":
        changed = bytearray(data)
        changed[at] ^= draw(st.integers(1, 255))
        return bytes(changed)
    if kind == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if kind == "delete":
        return data[:at] + data[at + draw(st.integers(1, 40)) :]
    if kind == "replace":
        span = draw(st.integers(1, 12))
        return data[:at] + draw(st.binary(min_size=1, max_size=12)) + data[at + span :]
    lines = data.splitlines(keepends=True)
    order = draw(st.permutations(range(len(lines))))
    dropped = draw(st.sets(st.integers(0, len(lines) - 1), max_size=2))
    return b"".join(lines[i] for i in order if i not in dropped)


TRAIL_RECORDS: list[dict[str, Any]] = [
    {"type": "decision", "arguments": {"a": 1.5, "b": [1, None, True], "s": 'é\u2028"\\'}},
    {"type": "outcome", "n": -7, "big": 12345678901234567890, "f": 1e300},
    {"type": "decision", "empty": {}, "list": [], "text": "\x00\x1f"},
    {"type": "outcome", "n": 0.1},
]


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    """A real keyed trail's bytes and its head."""
    path = tmp_path_factory.mktemp("intact") / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        for record in TRAIL_RECORDS:
            sink.submit(record).result(30)
    return path.read_bytes(), head_path(path).read_bytes()


@FUZZ
@given(data=st.data())
def test_any_change_to_a_trail_fails_verification_without_raising(
    tmp_path_factory: pytest.TempPathFactory, intact: tuple[bytes, bytes], data: st.DataObject
) -> None:
    trail, head = intact
    changed = data.draw(mutations(trail))
    folder = tmp_path_factory.mktemp("mutated")
    path = folder / "audit.jsonl"
    path.write_bytes(changed)
    head_path(path).write_bytes(head)

    result = check(path)

    assert result.ok is (changed == trail)
    assert result.ok or str(result.error).startswith(str(path))


@FUZZ
@given(trail=st.binary(max_size=600), head=st.one_of(st.none(), st.binary(max_size=120)))
def test_random_bytes_as_a_trail_or_head_never_raise(
    tmp_path_factory: pytest.TempPathFactory, trail: bytes, head: bytes | None
) -> None:
    folder = tmp_path_factory.mktemp("random")
    path = folder / "audit.jsonl"
    path.write_bytes(trail)
    if head is not None:
        head_path(path).write_bytes(head)

    results = verify_trail(path, key=KEY)
    unkeyed = verify_trail(folder, key=None)

    assert len(results) == len(unkeyed) == 1
    assert all(result.ok is False for _, result in results) or trail == b""


@FUZZ
@given(
    lines=st.lists(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["seq", "prev", "hash", "n"]), inner, max_size=4)
            ),
            max_leaves=10,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_records_of_any_json_shape_never_raise_and_never_verify(
    tmp_path_factory: pytest.TempPathFactory, lines: list[Any]
) -> None:
    folder = tmp_path_factory.mktemp("shapes")
    path = folder / "audit.jsonl"
    path.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines))

    result = verify([path], key=KEY)

    assert result.ok is False
    assert str(result.error).startswith(f"{path}:")
