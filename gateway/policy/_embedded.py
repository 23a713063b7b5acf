"""The embedded Rego engine (regorus): no server, the policy set loaded from a directory.

regorus holds the GIL for a whole evaluation and cannot be interrupted, so evaluating on a
thread of the gateway would stall its event loop for as long as the policy runs (seconds on
a large enough input). Evaluations therefore run in a fixed pool of worker processes
(:mod:`gateway.policy._regorus_worker`), each with its own regorus engine:

* the caller waits on a pipe with the GIL released, on a worker thread of the engine
  (``evaluate``) or on its own thread (``evaluate_sync``), never on the event loop;
* every evaluation has one deadline, ``timeout`` seconds from the call: past it the caller
  gets :class:`EngineTimeoutError` and the worker still evaluating is killed (its
  replacement starts with the next call, in tens of milliseconds), so a runaway policy
  holds no resource past its deadline;
* at most ``workers`` evaluations run at once and at most ``max_waiting`` more wait for a
  worker (each no longer than its own deadline); beyond that a call fails at once with
  :class:`EngineUnavailableError`.

Everything a worker reports becomes a :class:`gateway.policy.PolicyError`. The policy set
is compiled and warmed up in the loading thread first, so a broken set is refused at load.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from gateway import _json
from gateway.policy import _regorus_worker as worker_protocol
from gateway.policy._decision import normalize
from gateway.policy._document import InputDocument
from gateway.policy._engine import DEFAULT_DECISION_PATH, EngineAnswer, normalize_path
from gateway.policy._errors import (
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    PolicyError,
)

#: The deadline of one evaluation, in seconds (the configuration's ``engine.timeout_s``).
DEFAULT_TIMEOUT: Final = 1.0
#: Worker processes, i.e. evaluations that may run at once.
DEFAULT_WORKERS: Final = 2
#: Calls that may wait for a busy worker, beyond those being evaluated.
DEFAULT_MAX_WAITING: Final = 64

_WORKER_SCRIPT: Final = str(Path(worker_protocol.__file__).resolve())
_HEADER: Final = struct.Struct(">I")


class PolicyLoadError(PolicyError):
    """A policy set that does not parse, compile or survive its warm-up evaluation."""

    code = "policy_load_error"


@dataclass(frozen=True, slots=True)
class PolicySources:
    """The files of one policy set, as loaded: module texts by path, and the data document."""

    modules: tuple[tuple[str, str], ...]
    data: Mapping[str, Any]
    revision: str

    @classmethod
    def from_directory(cls, root: str | os.PathLike[str]) -> PolicySources:
        """Read every ``*.rego`` (except ``*_test.rego``) and every ``data.json`` below root.

        A ``data.json`` in ``a/b/`` is placed at ``data.a.b``, as ``opa run`` does.

        Raises:
            PolicyLoadError: the directory is missing, has no policy, or a file is unreadable
                or not valid JSON.
        """
        base = Path(root)
        if not base.is_dir():
            raise PolicyLoadError(f"policy directory {str(base)!r} does not exist")
        modules: list[tuple[str, str]] = []
        data: dict[str, Any] = {}
        hasher = hashlib.sha256()
        try:
            for path in sorted(base.rglob("*")):
                relative = path.relative_to(base).as_posix()
                if path.suffix == ".rego" and not path.name.endswith("_test.rego"):
                    text = path.read_text(encoding="utf-8")
                    modules.append((relative, text))
                elif path.name == "data.json":
                    text = path.read_text(encoding="utf-8")
                    _merge(data, path.parent.relative_to(base).parts, json.loads(text))
                else:
                    continue
                hasher.update(relative.encode() + b"\0" + text.encode() + b"\0")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise PolicyLoadError(f"cannot read policies: {exc}") from None
        if not modules:
            raise PolicyLoadError(f"no .rego policy found under {str(base)!r}")
        return cls(tuple(modules), data, hasher.hexdigest()[:16])


def _merge(target: dict[str, Any], parts: tuple[str, ...], value: Any) -> None:
    node = target
    for part in parts:
        node = node.setdefault(part, {})
    if not isinstance(value, dict) or not isinstance(node, dict):
        raise ValueError("data.json must hold an object")  # noqa: TRY004 - reported as a load error
    node.update(value)


def _is_control_flow(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit)


def _build(sources: PolicySources) -> Any:
    import regorus  # noqa: PLC0415 - imported where used so the core never needs it

    engine = regorus.Engine()
    try:
        for name, text in sources.modules:
            engine.add_policy(name, text)
        engine.add_data_json(json.dumps(sources.data))
    except BaseException:
        # regorus engines are thread-affine. A traceback keeps this frame alive, and the
        # cyclic collector may free it on any thread: the frame must not hold the engine.
        engine = None
        raise
    return engine


class _Worker:
    """One worker process and the revision of the policy set it holds."""

    __slots__ = ("_reader", "_writer", "process", "revision")

    def __init__(self) -> None:
        # -I: no environment variables, no user site, not the gateway's directory on the
        # path; the worker needs only the standard library and regorus.
        self.process: subprocess.Popen[bytes] = subprocess.Popen(  # noqa: S603 - fixed argv
            [sys.executable, "-I", _WORKER_SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        assert self.process.stdin is not None  # noqa: S101 - PIPE was asked for
        assert self.process.stdout is not None  # noqa: S101
        self._writer: IO[bytes] = self.process.stdin
        self._reader: IO[bytes] = self.process.stdout
        self.revision: str | None = None

    def send(self, payload: bytes) -> None:
        """Write one frame (the worker is idle, so it is reading)."""
        self._writer.write(_HEADER.pack(len(payload)) + payload)
        self._writer.flush()

    def _read(self, size: int, deadline: float) -> bytes | None:
        fd = self._reader.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        chunks: list[bytes] = []
        while size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(remaining * 1000):
                return None
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def receive(self, deadline: float) -> bytes | None:
        """Read one frame; ``None`` when the deadline passed first.

        Raises:
            EOFError: the worker is gone.
        """
        header = self._read(_HEADER.size, deadline)
        if header is None:
            return None
        return self._read(_HEADER.unpack(header)[0], deadline)

    def signal_kill(self) -> None:
        """Send the kill signal only (any thread): its waiter then sees the pipe close."""
        with contextlib.suppress(OSError):
            self.process.kill()

    def kill(self) -> None:
        """End the process, whatever it is doing, and reap it."""
        self.process.kill()
        self.process.wait()
        for stream in (self._writer, self._reader):
            # A pipe whose reader is gone cannot flush; it is closed all the same.
            with contextlib.suppress(OSError):
                stream.close()


class _Pool:
    """At most ``size`` worker processes, started when first needed, and who may wait."""

    def __init__(self, size: int, max_waiting: int) -> None:
        self._size = size
        self._admitted_limit = size + max_waiting
        self._condition = threading.Condition()
        self._idle: list[_Worker] = []
        self._live = 0
        self._admitted = 0
        self._closed = False

    def admit(self) -> None:
        """Count one more call in; refuse it at once when too many are in.

        Raises:
            EngineUnavailableError: the engine is closed or saturated.
        """
        with self._condition:
            if self._closed:
                raise EngineUnavailableError("embedded engine is closed")
            if self._admitted >= self._admitted_limit:
                raise EngineUnavailableError(
                    "embedded engine is saturated",
                    detail=f"{self._admitted} evaluations in progress or waiting",
                )
            self._admitted += 1

    def leave(self) -> None:
        """One admitted call is over."""
        with self._condition:
            self._admitted -= 1

    def acquire(self, deadline: float) -> _Worker:
        """An idle worker (a new one if fewer than ``size`` live), waiting until ``deadline``.

        Raises:
            EngineTimeoutError: none became free in time.
            EngineUnavailableError: the engine is closed, or no worker can be started.
        """
        with self._condition:
            while True:
                if self._closed:
                    raise EngineUnavailableError("embedded engine is closed")
                if self._idle:
                    return self._idle.pop()
                if self._live < self._size:
                    self._live += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise EngineTimeoutError("no embedded engine worker was free in time")
                self._condition.wait(remaining)
        try:
            return _Worker()
        except OSError as exc:
            with self._condition:
                self._live -= 1
                self._condition.notify()
            raise EngineUnavailableError(
                "cannot start an embedded engine worker", detail=f"{type(exc).__name__}: {exc}"
            ) from None

    def release(self, worker: _Worker) -> None:
        """Give back a worker that answered."""
        with self._condition:
            if not self._closed:
                self._idle.append(worker)
                self._condition.notify()
                return
            self._live -= 1
        worker.kill()

    def discard(self, worker: _Worker) -> None:
        """Kill a worker that is late or broken; the next call starts another."""
        worker.kill()
        with self._condition:
            self._live -= 1
            self._condition.notify()

    @property
    def live(self) -> int:
        """Worker processes alive now."""
        with self._condition:
            return self._live

    def pids(self) -> list[int]:
        """The process ids of the idle workers."""
        with self._condition:
            return [worker.process.pid for worker in self._idle]

    def close(self) -> None:
        """Kill the idle workers; busy ones are killed when their evaluation ends."""
        with self._condition:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live -= len(idle)
            self._condition.notify_all()
        for worker in idle:
            worker.kill()


class _Ticket:
    """One asynchronous call's claim on a worker: its caller may abandon it at any time."""

    __slots__ = ("_abandoned", "_lock", "_worker")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._abandoned = False

    def hold(self, worker: _Worker | None) -> bool:
        """Record the worker evaluating (or none); ``False`` if the caller is gone."""
        with self._lock:
            if self._abandoned and worker is not None:
                return False
            self._worker = worker
            return True

    def abandon(self) -> None:
        """The caller is gone: kill the worker evaluating for it, if any."""
        with self._lock:
            self._abandoned = True
            worker = self._worker
        if worker is not None:
            worker.signal_kill()


