"""The deadline clock of embedded evaluations: the epoch of one wasmtime engine per tick interval.

Deadlines are counted in epoch ticks (:class:`EpochTicker`); something must advance the
epoch every interval. A Python thread doing it takes the GIL every time it wakes, and the
thread serving calls pays for each hand-over: every system call that releases the GIL
(a socket write, ``os.urandom``) may hand it to the clock and wait to get it back. Measured
here on the HTTP service's call path in process (no sockets, audit off): 81 us per call with
a Python clock thread ticking every 5 ms, 62 us with no clock at all, and ``os.urandom(16)``
inside a call took 11 us against 0.8 us.

So where the C library offers it (Linux on a 64-bit CPU), the epoch is advanced by a POSIX
timer created with ``SIGEV_THREAD`` whose notification function *is*
``wasmtime_engine_increment_epoch``, called with the engine's pointer on the C library's own
thread: no Python code runs, the GIL is never taken. Elsewhere a daemon Python thread ticks.

Memory safety: such a timer calls into its engine with no Python reference in between, and a
notification may still be under way after the timer is disarmed. So the engines ticked here
are never freed: one per tick interval (about 20 KiB each), made on first use and kept for
the life of the process. Every :class:`EpochTicker` of one interval shares its engine and
its clock; the clock is disarmed when the last one stops and armed again by the next.

Fork: a child process inherits neither timers nor threads. After a fork the child gives every
interval that has tickers a Python thread clock (``os.register_at_fork``), so its evaluations
still have deadlines. (The gateway's own worker processes are spawned, not forked, and tick
natively.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import math
import os
import platform
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import ClassVar, Final, Protocol

import wasmtime
from wasmtime import _ffi as ffi

_CLOCK_MONOTONIC: Final = 1
_SIGEV_THREAD: Final = 2
#: The 64-bit ABIs where ``union sigval`` is passed exactly as a pointer (one register).
_NATIVE_MACHINES: Final = frozenset({"x86_64", "amd64", "aarch64", "arm64"})


def new_engine() -> wasmtime.Engine:
    """A wasmtime engine whose evaluations can be interrupted by epoch deadlines."""
    config = wasmtime.Config()
    config.epoch_interruption = True
    # Linear memory grows in place (its reservation covers any 32-bit memory), so an
    # instance can keep one view of it instead of asking for its address on every call.
    config.memory_may_move = False
    return wasmtime.Engine(config)


class _SigEvent(ctypes.Structure):
    # struct sigevent on 64-bit Linux (glibc and musl): the value, the signal, the notify
    # kind, then the SIGEV_THREAD function and attributes inside a 48-byte union.
    _fields_ = (
        ("value", ctypes.c_void_p),
        ("signo", ctypes.c_int),
        ("notify", ctypes.c_int),
        ("function", ctypes.c_void_p),
        ("attributes", ctypes.c_void_p),
        ("_pad", ctypes.c_int * 8),
    )


class _TimeSpec(ctypes.Structure):
    _fields_ = (("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long))


class _TimerSpec(ctypes.Structure):
    _fields_ = (("interval", _TimeSpec), ("value", _TimeSpec))


class _Driver(Protocol):
    def arm(self) -> None: ...
    def disarm(self) -> None: ...
    @property
    def armed(self) -> bool: ...


_TimerFunctions = tuple[Callable[..., int], Callable[..., int], Callable[..., int]]


def _timer_functions() -> _TimerFunctions | None:
    # timer_create, timer_settime and timer_gettime, from the C library (glibc 2.34+,
    # musl) or librt.
    if sys.platform != "linux" or platform.machine().lower() not in _NATIVE_MACHINES:
        return None
    if ctypes.sizeof(ctypes.c_void_p) != 8 or ctypes.sizeof(_SigEvent) != 64:
        return None
    for name in ("c", "rt"):
        found = ctypes.util.find_library(name)
        if found is None:
            continue
        try:
            library = ctypes.CDLL(found, use_errno=True)
            create, settime = library.timer_create, library.timer_settime
            gettime = library.timer_gettime
        except (OSError, AttributeError):
            continue
        create.argtypes = (ctypes.c_int, ctypes.POINTER(_SigEvent), ctypes.POINTER(ctypes.c_void_p))
        create.restype = ctypes.c_int
        settime.argtypes = (
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.POINTER(_TimerSpec),
            ctypes.c_void_p,
        )
        settime.restype = ctypes.c_int
        gettime.argtypes = (ctypes.c_void_p, ctypes.POINTER(_TimerSpec))
        gettime.restype = ctypes.c_int
        return create, settime, gettime
    return None


_TIMERS: Final = _timer_functions()
_INCREMENT_EPOCH: Final = ctypes.cast(ffi.dll.wasmtime_engine_increment_epoch, ctypes.c_void_p)


def native_timers() -> bool:
    """Whether epochs here are advanced by C library timers, without Python (or the GIL).

    Never in a process forked from one that used them (see :meth:`_Clock.after_fork`).
    """
    return _TIMERS is not None and not _Clock.forked


class _NativeTimer:
    """A POSIX timer whose every expiration calls ``wasmtime_engine_increment_epoch(engine)``.

    The engine must outlive the timer and any notification of it: never freed (see the
    module's docstring). The timer is never deleted; it is disarmed instead.
    """

    def __init__(self, engine: wasmtime.Engine, interval_s: float) -> None:
        assert _TIMERS is not None  # noqa: S101 - made only where native_timers()
        self._settime = _TIMERS[1]
        event = _SigEvent()
        event.value = ctypes.cast(engine.ptr(), ctypes.c_void_p).value
        event.notify = _SIGEV_THREAD
        event.function = _INCREMENT_EPOCH.value
        self._timer = ctypes.c_void_p()
        if _TIMERS[0](_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(self._timer)) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"timer_create: {os.strerror(error)}")
        nanoseconds = max(1, round(interval_s * 1e9))
        period = _TimeSpec(nanoseconds // 1_000_000_000, nanoseconds % 1_000_000_000)
        self._armed = _TimerSpec(period, period)
        self._disarmed = _TimerSpec()

    def _set(self, spec: _TimerSpec) -> None:
        if self._settime(self._timer, 0, ctypes.byref(spec), None) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"timer_settime: {os.strerror(error)}")

    def arm(self) -> None:
        self._set(self._armed)

    def disarm(self) -> None:
        self._set(self._disarmed)

    @property
    def armed(self) -> bool:
        assert _TIMERS is not None  # noqa: S101 - made only where native_timers()
        current = _TimerSpec()
        if _TIMERS[2](self._timer, ctypes.byref(current)) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"timer_gettime: {os.strerror(error)}")
        return bool(current.value.seconds or current.value.nanoseconds)


class _ThreadClock:
    """A daemon Python thread advancing the engine's epoch every interval while armed."""

    def __init__(self, engine: wasmtime.Engine, interval_s: float) -> None:
        self._engine = engine
        self._interval_s = interval_s
        self._generation = 0

    def arm(self) -> None:
        # A new generation: a thread of an earlier one, still asleep, ends when it wakes.
        self._generation += 1
        threading.Thread(
            target=self._run, args=(self._generation,), name="wasm-epoch", daemon=True
        ).start()

    def disarm(self) -> None:
        self._generation += 1

    @property
    def armed(self) -> bool:
        # Each arm() makes the generation odd, each disarm() even.
        return self._generation % 2 == 1

    def _run(self, generation: int) -> None:
        while True:
            time.sleep(self._interval_s)
            if self._generation != generation:
                return
            self._engine.increment_epoch()


class _Interval:
    """The engine of one tick interval, the tokens of its tickers and its clock."""

    def __init__(self, interval_s: float, *, native: bool) -> None:
        self.interval_s = interval_s
        self.native = native
        self.engine = new_engine()
        # Never freed: a native timer calls into it. The list alone is not enough, since
        # the interpreter clears module globals as it exits while a timer may still fire;
        # the extra reference outlives that.
        _KEPT.append(self.engine)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.engine))
        self.tokens: set[int] = set()
        self.driver: _Driver = self._driver()

    def _driver(self) -> _Driver:
        if self.native and not _Clock.forked:
            return _NativeTimer(self.engine, self.interval_s)
        return _ThreadClock(self.engine, self.interval_s)

    def renew(self) -> None:
        # In a forked child: the parent's timer or thread did not come along; a thread
        # takes its place (see _Clock.after_fork).
        self.driver = self._driver()
        if self.tokens:
            self.driver.arm()


