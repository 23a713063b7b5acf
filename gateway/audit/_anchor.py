"""Anchors: a writer's chain head, recorded now and then somewhere the writer does not keep.

A keyed chain shows any change inside a trail, and its head file any cut at its end, but
someone who can write a replica's files can still delete the whole trail with its head, or
put back an older copy of both: what is left verifies. An anchor log, kept apart from the
trails (a collector's volume, another host), records each writer's durable head (sequence
number and hash, from its head file) with the time, each line tagged with an HMAC under the
audit key. Verification against it (:func:`check_anchors`) requires, for every writer's
latest anchor, a chain among those given that holds that record with that hash: a trail
deleted, truncated below the anchor or rolled back to before it fails, naming the writer.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.audit._chain import decode, head_path, read_head, trail_files

_MEMBERS: Final = ("writer", "seq", "hash", "time")
_LABEL: Final = b"gateway-audit-anchor\0"


class AnchorError(Exception):
    """The anchor log cannot be written, or a line of it is not a valid anchor."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """One writer's durable chain head at a time."""

    writer: str
    seq: int
    hash: str
    time: str


def _tag(body: bytes, key: bytes) -> str:
    return hmac.new(key, _LABEL + body, hashlib.sha256).hexdigest()


def _body(anchor: Anchor) -> bytes:
    plain = {"writer": anchor.writer, "seq": anchor.seq, "hash": anchor.hash, "time": anchor.time}
    return json.dumps(plain, sort_keys=True, separators=(",", ":")).encode()


class AnchorLog:
    """An append-only file of anchors (JSON Lines), each line fsynced and keyed.

    Args:
        path: the anchor log; its folder is created.
        key: the audit key the lines are tagged with.
    """

    def __init__(self, path: str | os.PathLike[str], key: bytes) -> None:
        if not key:
            raise AnchorError("anchors need the audit key")
        self.path = Path(path)
        self._key = key
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, anchor: Anchor) -> None:
        """Add ``anchor`` and make it durable.

        Raises:
            AnchorError: the log cannot be written.
        """
        body = _body(anchor)
        line = body[:-1] + b',"mac":"' + _tag(body, self._key).encode() + b'"}\n'
        with self._lock:
            try:
                fd = os.open(
                    self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640
                )
                try:
                    os.write(fd, line)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise AnchorError(
                    f"cannot write the anchor log {self.path}: {exc.strerror}"
                ) from None


def read_anchors(path: Path, key: bytes) -> tuple[list[Anchor], list[str]]:
    """The anchors of a log, and a problem per line that is not a valid, keyed anchor."""
    anchors: list[Anchor] = []
    problems: list[str] = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        where = f"{path}:{number}"
        try:
            record = decode(line)
        except ValueError:
            problems.append(f"{where}: not an anchor")
            continue
        if not isinstance(record, dict) or set(record) != {*_MEMBERS, "mac"}:
            problems.append(f"{where}: not an anchor")
            continue
        writer, seq, digest, when, mac = (record[m] for m in (*_MEMBERS, "mac"))
        if not (
            isinstance(writer, str)
            and isinstance(seq, int)
            and not isinstance(seq, bool)
            and isinstance(digest, str)
            and isinstance(when, str)
            and isinstance(mac, str)
        ):
            problems.append(f"{where}: not an anchor")
            continue
        anchor = Anchor(writer, seq, digest, when)
        if not hmac.compare_digest(mac, _tag(_body(anchor), key)):
            problems.append(f"{where}: the anchor's tag does not verify (altered, or another key)")
            continue
        anchors.append(anchor)
    return anchors, problems


def _hashes(chain: Path) -> dict[int, str]:
    found: dict[int, str] = {}
    for path in trail_files(chain):
        for line in path.read_bytes().splitlines():
            try:
                record = decode(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("seq"), int):
                found[record["seq"]] = str(record.get("hash"))
    return found


def check_anchors(anchors: Iterable[Anchor], chains: Iterable[Path]) -> list[str]:
    """Problems: each writer whose latest anchored record is in none of ``chains``.

    ``chains`` are the (verified) chains collected from every writer; a writer's latest
    anchor must name a record, by sequence number and hash, that one of them holds.
    """
    latest: dict[str, Anchor] = {}
    for anchor in anchors:
        if anchor.writer not in latest or anchor.seq >= latest[anchor.writer].seq:
            latest[anchor.writer] = anchor
    held = [_hashes(chain) for chain in chains]
    problems = []
    for writer, anchor in sorted(latest.items()):
        if not any(hashes.get(anchor.seq) == anchor.hash for hashes in held):
            problems.append(
                f"{writer}: record {anchor.seq} anchored at {anchor.time} is in no chain given: "
                "that writer's trail was deleted, cut below it or rolled back"
            )
    return problems


class Anchorer:
    """Anchors one writer's chain head in an :class:`AnchorLog`, every ``interval_s``.

    The head is read from the chain's head file, which names only durable records, so an
    anchor never names a record that a crash could take. A head that has not moved since
    the last anchor is not anchored again.

    Args:
        chain: the writer's active file (``JsonlFileSink.path``).
        log: where the anchors go.
        writer: the name the anchors carry (a replica's name and its chain's).
        key: the audit key (to read the head).
        interval_s: seconds between anchors.
        now: the wall clock, as an aware datetime (injectable).
    """

    def __init__(
        self,
        chain: Path,
        log: AnchorLog,
        *,
        writer: str,
        key: bytes,
        interval_s: float,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._chain = chain
        self._log = log
        self._writer = writer
        self._key = key
        self._interval = interval_s
        self._now = now
        self._last: tuple[int, str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: The last error of an anchor that could not be written (none yet: ``None``).
        self.last_error: str | None = None

    def anchor_now(self) -> Anchor | None:
        """Anchor the chain's durable head now, unless it is what was anchored last."""
        head = head_path(self._chain)
        if not head.exists():
            return None
        seq, digest = read_head(head, self._key)
        if seq == 0 or (seq, digest) == self._last:
            return None
        anchor = Anchor(self._writer, seq, digest, self._now().isoformat())
        self._log.append(anchor)
        self._last = (seq, digest)
        return anchor

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.anchor_now()
                self.last_error = None
            except (AnchorError, OSError, ValueError) as exc:
                self.last_error = str(exc)

    def start(self) -> None:
        """Anchor every ``interval_s`` on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gateway-anchor", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread, then anchor the head one last time."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        try:
            self.anchor_now()
        except (AnchorError, OSError, ValueError) as exc:
            self.last_error = str(exc)


def writers_of(anchors: Iterable[Anchor]) -> Mapping[str, int]:
    """How many anchors each writer has."""
    counts: dict[str, int] = {}
    for anchor in anchors:
        counts[anchor.writer] = counts.get(anchor.writer, 0) + 1
    return counts