def _retrieve(future: asyncio.Future[EngineAnswer]) -> None:
    # An answer nobody waits for any more (its caller timed out or was cancelled) is read
    # here, so that asyncio does not report it as never retrieved.
    if not future.cancelled():
        future.exception()


def _shut_down(pool: _Pool, threads: concurrent.futures.ThreadPoolExecutor) -> None:
    pool.close()
    threads.shutdown(wait=False, cancel_futures=True)


def _load_frame(sources: PolicySources) -> bytes:
    return b"L" + json.dumps(
        {"modules": [list(module) for module in sources.modules], "data": sources.data}
    ).encode("utf-8")


def _read_answer(reply: bytes, revision: str) -> EngineAnswer:
    try:
        result = _json.parse_trusted(reply, exact=False)
    except _json.StrictJSONError:
        result = None
    if not isinstance(result, dict):
        raise EngineError("embedded engine worker answered garbage")
    error = result.get("error")
    if error == worker_protocol.UNDEFINED_RULE:
        return EngineAnswer(defined=False, revision=revision)
    if error == worker_protocol.INEXACT:
        raise EngineError(
            "input holds a number the embedded engine cannot represent exactly",
            detail=str(result.get("detail")),
        )
    if error is not None:
        raise EngineError("embedded engine error", detail=str(result.get("detail"))[:500])
    if result.get("defined") is not True:
        return EngineAnswer(defined=False, revision=revision)
    return EngineAnswer(
        defined=True,
        value=normalize(result.get("value")),
        decision_id=uuid.uuid4().hex,
        revision=revision,
    )


