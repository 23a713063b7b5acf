"""Anchors: a trail's chain heads, recorded now and then somewhere the writers do not keep.

A keyed chain shows any change inside a trail, and its head file any cut at its end, but
someone who can write a replica's files can still delete a whole chain with its head, or put
back an older copy of both: what is left verifies. An anchor log, kept apart from the trails
(a collector's volume, another host), records the durable head (sequence number and hash,
from its head file) of every writer's chain of a trail with the time, each line tagged with
an HMAC under the audit key. An anchor names its chain by the hash of the chain's first
record, the chain's identity whatever its files are called, so that the chains of several
worker processes anchored under one name stay apart. Verification against the log
(:func:`check_anchors`) requires, for every chain's latest anchor, a chain among those given
that begins with that first record and holds that record with that hash: any one writer's
chain deleted, truncated below its anchor or rolled back to before it fails, naming it.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gateway.audit._chain import (
    GENESIS,
    decode,
    first_hash,
    head_path,
    load_head,
    trail_base,
    trail_files,
    writer_chains,
)

# The members of an anchor line (and "mac"); the earlier form named no chain.
_MEMBERS: Final = ("writer", "file", "chain", "seq", "hash", "time")
_V1_MEMBERS: Final = ("writer", "seq", "hash", "time")
_LABEL: Final = b"gateway-audit-anchor\0"
_DIGEST: Final = re.compile(r"[0-9a-f]{64}")


class AnchorError(Exception):
    """The anchor log cannot be written, or a line of it is not a valid anchor."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """One chain's durable head at a time, as a writer anchored it.

    Attributes:
        writer: the name of the writer that anchored it (``audit.anchor_name``).
        seq: the number of the chain's last durable record.
        hash: that record's hash.
        time: when (ISO 8601).
        chain: the hash of the chain's first record: which chain this is. ``None`` for an
            anchor of an earlier version, which names only its writer (every chain anchored
            under one name then counts as one, and only the highest record is checked).
        file: the chain's active file when it was anchored (its name, for messages).
    """

    writer: str
    seq: int
    hash: str
    time: str
    chain: str | None = None
    file: str = ""


def _tag(body: bytes, key: bytes) -> str:
    return hmac.new(key, _LABEL + body, hashlib.sha256).hexdigest()


def _body(anchor: Anchor) -> bytes:
    plain: dict[str, Any] = {
        "writer": anchor.writer,
        "seq": anchor.seq,
        "hash": anchor.hash,
        "time": anchor.time,
    }
    if anchor.chain is not None:
        plain |= {"chain": anchor.chain, "file": anchor.file}
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
        self.extend([anchor])

    def extend(self, anchors: Sequence[Anchor]) -> None:
        """Add ``anchors`` (one line each) with one write, and make them durable.

        Raises:
            AnchorError: the log cannot be written.
        """
        lines = []
        for anchor in anchors:
            body = _body(anchor)
            lines.append(body[:-1] + b',"mac":"' + _tag(body, self._key).encode() + b'"}\n')
        data = memoryview(b"".join(lines))
        with self._lock:
            try:
                fd = os.open(
                    self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640
                )
                try:
                    while data:
                        data = data[os.write(fd, data) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise AnchorError(
                    f"cannot write the anchor log {self.path}: {exc.strerror}"
                ) from None


def _anchor(record: dict[str, Any]) -> Anchor | None:
    # The anchor a line's members make, of either form (its tag unchecked), or None.
    if set(record) == {*_MEMBERS, "mac"}:
        writer, name, chain, seq, digest, when = (record[m] for m in _MEMBERS)
        if not (
            isinstance(name, str)
            and isinstance(chain, str)
            and _DIGEST.fullmatch(chain) is not None
            and isinstance(digest, str)
            and _DIGEST.fullmatch(digest) is not None
            and type(seq) is int
            and seq > 0
        ):
            return None
    elif set(record) == {*_V1_MEMBERS, "mac"}:
        writer, seq, digest, when = (record[m] for m in _V1_MEMBERS)
        name, chain = "", None
        if not (isinstance(seq, int) and not isinstance(seq, bool) and isinstance(digest, str)):
            return None
    else:
        return None
    mac = record["mac"]
    if not (
        isinstance(writer, str)
        and isinstance(when, str)
        and isinstance(mac, str)
        and _DIGEST.fullmatch(mac) is not None  # compare_digest takes ASCII only
    ):
        return None
    return Anchor(writer, seq, digest, when, chain, name)


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
        anchor = _anchor(record) if isinstance(record, dict) else None
        if anchor is None:
            problems.append(f"{where}: not an anchor")
            continue
        if not hmac.compare_digest(record["mac"], _tag(_body(anchor), key)):
            problems.append(f"{where}: the anchor's tag does not verify (altered, or another key)")
            continue
        anchors.append(anchor)
    return anchors, problems


def _hashes(chain: Path, wanted: set[int]) -> dict[int, str]:
    # The hash of each record of ``chain`` whose seq is wanted.
    found: dict[int, str] = {}
    for path in trail_files(chain):
        for line in path.read_bytes().splitlines():
            try:
                record = decode(line)
            except ValueError:
                continue
            seq = record.get("seq") if isinstance(record, dict) else None
            if type(seq) is int and seq in wanted:
                found[seq] = str(record.get("hash"))
    return found


def check_anchors(anchors: Iterable[Anchor], chains: Iterable[Path]) -> list[str]:
    """Problems: each anchored chain whose latest anchored record is in none of ``chains``.

    ``chains`` are the (verified) chains collected from every writer, under any names. Every
    chain ever anchored (each named by its first record, whichever writer anchored it) must
    be one of them, holding its latest anchored record, by sequence number and hash: a
    chain missing, cut below that record or rolled back fails. An anchor of the earlier form
    names only its writer: its writer's latest such anchor must be held by some chain.
    """
    latest: dict[tuple[str, str], Anchor] = {}
    for anchor in anchors:
        group = ("writer", anchor.writer) if anchor.chain is None else ("chain", anchor.chain)
        if group not in latest or anchor.seq >= latest[group].seq:
            latest[group] = anchor
    wanted = {1} | {anchor.seq for anchor in latest.values()}
    held = [_hashes(chain, wanted) for chain in chains]
    problems = []
    for anchor in sorted(latest.values(), key=lambda a: (a.writer, a.file, a.seq, a.time)):
        if any(
            hashes.get(anchor.seq) == anchor.hash
            and (anchor.chain is None or hashes.get(1) == anchor.chain)
            for hashes in held
        ):
            continue
        where = (
            f"{anchor.writer}: record {anchor.seq} anchored at {anchor.time} is in no chain given"
        )
        if anchor.chain is None:
            problems.append(
                f"{where}: that writer's trail was deleted, cut below it or rolled back"
            )
        else:
            problems.append(
                f"{where}: the chain {anchor.file} was deleted, cut below it or rolled back"
            )
    return problems


class Anchorer:
    """Anchors the chain heads of a trail in an :class:`AnchorLog`, every ``interval_s``.

    Every writer's chain of the trail ``chain`` is one of (``audit.jsonl``,
    ``audit.w2.jsonl`` ... beside it, whichever process holds each) is anchored, each as its
    own anchor naming the chain by its first record: so every worker process's chain is
    covered even when the workers share one ``writer`` name, or one dies before it anchors
    its own. A head is read from its chain's head file, which names only durable records, so
    an anchor never names a record that a crash could take. A head that has not moved since
    this anchorer last anchored it is not anchored again.

    Args:
        chain: this writer's active file (``JsonlFileSink.path``).
        log: where the anchors go.
        writer: the name the anchors carry (a replica's name and its chain's).
        key: the audit key (to read the heads).
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
        # Per chain (its first record's hash): the head anchored last.
        self._last: dict[str, tuple[int, str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Why the last anchoring left something out (``None``: it did not).
        self.last_error: str | None = None

    def _chains(self) -> list[Path]:
        chains = writer_chains(trail_base(self._chain))
        return chains if self._chain in chains else [*chains, self._chain]

    def anchor_now(self) -> list[Anchor]:
        """Anchor each chain's durable head now, unless it is what was anchored last.

        A chain whose head cannot be read, or that has no record yet, is left out (the
        former named in :attr:`last_error`).

        Raises:
            AnchorError: the log cannot be written.
        """
        made: list[Anchor] = []
        unread: list[str] = []
        when: str | None = None
        for chain in self._chains():
            head = head_path(chain)
            try:
                if not head.exists():
                    continue
                named = load_head(head, self._key)
                if named.seq == 0:
                    continue
                # A head of an earlier form does not name its chain: its first record does.
                identity = named.chain if named.chain is not None else first_hash(chain)
            except (OSError, ValueError):  # MalformedRecordError is a ValueError
                unread.append(chain.name)
                continue
            if identity is None or identity == GENESIS:
                unread.append(chain.name)
                continue
            if self._last.get(identity) == (named.seq, named.hash):
                continue
            when = when or self._now().isoformat()
            made.append(Anchor(self._writer, named.seq, named.hash, when, identity, chain.name))
        if made:
            self._log.extend(made)
            for anchor in made:
                self._last[anchor.chain or ""] = (anchor.seq, anchor.hash)
        self.last_error = (
            f"cannot anchor the head of {', '.join(unread)} (unreadable)" if unread else None
        )
        return made

    def _anchor(self) -> None:
        try:
            self.anchor_now()
        except AnchorError as exc:
            self.last_error = str(exc)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._anchor()

    def start(self) -> None:
        """Anchor every ``interval_s`` on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gateway-anchor", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread, then anchor the heads one last time."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._anchor()


def writers_of(anchors: Iterable[Anchor]) -> Mapping[str, int]:
    """How many anchors each writer has."""
    counts: dict[str, int] = {}
    for anchor in anchors:
        counts[anchor.writer] = counts.get(anchor.writer, 0) + 1
    return counts