#: Every engine a clock was made for, kept so that none is ever freed.
_KEPT: Final[list[wasmtime.Engine]] = []


class _Clock:
    """The clocks of every tick interval, and the tickers registered with them.

    :meth:`stop` runs from engines' finalizers, which the garbage collector may run on any
    thread at any allocation, including one made while a thread holds the lock here. So it
    never waits for the lock: it queues the removal (``deque.append`` is atomic) and applies
    the queue only if the lock is free; a thread that holds it applies the queue before it
    lets go and looks again after, so no removal is left waiting.
    """

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _intervals: ClassVar[dict[tuple[float, bool], _Interval]] = {}
    _removals: ClassVar[deque[tuple[float, bool, int]]] = deque()
    _tokens: ClassVar[itertools.count[int]] = itertools.count()
    #: Whether this process was forked from one with clocks.
    forked: ClassVar[bool] = False

    @classmethod
    def start(cls, interval_s: float, *, native: bool) -> tuple[int, wasmtime.Engine]:
        """Register a ticker; its token and the engine its interval's clock advances."""
        token = next(cls._tokens)
        with cls._lock:
            try:
                cls._apply_removals()
                interval = cls._intervals.get((interval_s, native))
                if interval is None:
                    interval = cls._intervals[(interval_s, native)] = _Interval(
                        interval_s, native=native
                    )
                if not interval.tokens:
                    interval.driver.arm()
                interval.tokens.add(token)
            finally:
                cls._apply_removals()
        cls._drain()
        return token, interval.engine

    @classmethod
    def stop(cls, interval_s: float, native: bool, token: int) -> None:
        """Queue the removal of one registration; applied at once when the lock is free."""
        cls._removals.append((interval_s, native, token))
        cls._drain()

    @classmethod
    def ticking(cls, interval_s: float, *, native: bool) -> bool:
        """Whether the clock of ``interval_s`` is armed (some ticker of it is running)."""
        cls._drain()
        with cls._lock:
            cls._apply_removals()
            interval = cls._intervals.get((interval_s, native))
            return interval is not None and interval.driver.armed

    @classmethod
    def _drain(cls) -> None:
        while cls._removals and cls._lock.acquire(blocking=False):
            try:
                cls._apply_removals()
            finally:
                cls._lock.release()

    @classmethod
    def _apply_removals(cls) -> None:
        # Called with the lock held. The last ticker of an interval disarms its clock.
        while cls._removals:
            interval_s, native, token = cls._removals.popleft()
            interval = cls._intervals.get((interval_s, native))
            if interval is not None and token in interval.tokens:
                interval.tokens.discard(token)
                if not interval.tokens:
                    interval.driver.disarm()

    @classmethod
    def after_fork(cls) -> None:
        """In a forked child: one thread, no timers; every interval gets a thread clock.

        The lock may have been held by a thread that did not come along, so it is made
        anew. No C library timer is made here, nor later in this process: the C library
        starts the thread behind them under a lock of its own, which a thread of the parent
        may have held as it forked (a ``timer_create`` in such a child was seen to block
        forever).
        """
        cls.forked = True
        cls._lock = threading.Lock()
        for interval in cls._intervals.values():
            interval.renew()