class EmbeddedEngine:
    """Evaluates Rego with regorus, in a pool of worker processes (see the module docstring).

    Args:
        sources: the policy set (see :meth:`from_directory`).
        directory: where to :meth:`reload` from, if the sources came from a directory.
        warm_up_path: the decision path evaluated once at load.
        timeout: the deadline of one evaluation, in seconds.
        workers: worker processes (evaluations that may run at once).
        max_waiting: calls that may wait for a worker beyond those evaluating.

    Raises:
        PolicyLoadError: the policy set does not compile or fails its warm-up evaluation.
    """

    def __init__(
        self,
        sources: PolicySources,
        *,
        directory: str | os.PathLike[str] | None = None,
        warm_up_path: str = DEFAULT_DECISION_PATH,
        timeout: float = DEFAULT_TIMEOUT,
        workers: int = DEFAULT_WORKERS,
        max_waiting: int = DEFAULT_MAX_WAITING,
    ) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be positive")
        if workers < 1 or max_waiting < 0:
            raise ValueError("workers must be >= 1 and max_waiting >= 0")
        self._directory = None if directory is None else Path(directory)
        self._warm_up_path = normalize_path(warm_up_path)
        self._timeout = float(timeout)
        self._lock = threading.Lock()
        self._check(sources)
        self._loaded = (sources, _load_frame(sources))
        self._pool = _Pool(workers, max_waiting)
        # One waiting thread per worker process: a thread only ever waits on a pipe.
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="gateway-embedded"
        )
        self._finalizer = weakref.finalize(self, _shut_down, self._pool, self._threads)

    @classmethod
    def from_directory(
        cls,
        directory: str | os.PathLike[str],
        *,
        warm_up_path: str = DEFAULT_DECISION_PATH,
        timeout: float = DEFAULT_TIMEOUT,
        workers: int = DEFAULT_WORKERS,
        max_waiting: int = DEFAULT_MAX_WAITING,
    ) -> EmbeddedEngine:
        """Load a policy directory (``*.rego`` and ``data.json``)."""
        return cls(
            PolicySources.from_directory(directory),
            directory=directory,
            warm_up_path=warm_up_path,
            timeout=timeout,
            workers=workers,
            max_waiting=max_waiting,
        )

    @property
    def timeout(self) -> float:
        """The deadline of one evaluation, in seconds."""
        return self._timeout

    @property
    def live_workers(self) -> int:
        """Worker processes alive now (started on demand, at most ``workers``)."""
        return self._pool.live

    def worker_pids(self) -> list[int]:
        """The process ids of the idle worker processes."""
        return self._pool.pids()

    def close(self) -> None:
        """Stop the worker processes; later evaluations fail with ``engine_unavailable``."""
        self._finalizer()

    def __enter__(self) -> EmbeddedEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def identity(self) -> str:
        """``embedded:<directory>`` (or ``embedded:<id>`` for in-memory sources)."""
        where = str(self._directory) if self._directory is not None else hex(id(self))
        return f"embedded:{where}"

    def revision(self) -> str:
        """A digest of the loaded files; it changes on every reload of changed files."""
        return self._loaded[0].revision

    @property
    def sources(self) -> PolicySources:
        """The policy set in force."""
        return self._loaded[0]

    def _check(self, sources: PolicySources) -> None:
        # Unknown functions and type errors only surface at evaluation: warm up once.
        engine: Any = None
        try:
            engine = _build(sources)
            engine.set_input_json('{"arguments":{},"context":{},"tool":{}}')
            engine.eval_query("data." + self._warm_up_path.replace("/", "."))
        except BaseException as exc:
            # The raised error's traceback keeps this frame: it must not keep the engine,
            # which panics if the last reference goes on another thread.
            engine = None
            if _is_control_flow(exc):
                raise
            raise PolicyLoadError(
                "policy set failed to load", detail=worker_protocol.detail(exc)
            ) from None

    def reload(self) -> bool:
        """Re-read the directory; keep the previous policy set if the new one fails.

        Returns:
            Whether the revision changed.

        Raises:
            PolicyLoadError: the new set does not load (the previous one stays active).
        """
        if self._directory is None:
            raise PolicyLoadError("engine was not loaded from a directory")
        sources = PolicySources.from_directory(self._directory)
        if sources.revision == self.revision():
            return False
        self._check(sources)
        loaded = (sources, _load_frame(sources))
        with self._lock:
            self._loaded = loaded
        return True

    def _run(
        self, rule: bytes, document: bytes, deadline: float, ticket: _Ticket | None = None
    ) -> EngineAnswer:
        # On a thread that may block: waits for a worker and for its answer, not past the
        # deadline. A worker that is late or breaks is killed, never reused.
        if time.monotonic() >= deadline:
            raise EngineTimeoutError(f"embedded engine did not answer within {self._timeout} s")
        worker = self._pool.acquire(deadline)
        if ticket is not None and not ticket.hold(worker):
            self._pool.release(worker)
            raise EngineUnavailableError("the caller is gone")
        sources, load = self._loaded
        answered = False
        try:
            if worker.revision != sources.revision:
                worker.send(load)
                worker.revision = sources.revision
            worker.send(b"E" + rule + b"\n" + document)
            reply = worker.receive(deadline)
            answered = reply is not None
        except EOFError:
            raise EngineError("embedded engine worker ended during an evaluation") from None
        except OSError as exc:
            raise EngineUnavailableError(
                "embedded engine worker is gone", detail=f"{type(exc).__name__}: {exc}"
            ) from None
        finally:
            if ticket is not None:
                ticket.hold(None)
            if answered:
                self._pool.release(worker)
            else:
                self._pool.discard(worker)
        if reply is None:
            raise EngineTimeoutError(f"embedded engine did not answer within {self._timeout} s")
        return _read_answer(reply, sources.revision)

    @staticmethod
    def _request(path: str, document: InputDocument) -> tuple[bytes, bytes]:
        rule = json.dumps({"rule": "data." + path.replace("/", ".")}).encode()
        return rule, document.to_json()

    def evaluate_sync(self, path: str, document: InputDocument) -> EngineAnswer:
        """Evaluate, blocking the calling thread for at most ``timeout`` seconds.

        For threads that may block (never the event loop's: use :meth:`evaluate` there).

        Raises:
            EngineTimeoutError: no answer within ``timeout``.
            EngineUnavailableError: the engine is closed or saturated.
            EngineError: the policy failed on this input.
        """
        rule, encoded = self._request(path, document)
        self._pool.admit()
        try:
            return self._run(rule, encoded, time.monotonic() + self._timeout)
        finally:
            self._pool.leave()

    async def evaluate(self, path: str, document: InputDocument) -> EngineAnswer:
        """Evaluate on a worker process; the event loop only waits, ``timeout`` at most.

        Raises:
            EngineTimeoutError: no answer within ``timeout``.
            EngineUnavailableError: the engine is closed or saturated (at once).
            EngineError: the policy failed on this input.
        """
        rule, encoded = self._request(path, document)
        self._pool.admit()
        ticket = _Ticket()
        try:
            job = self._threads.submit(
                self._run, rule, encoded, time.monotonic() + self._timeout, ticket
            )
        except RuntimeError:  # the executor was shut down by close()
            self._pool.leave()
            raise EngineUnavailableError("embedded engine is closed") from None
        # The call stays counted until its job has ended (or was dropped before it began).
        job.add_done_callback(lambda _job: self._pool.leave())
        waiter = asyncio.wrap_future(job)
        waiter.add_done_callback(_retrieve)
        try:
            async with asyncio.timeout(self._timeout):
                return await asyncio.shield(waiter)
        except TimeoutError:
            # Nobody wants the answer: end the evaluation now, and return once its worker
            # is gone, so a caller told engine_timeout leaves nothing running behind it.
            ticket.abandon()
            job.cancel()
            await asyncio.wait({waiter})
            raise EngineTimeoutError(
                f"embedded engine did not answer within {self._timeout} s"
            ) from None
        except asyncio.CancelledError:
            ticket.abandon()
            job.cancel()
            raise

    def __repr__(self) -> str:
        return f"EmbeddedEngine({self.identity!r}, revision={self.revision()!r})"
