"""Durability fakes for a file sink: GatedFsync, TornWrite and WakeCountingLoop.

``GatedFsync`` is a ``sync_file`` that records each call and can hold it; ``TornWrite`` is a
``write_head`` torn by a simulated crash; ``WakeCountingLoop`` counts how often other
threads wake an event loop.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Callable
from typing import Any


class GatedFsync:
    """Stands in for ``os.fsync`` as a sink's ``sync_file``.

    Each call records the size the file had when it was synced, then waits while the gate
    is closed (:meth:`hold` / :meth:`release`), then fsyncs for real or raises ``error``.

    Args:
        error: raised by every call (after the gate) when set.
        timeout: the longest a held call waits (s), a safety net never reached by a
            passing test.
    """

    def __init__(self, *, error: OSError | None = None, timeout: float = 30.0) -> None:
        self.error = error
        self.sizes: list[int] = []
        self._gate = threading.Event()
        self._gate.set()
        self._entered = threading.Semaphore(0)
        self._timeout = timeout

    def __call__(self, fd: int) -> None:
        """Record, wait at the gate, then sync (or fail)."""
        self.sizes.append(os.fstat(fd).st_size)
        self._entered.release()
        if not self._gate.wait(self._timeout):
            raise TimeoutError("GatedFsync held past its timeout")
        if self.error is not None:
            raise self.error
        os.fsync(fd)

    @property
    def calls(self) -> int:
        """How many syncs were asked for."""
        return len(self.sizes)

    def hold(self) -> None:
        """Make later calls wait until :meth:`release`."""
        self._gate.clear()

    def release(self) -> None:
        """Let waiting and later calls through."""
        self._gate.set()

    def wait_entered(self) -> None:
        """Block until one more call has entered (in call order).

        Raises:
            TimeoutError: no call entered in time.
        """
        if not self._entered.acquire(timeout=self._timeout):
            raise TimeoutError("no sync was asked for")


class TornWrite:
    """Stands in for ``os.pwrite`` as a file sink's ``write_head``: a crash mid-write.

    Writes pass through until :meth:`tear` arms it; the next write then puts only its first
    ``cut`` bytes in the file and raises ``OSError`` (EIO), as a power loss in the middle of
    the write would leave the file. ``calls`` counts every write.
    """

    def __init__(self) -> None:
        self.calls = 0
        self._cut: int | None = None
        self._lock = threading.Lock()

    def tear(self, cut: int) -> None:
        """Tear the next write after ``cut`` bytes."""
        with self._lock:
            self._cut = cut

    def __call__(self, fd: int, data: bytes, offset: int) -> int:
        """Write ``data`` at ``offset``, or the torn part of it and fail."""
        with self._lock:
            self.calls += 1
            cut, self._cut = self._cut, None
        if cut is None:
            return os.pwrite(fd, data, offset)
        os.pwrite(fd, data[:cut], offset)
        raise OSError(errno.EIO, "write torn by a simulated crash")


class WakeCountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the callbacks other threads hand it.

    ``threadsafe_calls`` is how many times :meth:`call_soon_threadsafe` was called: each
    is one wake-up of the loop by another thread (a file sink's syncer, say). Run a test on
    it with ``asyncio.Runner(loop_factory=WakeCountingLoop)``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.threadsafe_calls = 0
        self._count_lock = threading.Lock()

    def call_soon_threadsafe(
        self, callback: Callable[..., object], *args: object, context: Any = None
    ) -> asyncio.Handle:
        """Count, then schedule as the base loop does."""
        with self._count_lock:
            self.threadsafe_calls += 1
        return super().call_soon_threadsafe(callback, *args, context=context)
