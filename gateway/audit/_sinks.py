"""Where audit records go: the sink protocol, a memory sink and a hash-chained JSONL file.

A sink chains each record (``seq``, ``prev``, ``hash``) in submission order and reports,
through a future, when the record is as durable as its policy promises. Submission itself
never blocks on I/O: the file sink writes from one dedicated thread that commits records in
groups, so concurrent callers share each write and each fsync.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import fcntl
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from gateway._errors import GatewayError
from gateway.audit._chain import (
    GENESIS,
    MalformedRecordError,
    decode,
    encode,
    head_path,
    lock_path,
    read_head,
    record_hash,
    trail_files,
    writer_path,
)

_MAX_GROUP: Final = 512
#: How many processes may write one trail at once, each to its own chain.
MAX_WRITERS: Final = 64


class AuditWriteError(GatewayError):
    """A record could not be written; the call it describes must not run."""

    code = "audit_failed"


class FsyncPolicy(enum.StrEnum):
    """When the file sink forces records to disk before acknowledging them."""

    #: Every record is on disk (fsync) before its write is acknowledged (group commit).
    ALWAYS = "always"
    #: Records are written before acknowledgement; fsync at most every ``batch_interval``.
    BATCH = "batch"
    #: Records are written before acknowledgement; the OS decides when they reach disk.
    NONE = "none"


@runtime_checkable
class AuditSink(Protocol):
    """Accepts records, chains them, and says when each is durable."""

    def submit(self, record: Mapping[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        """Queue a record without blocking on I/O.

        The future resolves to the chained record once it is written (or fails with
        :class:`AuditWriteError`).
        """
        ...

    def close(self) -> None:
        """Flush and release resources."""
        ...


class _Chainer:
    def __init__(self, key: bytes | None, seq: int = 0, prev: str = GENESIS) -> None:
        self.key = key
        self.seq = seq
        self.prev = prev

    def chain(self, record: Mapping[str, Any]) -> dict[str, Any]:
        chained = {**record, "seq": self.seq + 1, "prev": self.prev}
        chained["hash"] = record_hash(chained, self.prev, self.key)
        self.seq += 1
        self.prev = chained["hash"]
        return chained


class MemorySink:
    """Keeps chained records in a list; for tests and for embedding in other sinks.

    Set ``failing = True`` to make every later write fail (audit-or-deny tests).
    """

    def __init__(self, *, key: bytes | None = None) -> None:
        self._chainer = _Chainer(key)
        self._lock = threading.Lock()
        self.records: list[dict[str, Any]] = []
        self.failing = False

    def submit(self, record: Mapping[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        """Chain and keep the record at once."""
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        with self._lock:
            if self.failing:
                future.set_exception(AuditWriteError("audit sink is failing"))
                return future
            chained = self._chainer.chain(record)
            self.records.append(chained)
        future.set_result(chained)
        return future

    def lines(self) -> list[bytes]:
        """The records as the file sink would write them."""
        with self._lock:
            return [encode(record) + b"\n" for record in self.records]

    def close(self) -> None:
        """Nothing to release."""


_STOP: Final = object()


def _claim(path: Path) -> tuple[Path, int]:
    # The first writer chain of the trail no live process holds: an exclusive, non-blocking
    # flock on its lock file, held until close. The kernel drops it when its holder dies,
    # so a crashed writer's chain is resumed by the next process to start.
    for number in range(1, MAX_WRITERS + 1):
        candidate = writer_path(path, number)
        fd = os.open(lock_path(candidate), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        return candidate, fd
    raise AuditWriteError(f"audit trail {path}: {MAX_WRITERS} writers already hold it")


class JsonlFileSink:
    """A hash-chained JSON Lines trail on disk, of which this sink is one writer.

    No two writers (processes, or sinks in one process) ever append to one chain: the sink
    takes the first of the trail's writer chains that no other holds (``audit.jsonl``, then
    ``audit.w2.jsonl``, ...) under an exclusive lock, and resumes that chain from its end.
    ``gateway audit verify`` checks every writer's chain of the trail.

    Args:
        path: the trail's first active file; this writer's rotated segments sit beside its
            own active file as ``<name>.000001`` ...
        fsync: the durability policy (default: every record reaches disk before its ack).
        batch_interval: for ``FsyncPolicy.BATCH``, the longest time between fsyncs (s).
        max_bytes: rotate the active file once it reaches this size (``None``: never).
            The chain continues across files, so they verify as one trail.
        key: an HMAC key; without it, the chain is plain SHA-256.
        clock: a monotonic clock (seconds).

    Raises:
        AuditWriteError: the claimed chain's tail is damaged (a partial last line) or its
            head does not match, so appending would extend a broken chain; or every writer
            chain is held.
        OSError: the trail's folder cannot be created or its lock file opened.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy | str = FsyncPolicy.ALWAYS,
        batch_interval: float = 0.05,
        max_bytes: int | None = None,
        key: bytes | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = FsyncPolicy(fsync)
        self._interval = batch_interval
        self._max_bytes = max_bytes
        self._clock = clock
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._path, self._lock_fd = _claim(Path(path))
        try:
            seq, prev = self._recover()
            self._fd = os.open(
                self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640
            )
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._chainer = _Chainer(key, seq, prev)
        self._size = os.fstat(self._fd).st_size
        self._segment = self._last_segment()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._broken: BaseException | None = None
        self._last_sync = clock()
        self._unsynced = False
        self._closed = False
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="gateway-audit", daemon=True)
        self._thread.start()

    @property
    def path(self) -> Path:
        """This writer's active file."""
        return self._path

    @property
    def fsync_policy(self) -> FsyncPolicy:
        """The durability policy."""
        return self._policy

    def _recover(self) -> tuple[int, str]:
        files = trail_files(self._path)
        last: bytes | None = None
        for candidate in reversed(files):
            data = candidate.read_bytes()
            if not data:
                continue
            if not data.endswith(b"\n"):
                raise AuditWriteError(f"audit trail {candidate} ends with a partial record")
            last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
            break
        if last is None:
            return 0, GENESIS
        malformed = AuditWriteError(f"audit trail {self._path} has a malformed last record")
        try:
            record = decode(last)
        except MalformedRecordError:
            raise malformed from None
        seq = record.get("seq") if isinstance(record, dict) else None
        digest = record.get("hash") if isinstance(record, dict) else None
        if type(seq) is not int or not isinstance(digest, str):
            raise malformed
        head = head_path(self._path)
        if head.exists():
            # An unreadable head is the verifier's to report; it is rewritten on the next commit.
            with contextlib.suppress(MalformedRecordError):
                head_seq, _ = read_head(head)
                if head_seq > seq:
                    raise AuditWriteError(
                        f"audit trail {self._path} ends at record {seq} but its head says "
                        f"{head_seq}: it was truncated"
                    )
        return seq, digest

    def _last_segment(self) -> int:
        numbers = [int(p.suffix[1:]) for p in trail_files(self._path) if p != self._path]
        return max(numbers, default=0)

    def submit(self, record: Mapping[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        """Queue a record for the writer thread; never blocks on I/O."""
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        # Under the close lock: a record queued after the stop marker would never resolve.
        with self._close_lock:
            if self._closed:
                future.set_exception(AuditWriteError("audit sink is closed"))
            elif self._broken is not None:
                future.set_exception(AuditWriteError("audit sink failed earlier; trail is closed"))
            else:
                self._queue.put((dict(record), future))
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            stop = item is _STOP
            group = [] if stop else [item]
            while len(group) < _MAX_GROUP:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                group.append(nxt)
            if group:
                self._commit(group)
            if stop:
                self._final_sync()
                return

    def _commit(
        self, group: list[tuple[dict[str, Any], concurrent.futures.Future[dict[str, Any]]]]
    ) -> None:
        if self._broken is not None:
            for _, future in group:
                future.set_exception(AuditWriteError("audit sink failed earlier; trail is closed"))
            return
        # A record that is not JSON (a lone surrogate in a call id, say) fails alone; the
        # chain only advances for records that encode, so the trail stays whole and usable.
        accepted: list[tuple[dict[str, Any], concurrent.futures.Future[dict[str, Any]]]] = []
        for record, future in group:
            try:
                accepted.append((self._chainer.chain(record), future))
            except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
                future.set_exception(
                    AuditWriteError(f"audit record is not JSON: {type(exc).__name__}")
                )
        if not accepted:
            return
        try:
            chained = [record for record, _ in accepted]
            payload = b"".join(encode(record) + b"\n" for record in chained)
            view = memoryview(payload)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            self._size += len(payload)
            self._unsynced = True
            if self._policy is FsyncPolicy.ALWAYS or (
                self._policy is FsyncPolicy.BATCH
                and self._clock() - self._last_sync >= self._interval
            ):
                os.fsync(self._fd)
                self._last_sync = self._clock()
                self._unsynced = False
            self._write_head()
            if self._max_bytes is not None and self._size >= self._max_bytes:
                self._rotate()
        except Exception as exc:  # noqa: BLE001 - any I/O failure fails the whole group closed
            self._broken = exc
            for _, future in accepted:
                if not future.done():
                    future.set_exception(AuditWriteError(f"audit write failed: {exc}"))
            return
        for record, future in accepted:
            future.set_result(record)

    def _write_head(self) -> None:
        head = head_path(self._path)
        temporary = head.with_name(head.name + ".tmp")
        temporary.write_text(json.dumps([self._chainer.seq, self._chainer.prev]), encoding="utf-8")
        os.replace(temporary, head)

    def _rotate(self) -> None:
        if self._policy is not FsyncPolicy.NONE:
            os.fsync(self._fd)
        os.close(self._fd)
        self._segment += 1
        os.replace(self._path, self._path.with_name(f"{self._path.name}.{self._segment:06d}"))
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        self._size = 0

    def _final_sync(self) -> None:
        with contextlib.suppress(OSError):
            if self._unsynced and self._policy is not FsyncPolicy.NONE:
                os.fsync(self._fd)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        # Last: another writer may take this chain only once every record is in it.
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)

    def close(self) -> None:
        """Write what is queued, fsync (unless the policy is NONE), close. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(_STOP)
        self._thread.join()

    def __enter__(self) -> JsonlFileSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
