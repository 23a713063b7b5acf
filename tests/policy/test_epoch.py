"""The deadline clock: epochs advanced natively (no Python, no GIL) or by a thread, shared per
interval, disarmed with its last ticker, and renewed in a forked child."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
import wasmtime
from hypothesis import given
from hypothesis import strategies as st

from gateway.policy import EmbeddedEngine, _epoch
from tests.policy.conftest import SHIPPED_BUNDLE

#: A module that never ends by itself: only its epoch deadline stops it.
_SPIN = '(module (func (export "spin") (loop $l (br $l))))'
_DRIVERS = [False, True] if _epoch.native_timers() else [False]


def _spin_traps(engine: wasmtime.Engine, ticks: int, module: wasmtime.Module | None = None) -> bool:
    store = wasmtime.Store(engine)
    store.set_epoch_deadline(ticks)
    instance = wasmtime.Instance(store, module or wasmtime.Module(engine, _SPIN), [])
    spin = instance.exports(store)["spin"]
    assert isinstance(spin, wasmtime.Func)
    try:
        spin(store)
    except wasmtime.Trap as trap:
        return trap.trap_code == wasmtime.TrapCode.INTERRUPT
    return False


def _interval_for(name: str) -> float:
    # An interval no other test uses, so that no other ticker keeps its clock armed.
    return 0.004 + (hash(name) % 1000) * 1e-7


@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine().lower() not in {"x86_64", "aarch64"},
    reason="the native clock is for 64-bit Linux",
)
def test_on_64_bit_linux_the_epoch_is_advanced_without_python() -> None:
    assert _epoch.native_timers()
    before = {t.ident for t in threading.enumerate()}
    ticker = _epoch.EpochTicker(_interval_for("native"))
    try:
        assert ticker.native
        # No Python thread runs the clock (a native one calls into wasmtime directly).
        assert {t.ident for t in threading.enumerate()} <= before
        assert _spin_traps(ticker.engine, ticker.ticks_for(0.02))
    finally:
        ticker.stop()


def test_an_embedded_engine_ticks_natively_where_it_can() -> None:
    with EmbeddedEngine.from_bundle(SHIPPED_BUNDLE) as engine:
        assert engine._ticker.native is _epoch.native_timers()
        assert engine._engine is engine._ticker.engine


@pytest.mark.parametrize("native", _DRIVERS)
def test_a_spinning_evaluation_traps_at_its_deadline(native: bool) -> None:
    ticker = _epoch.EpochTicker(_interval_for(f"spin{native}"), native=native)
    try:
        assert _spin_traps(ticker.engine, ticker.ticks_for(0.02))
    finally:
        ticker.stop()


@pytest.mark.parametrize("native", _DRIVERS)
def test_the_clock_is_armed_exactly_while_a_ticker_of_its_interval_runs(native: bool) -> None:
    interval = _interval_for(f"armed{native}")
    first = _epoch.EpochTicker(interval, native=native)
    second = _epoch.EpochTicker(interval, native=native)
    assert first.engine is second.engine
    assert first.ticking
    assert second.ticking
    first.stop()
    first.stop()  # idempotent: the other ticker's registration stays
    assert second.ticking
    second.stop()
    assert not first.ticking
    assert not second.ticking
    third = _epoch.EpochTicker(interval, native=native)
    try:
        assert third.engine is first.engine  # never freed, so never made again
        assert third.ticking
        assert _spin_traps(third.engine, third.ticks_for(0.02))
    finally:
        third.stop()
    assert not third.ticking


def test_a_disarmed_native_clock_no_longer_advances_the_epoch() -> None:
    if not _epoch.native_timers():
        pytest.skip("no native clock on this platform")
    ticker = _epoch.EpochTicker(_interval_for("disarmed"), native=True)
    engine = ticker.engine
    ticker.stop()
    store = wasmtime.Store(engine)
    store.set_epoch_deadline(1)
    # Several intervals pass while disarmed: a deadline one tick ahead is still ahead.
    time.sleep(ticker.interval_s * 5)
    probe = wasmtime.Instance(
        store, wasmtime.Module(engine, '(module (func (export "f") (loop $l)))'), []
    )
    f = probe.exports(store)["f"]
    assert isinstance(f, wasmtime.Func)
    f(store)  # the loop runs once and returns: no interrupt was due


def test_every_engine_a_clock_advances_is_kept_for_the_life_of_the_process() -> None:
    ticker = _epoch.EpochTicker(_interval_for("kept"))
    ticker.stop()
    assert any(engine is ticker.engine for engine in _epoch._KEPT)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("native", _DRIVERS)
@pytest.mark.parametrize("lock_held", [False, True])
def test_a_forked_child_still_has_deadlines(native: bool, lock_held: bool) -> None:
    # Neither timers nor threads survive a fork, and a thread of the parent may hold the
    # clock's lock as it forks: the child still gets a clock, and a new ticker, both on a
    # thread (a native clock is never made in a forked child).
    ticker = _epoch.EpochTicker(_interval_for(f"fork{native}"), native=native)
    # Compiled here: wasmtime's compiler threads do not survive a fork either.
    spin = wasmtime.Module(ticker.engine, _SPIN)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with _epoch._Clock._lock:
            holding.set()
            release.wait()

    holder = threading.Thread(target=hold, daemon=True)
    if lock_held:
        holder.start()
        holding.wait()
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 only if both deadlines hold
            code = 1
            try:
                other = _epoch.EpochTicker(_interval_for(f"forkchild{native}"))
                if (
                    not _epoch.native_timers()
                    and not other.native
                    and other.ticking
                    and _spin_traps(ticker.engine, ticker.ticks_for(0.02), spin)
                ):
                    code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child's evaluation never reached its deadline")
            time.sleep(0.01)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        ticker.stop()


@pytest.mark.parametrize("interval", [0.0, -1.0, float("nan"), float("inf")])
def test_an_interval_that_is_not_a_positive_number_is_refused(interval: float) -> None:
    with pytest.raises(ValueError, match="interval_s must be positive"):
        _epoch.EpochTicker(interval)


def _in_a_child(action: Callable[[], bool]) -> bool:
    # ``action`` run in a forked child: whether it returned True there.
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if action() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_native_clock_is_refused_where_there_is_none() -> None:
    # A forked child never makes one (see test_a_forked_child_still_has_deadlines).
    def refused() -> bool:
        try:
            _epoch.EpochTicker(0.005, native=True)
        except ValueError as exc:
            return "no C library timers" in str(exc)
        return False

    assert _in_a_child(refused)


@given(
    interval=st.floats(min_value=1e-4, max_value=1.0),
    timeout=st.floats(min_value=1e-6, max_value=100.0),
)
def test_deadline_ticks_always_cover_the_timeout(interval: float, timeout: float) -> None:
    ticks = _epoch.EpochTicker.ticks_for(_Fixed(interval), timeout)  # type: ignore[arg-type]
    # The first tick may come at once: the (ticks - 1) full intervals after it must cover it.
    assert (ticks - 1) * interval >= timeout * (1 - 1e-12)


class _Fixed:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s


def test_a_process_that_exits_with_its_clock_ticking_exits_cleanly() -> None:
    # The interpreter tears its modules down as it exits while the clock may still fire
    # into the engine (every 0.1 ms here): the engine must outlive that.
    script = (
        "import time\n"
        "from gateway.policy import _epoch\n"
        "ticker = _epoch.EpochTicker(0.0001)\n"
        "time.sleep(0.02)\n"
    )
    for _ in range(8):
        done = subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
        assert done.returncode == 0
