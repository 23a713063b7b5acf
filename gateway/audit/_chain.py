"""The hash chain that makes an audit trail tamper-evident, and its verification.

Each record carries ``seq`` (1, 2, 3, ... across every file of a trail), ``prev`` (the
previous record's hash, or the genesis value) and ``hash``: SHA-256 (or HMAC-SHA256 when a
key is configured) over ``prev`` and the canonical JSON of the record without ``hash``.
Changing, deleting, inserting or reordering any record breaks the chain at that record; a
cut inside a line is a malformed record; a cut at a line boundary is caught by comparing the
chain's end with the head file the sink keeps beside the trail.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from gateway import _json

GENESIS: Final = "0" * 64


def _plain(value: object) -> float:
    # Records hold plain JSON; an exact Decimal is written as the float a reader gets back.
    if isinstance(value, Decimal) and value.is_finite():
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def encode(record: Mapping[str, Any]) -> bytes:
    """The canonical line form of a record: sorted keys, compact, UTF-8, no NaN.

    The C encoder makes this cheap on the writer thread; a reader decodes with
    :func:`decode` (floats, as the writer saw) and re-encodes to exactly the same bytes.
    """
    return json.dumps(
        record,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_plain,
    ).encode("utf-8")


def decode(line: bytes) -> Any:
    """Read one record line strictly (duplicates and NaN refused).

    Raises:
        ValueError: the line is not one strict JSON value.
    """
    return _json.parse_trusted(line, exact=False)


def record_hash(record: Mapping[str, Any], prev: str, key: bytes | None = None) -> str:
    """The hash of a record (its ``hash`` member excluded) chained to ``prev``."""
    body = {name: value for name, value in record.items() if name != "hash"}
    payload = prev.encode("ascii") + b"\n" + encode(body)
    if key is not None:
        return hmac.new(key, payload, hashlib.sha256).hexdigest()
    return hashlib.sha256(payload).hexdigest()


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The outcome of verifying a trail.

    Attributes:
        ok: whether every record and the head check out.
        records: how many records were checked and found good.
        error: what is wrong, naming the first bad record (``path:line``), or ``None``.
        last_seq: the sequence number of the last good record.
        last_hash: its hash.
    """

    ok: bool
    records: int
    error: str | None = None
    last_seq: int = 0
    last_hash: str = GENESIS


def _lines(paths: Iterable[Path]) -> Iterator[tuple[Path, int, bytes]]:
    for path in paths:
        with path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                yield path, number, line


def head_path(path: Path) -> Path:
    """Where the sink keeps the last (seq, hash) of the trail whose active file is ``path``."""
    return path.with_name(path.name + ".head")


def trail_files(path: Path) -> list[Path]:
    """The rotated segments of a trail (``<name>.000001`` ...) in order, then the active file."""
    segments = sorted(
        candidate
        for candidate in path.parent.glob(path.name + ".*")
        if candidate.suffix[1:].isdigit()
    )
    return [*segments, path] if path.exists() else segments


def _check(  # noqa: PLR0911 - one early return per way a record can be bad
    line: bytes, expected_seq: int, prev: str, key: bytes | None
) -> tuple[str | None, str]:
    # Returns (problem, hash of the record); problem is None for a good record.
    if not line.endswith(b"\n"):
        return "truncated record", prev
    try:
        record = decode(line)
    except (ValueError, RecursionError) as exc:
        return f"malformed record ({exc})", prev
    if not isinstance(record, dict):
        return "malformed record", prev
    if record.get("seq") != expected_seq:
        return (
            f"sequence {record.get('seq')!r}, expected {expected_seq} "
            "(a record was deleted, inserted or moved)",
            prev,
        )
    if record.get("prev") != prev:
        return "chain broken (prev does not match)", prev
    if not hmac.compare_digest(str(record.get("hash", "")), record_hash(record, prev, key)):
        return "record was modified (hash mismatch)", prev
    return None, str(record["hash"])


def _check_head(
    head: Path, last_seq: int, last_hash: str, last_line: tuple[Path, int] | None
) -> str | None:
    try:
        value = json.loads(head.read_text(encoding="utf-8"))
    except ValueError as exc:
        return f"{head}: unreadable head ({exc})"
    if not (
        isinstance(value, list)
        and len(value) == 2
        and type(value[0]) is int
        and isinstance(value[1], str)
    ):
        return f"{head}: unreadable head (expected [seq, hash])"
    seq, digest = value
    # The head trails the file by at most one batch after a crash, so only a chain that
    # ends before the head, or a different hash at the same record, is tampering. Either
    # way the message names where the first bad record is (or should be).
    path, number = last_line if last_line is not None else (head, 0)
    if seq > last_seq:
        return (
            f"{path}:{number + 1}: record {last_seq + 1} is missing: the trail ends at record "
            f"{last_seq} but the head {head} says {seq} (records were truncated)"
        )
    if seq == last_seq and digest != last_hash:
        return (
            f"{path}:{max(number, 1)}: record {seq} does not match the head {head} "
            "(the last record was replaced)"
        )
    return None


def verify(
    paths: Iterable[Path], *, key: bytes | None = None, head: Path | None = None
) -> VerifyResult:
    """Verify one trail given as its files in order.

    Args:
        paths: the files, oldest first.
        key: the HMAC key, when the trail was written with one.
        head: the head file to compare the end of the chain with (truncation check).
    """
    files = list(paths)
    prev = GENESIS
    count = 0
    # Where the last line read is: a missing record is named as the line after it.
    last_line: tuple[Path, int] | None = (files[0], 0) if files else None
    for path, number, line in _lines(files):
        last_line = (path, number)
        problem, digest = _check(line, count + 1, prev, key)
        if problem is not None:
            return VerifyResult(False, count, f"{path}:{number}: {problem}", count, prev)
        prev = digest
        count += 1
    if head is not None and head.exists():
        problem = _check_head(head, count, prev, last_line)
        if problem is not None:
            return VerifyResult(False, count, problem, count, prev)
    return VerifyResult(True, count, None, count, prev)
