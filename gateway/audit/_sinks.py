"""Where audit records go: the sink protocol, a memory sink and a hash-chained JSONL file.

A sink chains each record (``seq``, ``prev``, ``hash``) in submission order and reports,
through a future, when the record is as durable as its policy promises. Submission never
waits for a disk flush: the file sink appends on the caller's thread (a write to the page
cache) and one syncer thread fsyncs in groups, so concurrent callers share each fsync.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import fcntl
import hashlib
import json
import json.encoder
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol, cast, runtime_checkable

from gateway._errors import NoDecisionError
from gateway.audit._chain import (
    GENESIS,
    HEAD_FILE_SIZE,
    HEAD_SLOT_STRIDE,
    Head,
    MalformedRecordError,
    _plain,
    decode,
    decode_head_slots,
    encode,
    encode_head,
    first_hash,
    head_path,
    load_head,
    lock_path,
    trail_files,
    writer_path,
)

_MAX_GROUP: Final = 512
#: How many processes may write one trail at once, each to its own chain.
MAX_WRITERS: Final = 64


class AuditWriteError(NoDecisionError):
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


# The record encoder's settings (``_chain.encode``), without its check for circular
# references: a record is a tree of plain values, and a cycle or nesting past the
# interpreter's limit raises RecursionError, which fails that record alone.
_RECORD_ENCODER: Final = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    check_circular=False,
    default=_plain,
)


def _part_encoder() -> Callable[[Any], str]:
    # The C encoder behind ``_RECORD_ENCODER``, called directly: ``JSONEncoder.encode`` builds
    # it anew (and runs two Python frames) for every value.
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _RECORD_ENCODER.encode
    iterencode = make(
        None, _plain, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )

    def encode(value: Any) -> str:
        return "".join(iterencode(value, 0))

    return encode


_encode_part: Final = _part_encoder()


def _hmac_states(key: bytes) -> tuple[Any, Any]:
    # HMAC-SHA256 (RFC 2104) with the key's inner and outer blocks hashed once: each record
    # then costs two copies and two updates instead of a keyed setup.
    block = hashlib.sha256(key).digest() if len(key) > _SHA256_BLOCK else key
    block = block.ljust(_SHA256_BLOCK, b"\0")
    inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in block))
    outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in block))
    return inner, outer


_SHA256_BLOCK: Final = 64


class _Chainer:
    # Chains each record with one canonical encoding: the members that sort before
    # ``hash`` and those after it are encoded apart, so that the hashed body (every member
    # but ``hash``) and the line (with it) are both spliced from the same two encodings.
    # The result is byte for byte ``encode(record)`` and ``record_hash`` (a property test
    # holds it to them). ``first`` is record 1's hash, the chain's identity (its head names
    # it), GENESIS until there is one.
    def __init__(
        self, key: bytes | None, seq: int = 0, prev: str = GENESIS, first: str = GENESIS
    ) -> None:
        self.key = key
        self.seq = seq
        self.prev = prev
        self.first = first
        self._states = _hmac_states(key) if key is not None else None

    def chain(self, record: Mapping[str, Any]) -> dict[str, Any]:
        chained, _ = self.chain_line(record)
        return chained

    def _digest(self, payload: bytes) -> str:
        if self._states is None:
            return hashlib.sha256(payload).hexdigest()
        inner, outer = self._states[0].copy(), self._states[1].copy()
        inner.update(payload)
        outer.update(inner.digest())
        return outer.hexdigest()  # type: ignore[no-any-return]

    def chain_line(self, record: Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
        """The chained record and its line; the chain advances only if both are made.

        Raises:
            TypeError, ValueError, RecursionError: the record is not JSON (a member name
                that is not a string, a lone surrogate, NaN, a cycle ...).
        """
        seq, prev = self.seq + 1, self.prev
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        for name, value in record.items():
            if name < "hash":
                before[name] = value
            elif name > "hash":
                after[name] = value
        after["seq"] = seq
        after["prev"] = prev
        encode_part = _encode_part
        # "seq" and "prev" sort after "hash": the second part is never empty.
        tail = encode_part(after).encode("utf-8")[1:]
        head = encode_part(before).encode("utf-8")[:-1] + b"," if before else b"{"
        digest = self._digest(prev.encode("ascii") + b"\n" + head + tail)
        line = b"".join((head, b'"hash":"', digest.encode("ascii"), b'",', tail, b"\n"))
        chained = {**before, **after, "hash": digest}
        self.seq, self.prev = seq, digest
        if seq == 1:
            self.first = digest
        return chained, line


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


# A record waiting for an fsync: its future, the chained record, and the event loop that owns
# the future (None for a concurrent future, which any thread may resolve).
_AnyFuture = concurrent.futures.Future[dict[str, Any]] | asyncio.Future[dict[str, Any]]
_Waiter = tuple[_AnyFuture, dict[str, Any], asyncio.AbstractEventLoop | None]


class JsonlFileSink:
    """A hash-chained JSON Lines trail on disk, of which this sink is one writer.

    No two writers (processes, or sinks in one process) ever append to one chain: the sink
    takes the first of the trail's writer chains that no other holds (``audit.jsonl``, then
    ``audit.w2.jsonl``, ...) under an exclusive lock, and resumes that chain from its end.
    ``gateway audit verify`` checks every writer's chain of the trail.

    A record is chained and appended on the submitting thread, under the sink's lock. With
    ``FsyncPolicy.ALWAYS`` it is acknowledged only once one syncer thread has fsynced the
    file past it (concurrent records share each fsync); with the other policies, once it is
    written. :meth:`write` awaits the same on an event loop. The chain's head (the older of
    its two slots) is rewritten in place after every fsync (``ALWAYS``, ``BATCH``), so that
    it never names a record a power loss could take, or after every record (``NONE``).

    Args:
        path: the trail's first active file; this writer's rotated segments sit beside its
            own active file as ``<name>.000001`` ...
        fsync: the durability policy (default: every record reaches disk before its ack).
        batch_interval: for ``FsyncPolicy.BATCH``, the longest time between fsyncs (s).
        max_bytes: rotate the active file once it reaches this size (``None``: never).
            The chain continues across files, so they verify as one trail.
        key: an HMAC key; without it, the chain is plain SHA-256.
        clock: a monotonic clock (seconds).
        sync_file: forces a file descriptor's data to disk (``os.fsync``); injectable so
            that durability ordering can be tested.
        write_head: writes a head slot at an offset of the head file (``os.pwrite``);
            injectable so that a write torn by a crash can be tested.

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
        sync_file: Callable[[int], None] = os.fsync,
        write_head: Callable[[int, bytes, int], int] = os.pwrite,
    ) -> None:
        self._policy = FsyncPolicy(fsync)
        self._key = key
        self._write_slot = write_head
        self._interval = batch_interval
        self._max_bytes = max_bytes
        self._clock = clock
        self._sync_file = sync_file
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._path, self._lock_fd = _claim(Path(path))
        self._fd = -1
        self._head_fd = -1
        try:
            seq, prev, first = self._recover()
            self._fd = os.open(
                self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640
            )
            self._size = os.fstat(self._fd).st_size
            self._head_fd = self._open_head(seq, prev, first)
        except BaseException:
            for fd in (self._head_fd, self._fd, self._lock_fd):
                if fd >= 0:
                    os.close(fd)
            raise
        self._chainer = _Chainer(key, seq, prev, first)
        self._segment = self._last_segment()
        # Appends take the lock alone; the syncer waits on the condition around it.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiters: list[_Waiter] = []
        # Files rotated away while the syncer may still be syncing them: it closes them.
        self._retired: list[int] = []
        self._sync_wanted = False
        self._syncing = False
        self._broken: BaseException | None = None
        self._last_sync = clock()
        self._unsynced = False
        self._closed = False
        self._thread: threading.Thread | None = None
        if self._policy is not FsyncPolicy.NONE:
            self._thread = threading.Thread(
                target=self._sync_loop, name="gateway-audit", daemon=True
            )
            self._thread.start()

    @property
    def path(self) -> Path:
        """This writer's active file."""
        return self._path

    @property
    def fsync_policy(self) -> FsyncPolicy:
        """The durability policy."""
        return self._policy

    def _recover(self) -> tuple[int, str, str]:
        # The chain's last record (seq, hash) and its first record's hash (its identity).
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
        seq, digest, first = 0, GENESIS, GENESIS
        if last is not None:
            malformed = AuditWriteError(f"audit trail {self._path} has a malformed last record")
            try:
                record = decode(last)
            except MalformedRecordError:
                raise malformed from None
            last_seq = record.get("seq") if isinstance(record, dict) else None
            last_hash = record.get("hash") if isinstance(record, dict) else None
            if type(last_seq) is not int or not isinstance(last_hash, str):
                raise malformed
            seq, digest = last_seq, last_hash
            # A damaged first record is the verifier's to report; the head then names none.
            first = first_hash(self._path) or GENESIS
        head = head_path(self._path)
        if head.exists():
            # An unreadable head (a torn rewrite, say) is the verifier's to report; the chain
            # resumes from its last record and the head is rewritten on the next commit. A
            # head that disagrees with the chain is not rewritten: that would hide a cut.
            with contextlib.suppress(MalformedRecordError):
                problem = _resume_problem(load_head(head, self._key), seq, digest, first)
                if problem is not None:
                    raise AuditWriteError(f"audit trail {self._path} {problem}")
        return seq, digest, first

    def _open_head(self, seq: int, prev: str, first: str) -> int:
        # The two-slot head file, and which slot the next commit rewrites: the one that is
        # not the newest intact slot. A missing head, or one of an earlier form, is replaced
        # whole by a fresh file naming the chain's end (atomically, through a temporary file),
        # after the chain itself is on disk.
        head = head_path(self._path)
        try:
            raw = head.read_bytes()
        except FileNotFoundError:
            raw = b""
        if len(raw) == HEAD_FILE_SIZE:
            slots = decode_head_slots(raw, self._key)
            intact = [
                ((slot.seq, slot.hash), index)
                for index, slot in enumerate(slots)
                if slot is not None
            ]
            newest = max(intact, default=None)
            self._head_next = 0 if newest is None else 1 - newest[1]
            self._head_seq = -1 if newest is None else newest[0][0]
            return os.open(head, os.O_RDWR | os.O_CLOEXEC)
        durable = self._policy is not FsyncPolicy.NONE
        if durable:
            os.fsync(self._fd)
        fresh = head.with_name(head.name + ".tmp")
        fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640)
        try:
            os.pwrite(fd, encode_head(seq, prev, self._key, first), 0)
            os.ftruncate(fd, HEAD_FILE_SIZE)
            if durable:
                os.fsync(fd)
            os.replace(fresh, head)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                fresh.unlink()
            raise
        self._head_next, self._head_seq = 1, seq
        return fd

    def _last_segment(self) -> int:
        numbers = [int(p.suffix[1:]) for p in trail_files(self._path) if p != self._path]
        return max(numbers, default=0)

    def submit(self, record: Mapping[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        """Chain and append the record now; the future resolves once it is durable.

        Never waits for an fsync: with ``FsyncPolicy.ALWAYS`` the syncer thread resolves
        the future after its fsync.
        """
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        try:
            entered = self._enter(record, lambda: future, None)
        except AuditWriteError as error:
            future.set_exception(error)
        else:
            if entered is not future:
                future.set_result(entered)  # type: ignore[arg-type]
        return future

    async def write(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Chain and append the record now; return the chained record once it is durable.

        As :meth:`submit`, awaited on the running loop. The syncer wakes that loop once per
        fsync for every record the fsync made durable, rather than once per record; a
        record already durable when appended (``NONE``, ``BATCH``) is returned without a
        future.

        Raises:
            AuditWriteError: the record could not be written (or made durable).
        """
        loop = asyncio.get_running_loop()
        entered = self._enter(record, loop.create_future, loop)
        if isinstance(entered, dict):
            return entered
        return await cast("asyncio.Future[dict[str, Any]]", entered)

    def _enter(
        self,
        record: Mapping[str, Any],
        new_future: Callable[[], _AnyFuture],
        loop: asyncio.AbstractEventLoop | None,
    ) -> dict[str, Any] | _AnyFuture:
        # The chained record when it is as durable as the policy promises once appended, or
        # a future (from ``new_future``) that the syncer resolves once it is. An asyncio
        # future is only ever resolved directly on its own loop's thread (this one).
        #
        # Raises AuditWriteError: the record was not written.
        failed: list[_Waiter] | None = None
        with self._lock:
            if self._closed:
                raise AuditWriteError("audit sink is closed")
            if self._broken is not None:
                raise AuditWriteError("audit sink failed earlier; trail is closed")
            # A record that is not JSON (a lone surrogate in a call id, say) fails alone; the
            # chain only advances for records that encode, so the trail stays whole and usable.
            try:
                chained, line = self._chainer.chain_line(record)
            # UnicodeEncodeError is a ValueError; a cycle or deep nesting a RecursionError.
            except (TypeError, ValueError, RecursionError) as exc:
                raise AuditWriteError(f"audit record is not JSON: {type(exc).__name__}") from None
            try:
                durable = self._append(line)
            except Exception as exc:  # noqa: BLE001 - any I/O failure breaks the sink closed
                self._broken = exc
                failed, self._waiters = self._waiters, []
                self._cond.notify_all()
            else:
                if self._policy is FsyncPolicy.ALWAYS and not durable:
                    future = new_future()
                    self._waiters.append((future, chained, loop))
                    if not self._sync_wanted:  # else the syncer is woken already
                        self._sync_wanted = True
                        self._cond.notify()
                    return future
                return chained
        error = AuditWriteError(f"audit write failed: {self._broken}")
        _settle(failed, error)
        raise error

    def _append(self, line: bytes) -> bool:
        # Under the lock. True when the line is already on disk (a rotation fsynced it).
        written = os.write(self._fd, line)
        if written != len(line):  # a short write (a full disk, a signal): write the rest
            view = memoryview(line)[written:]
            while view:
                view = view[os.write(self._fd, view) :]
        self._size += len(line)
        self._unsynced = True
        if self._policy is FsyncPolicy.NONE:
            self._write_head(self._chainer.seq, self._chainer.prev)
        if self._max_bytes is not None and self._size >= self._max_bytes:
            self._rotate()
            return self._policy is not FsyncPolicy.NONE
        if self._policy is FsyncPolicy.BATCH and self._clock() - self._last_sync >= self._interval:
            self._last_sync = self._clock()
            if not self._sync_wanted:
                self._sync_wanted = True
                self._cond.notify()
        return False

    def _write_head(self, seq: int, prev: str) -> None:
        # Under the lock. Unless the policy is NONE, only after an fsync covering record
        # ``seq``: the head never names a record that might not survive a power loss. The
        # older slot is rewritten, so a torn write leaves the newer one intact.
        if seq <= self._head_seq:
            return
        slot = encode_head(seq, prev, self._key, self._chainer.first)
        if self._write_slot(self._head_fd, slot, self._head_next * HEAD_SLOT_STRIDE) != len(slot):
            raise OSError("short write of the audit head")
        self._head_next ^= 1
        self._head_seq = seq

    def _rotate(self) -> None:
        # Under the lock. Every record written so far is in the file rotated away: it is
        # fsynced here, so every record waiting for an fsync is durable now.
        if self._policy is not FsyncPolicy.NONE:
            self._sync_file(self._fd)
            self._unsynced = False
            self._write_head(self._chainer.seq, self._chainer.prev)
            done, self._waiters = self._waiters, []
            _settle(done, None)
        self._segment += 1
        os.replace(self._path, self._path.with_name(f"{self._path.name}.{self._segment:06d}"))
        old = self._fd
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        self._size = 0
        if self._syncing:
            self._retired.append(old)  # the syncer may be syncing it right now
        else:
            os.close(old)

    def _sync_loop(self) -> None:
        while True:
            with self._cond:
                while not (self._sync_wanted or self._closed):
                    self._cond.wait()
                stop = self._closed
                # Closing with nothing waiting: close() syncs whatever is left unsynced.
                if self._broken is not None or not self._sync_wanted:
                    return
                fd, batch = self._fd, self._waiters
                covered = (self._chainer.seq, self._chainer.prev)
                self._waiters, self._sync_wanted, self._syncing = [], False, True
                self._unsynced = False
            error: BaseException | None = None
            try:
                self._sync_file(fd)
            except Exception as exc:  # noqa: BLE001 - any fsync failure breaks the sink closed
                error = exc
            with self._cond:
                self._syncing = False
                retired, self._retired = self._retired, []
                if error is None:
                    try:
                        self._write_head(*covered)
                    except Exception as exc:  # noqa: BLE001 - the head failed: fail closed
                        error = exc
                if error is not None:
                    self._broken = error
                    batch, self._waiters = [*batch, *self._waiters], []
            for old in retired:
                with contextlib.suppress(OSError):
                    os.close(old)
            if error is not None:
                _settle(batch, AuditWriteError(f"audit write failed: {error}"))
                return
            _settle(batch, None)
            if stop:
                return

    def close(self) -> None:
        """Fsync what is written (unless the policy is NONE), then close. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        with self._cond:
            if self._unsynced and self._broken is None and self._policy is not FsyncPolicy.NONE:
                with contextlib.suppress(OSError):
                    self._sync_file(self._fd)
                    self._write_head(self._chainer.seq, self._chainer.prev)
            for fd in (*self._retired, self._fd, self._head_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._retired = []
        # Last: another writer may take this chain only once every record is in it.
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)

    def __enter__(self) -> JsonlFileSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _resume_problem(head: Head, seq: int, digest: str, first: str) -> str | None:
    # Why a chain ending at record ``seq`` (hash ``digest``), whose record 1 has the hash
    # ``first``, is not the chain its intact head names; the message follows the trail's name.
    if head.seq > seq:
        return f"ends at record {seq} but its head says {head.seq}: it was truncated"
    if head.seq > 0 and head.chain is not None and head.chain != first:
        return "has the head of another chain (it names another first record)"
    if head.seq == seq and head.hash != digest:
        return f"does not match its head at record {seq}: its last record was replaced"
    return None


def _settle(waiters: list[_Waiter], error: AuditWriteError | None) -> None:
    # Resolve each waiter with its record (or ``error``). Concurrent futures directly; the
    # asyncio futures of one loop with one call on that loop, so it is woken once.
    by_loop: dict[asyncio.AbstractEventLoop, list[_Waiter]] = {}
    for waiter in waiters:
        loop = waiter[2]
        if loop is None:
            _resolve(waiter, error)
        else:
            by_loop.setdefault(loop, []).append(waiter)
    for loop, group in by_loop.items():
        # A closed loop has nobody left waiting on it.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_resolve_all, group, error)


def _resolve_all(waiters: list[_Waiter], error: AuditWriteError | None) -> None:
    for waiter in waiters:
        _resolve(waiter, error)


def _resolve(waiter: _Waiter, error: AuditWriteError | None) -> None:
    future, chained, _ = waiter
    if future.done():  # an awaiting task was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(chained)
