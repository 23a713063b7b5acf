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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gateway import _json

GENESIS: Final = "0" * 64


def record_hash(record: dict[str, Any], prev: str, key: bytes | None = None) -> str:
    """The hash of a record (its ``hash`` member excluded) chained to ``prev``."""
    body = {name: value for name, value in record.items() if name != "hash"}
    payload = prev.encode("ascii") + b"\n" + _json.canonical(body)
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
        record = _json.parse(line, max_depth=256)
    except _json.StrictJSONError as exc:
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


def _check_head(head: Path, last_seq: int, last_hash: str) -> str | None:
    try:
        seq, digest = json.loads(head.read_text(encoding="utf-8"))
    except (ValueError, TypeError) as exc:
        return f"{head}: unreadable head ({exc})"
    # The head trails the file by at most one batch after a crash, so only a chain that
    # ends before the head, or a different hash at the same record, is tampering.
    if seq > last_seq or (seq == last_seq and digest != last_hash):
        return (
            f"{head}: trail ends at record {last_seq} but the head says {seq} "
            "(records were truncated)"
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
    prev = GENESIS
    count = 0
    for path, number, line in _lines(paths):
        problem, digest = _check(line, count + 1, prev, key)
        if problem is not None:
            return VerifyResult(False, count, f"{path}:{number}: {problem}", count, prev)
        prev = digest
        count += 1
    if head is not None and head.exists():
        problem = _check_head(head, count, prev)
        if problem is not None:
            return VerifyResult(False, count, problem, count, prev)
    return VerifyResult(True, count, None, count, prev)