os.register_at_fork(after_in_child=_Clock.after_fork)


class EpochTicker:
    """Advances the epoch of its interval's engine every ``interval_s``, until stopped.

    Deadlines are counted in ticks: an evaluation given ``n`` ticks traps after between
    ``(n - 1) * interval_s`` and ``n * interval_s``. Every ticker of one interval shares one
    engine (:attr:`engine`, for stores whose evaluations it bounds) and one clock, so many
    engines in one process cost one wake-up per tick, not one each.

    Args:
        interval_s: the tick.
        native: advance the epoch with a C library timer (no Python, no GIL); ``None``
            (default): where :func:`native_timers`, else with a Python thread.
    """

    def __init__(self, interval_s: float, *, native: bool | None = None) -> None:
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise ValueError("interval_s must be positive")
        if native is None:
            native = native_timers()
        elif native and not native_timers():
            raise ValueError("this platform has no C library timers for the epoch")
        self.interval_s = float(interval_s)
        self.native = native
        self._stopped = False
        self._token, self.engine = _Clock.start(self.interval_s, native=native)

    def ticks_for(self, timeout_s: float) -> int:
        """Deadline ticks that give at least ``timeout_s``."""
        return max(1, math.ceil(timeout_s / self.interval_s)) + 1

    @property
    def ticking(self) -> bool:
        """Whether this ticker's clock is armed (false once every ticker of it stopped)."""
        return _Clock.ticking(self.interval_s, native=self.native)

    def stop(self) -> None:
        """Stop ticking (idempotent; safe from a finalizer on any thread: it never waits)."""
        if not self._stopped:
            self._stopped = True
            _Clock.stop(self.interval_s, self.native, self._token)
