"""The in-process store never drops live state to make room: a full store refuses new state.

A caller who floods fresh session ids must not wipe another session's labels (the egress
refusal they carry) or reset a quota counter; the flood itself is what fails closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.policy import CallerContext
from gateway.service import ResultCode
from gateway.state import (
    MemoryStateStore,
    Reservation,
    StateQuery,
    StateUnavailableError,
)
from gateway.testing import FakeClock
from tests.state.helpers import ALICE, QUOTA, build, call

MALLORY = CallerContext(subject="mallory", roles=["agent"], tenant="evil")
#: A time at the start of every window used here (a day, an hour, a minute).
T0 = 86400.0 * 20_000


def _reservation(
    session: str | None,
    *,
    caller: str = "c",
    labels: tuple[str, ...] = (),
    windows: tuple[int, ...] = (60,),
    limits: tuple[tuple[str, int, int], ...] = (),
    ttl_s: int = 3600,
    **counters: str,
) -> Reservation:
    return Reservation(
        session=session,
        expected_version=None,
        tool="t",
        labels=labels,
        counters={"caller": caller, **counters},
        windows=windows,
        limits=limits,
        session_ttl_s=ttl_s,
    )


def _query(
    session: str | None, *, caller: str = "c", windows: tuple[int, ...] = (60,)
) -> StateQuery:
    return StateQuery(session, {"caller": caller}, windows)


# -- through the gateway --------------------------------------------------------------------


async def test_a_flood_of_fresh_sessions_never_wipes_another_sessions_labels() -> None:
    gateway, _engine, tools = build(MemoryStateStore(max_sessions=4))
    await gateway.call(call("read_secret"), caller=ALICE, session="s1")
    await gateway.call(call("fetch_page"), caller=ALICE, session="s1")

    flood = [
        await gateway.call(call("fetch_page", n), caller=MALLORY, session=f"m{n}")
        for n in range(12)
    ]
    egress = await gateway.call(call("send_email"), caller=ALICE, session="s1")

    assert egress.code == ResultCode.DENIED
    assert egress.message == "no external egress in this session"
    assert tools["send_email"].count == 0
    assert [r.code for r in flood] == ["ok"] * 3 + ["state_unavailable"] * 9


async def test_a_caller_cannot_flood_away_its_own_sessions_labels_either() -> None:
    gateway, _engine, tools = build(MemoryStateStore(max_sessions=3))
    await gateway.call(call("read_secret"), caller=ALICE, session="s1")
    await gateway.call(call("fetch_page"), caller=ALICE, session="s1")
    for n in range(6):
        await gateway.call(call("read_secret", n), caller=ALICE, session=f"fresh{n}")

    egress = await gateway.call(call("send_email"), caller=ALICE, session="s1")

    assert egress.code == ResultCode.DENIED
    assert tools["send_email"].count == 0


async def test_a_flood_of_fresh_counters_never_resets_a_quota() -> None:
    clock = FakeClock(start=T0)
    gateway, _engine, tools = build(MemoryStateStore(clock=clock, max_entries=40))
    paid = [await gateway.call(call("pay", n), caller=ALICE) for n in range(QUOTA + 1)]
    assert [r.code for r in paid] == ["ok"] * QUOTA + [ResultCode.DENIED]

    flood = [
        await gateway.call(call("fetch_page", n), caller=MALLORY, session=f"m{n}")
        for n in range(20)
    ]
    clock.advance(120)  # the minute windows close; the hour of the quota has not
    flood += [
        await gateway.call(call("read_secret", n), caller=MALLORY, session=f"n{n}")
        for n in range(20)
    ]
    again = await gateway.call(call("pay", 99), caller=ALICE)

    assert again.code == ResultCode.DENIED
    assert tools["pay"].count == QUOTA
    assert {r.code for r in flood} == {"ok", "state_unavailable"}


async def test_one_caller_at_its_session_bound_leaves_room_for_the_others() -> None:
    gateway, _engine, _tools = build(MemoryStateStore(max_sessions=10, max_sessions_per_caller=3))

    flood = [
        await gateway.call(call("fetch_page", n), caller=MALLORY, session=f"m{n}") for n in range(8)
    ]
    alice = [
        await gateway.call(call("read_secret", n), caller=ALICE, session=f"a{n}") for n in range(3)
    ]
    again = await gateway.call(call("fetch_page", 99), caller=MALLORY, session="m0")

    assert [r.code for r in flood] == ["ok"] * 3 + ["state_unavailable"] * 5
    assert [r.code for r in alice] == ["ok"] * 3
    assert again.code == "ok"  # its existing sessions keep working


# -- the store ------------------------------------------------------------------------------


async def test_a_full_store_refuses_a_new_session_until_one_expires() -> None:
    clock = FakeClock(start=T0)
    store = MemoryStateStore(clock=clock, max_sessions=2)
    for session in ("a", "b"):
        assert (await store.reserve(_reservation(session, labels=("x",), ttl_s=600))).status == "ok"

    with pytest.raises(StateUnavailableError, match="full"):
        await store.reserve(_reservation("c", labels=("y",), ttl_s=600))
    clock.advance(599)
    with pytest.raises(StateUnavailableError, match="full"):
        await store.reserve(_reservation("c", labels=("y",), ttl_s=600))
    assert (await store.reserve(_reservation("a", ttl_s=600))).status == "ok"  # renewed
    clock.advance(1)  # b has been idle for its whole time to live; a has not

    assert (await store.reserve(_reservation("c", labels=("y",), ttl_s=600))).status == "ok"
    assert (await store.read(_query("a"))).session.labels == ("x",)  # type: ignore[union-attr]
    assert (await store.read(_query("b"))).session.labels == ()  # type: ignore[union-attr]


async def test_a_refused_reservation_writes_nothing() -> None:
    clock = FakeClock(start=T0)
    store = MemoryStateStore(clock=clock, max_sessions=1, max_entries=3)
    await store.reserve(_reservation("a", labels=("x",)))  # one counter: c/60
    before = await store.read(_query("b"))

    with pytest.raises(StateUnavailableError):
        await store.reserve(_reservation("b", labels=("y",)))  # no room for the session
    with pytest.raises(StateUnavailableError):  # no room for three more counters
        await store.reserve(_reservation(None, tenant="t1", tenant_tool="t2", session_tool="s1"))

    after = await store.read(_query("b"))
    assert after == before
    assert after.counts == {"caller": {60: 1}}
    assert (await store.read(StateQuery(None, {"session_tool": "s1"}, (60,)))).counts == {
        "session_tool": {60: 0}
    }


async def test_counters_are_dropped_only_once_their_window_has_closed() -> None:
    clock = FakeClock(start=T0)
    store = MemoryStateStore(clock=clock, max_entries=2)
    await store.reserve(_reservation(None, caller="a", windows=(60, 3600)))

    clock.advance(59)
    with pytest.raises(StateUnavailableError, match="full"):
        await store.reserve(_reservation(None, caller="b", windows=(60,)))
    clock.advance(1)  # a's minute has closed, its hour has not
    assert (await store.reserve(_reservation(None, caller="b", windows=(60,)))).status == "ok"
    with pytest.raises(StateUnavailableError, match="full"):
        await store.reserve(_reservation(None, caller="c", windows=(60,)))

    counts = (await store.read(_query(None, caller="a", windows=(60, 3600)))).counts
    assert counts == {"caller": {60: 0, 3600: 1}}


async def test_a_full_store_still_serves_the_state_it_holds() -> None:
    store = MemoryStateStore(clock=FakeClock(start=T0), max_sessions=1, max_entries=1)
    await store.reserve(_reservation("a", labels=("x",)))
    with pytest.raises(StateUnavailableError):
        await store.reserve(_reservation("b"))

    reserved = await store.reserve(_reservation("a", labels=("z",), limits=(("caller", 60, 2),)))
    quota = await store.reserve(_reservation("a", limits=(("caller", 60, 2),)))

    assert (reserved.status, quota.status) == ("ok", "quota")
    snapshot = await store.read(_query("a"))
    assert snapshot.session is not None
    assert (snapshot.session.labels, snapshot.session.calls) == (("x", "z"), 2)
    assert snapshot.counts == {"caller": {60: 2}}


async def test_records_are_dropped_only_once_they_expire() -> None:
    clock = FakeClock(start=T0)
    store = MemoryStateStore(clock=clock, max_entries=2)
    await store.put_record("approvals", "a", b"1", 10)
    assert await store.add_record("approvals", "b", b"2", 20)

    with pytest.raises(StateUnavailableError, match="full"):
        await store.put_record("approvals", "c", b"3", 10)
    with pytest.raises(StateUnavailableError, match="full"):
        await store.add_record("approvals", "c", b"3", 10)
    await store.put_record("approvals", "a", b"1'", 10)  # replacing needs no room
    clock.advance(10)

    assert await store.add_record("approvals", "c", b"3", 10)
    assert await store.get_record("approvals", "a") is None
    assert await store.get_record("approvals", "b") == b"2"


def test_the_bounds_are_checked() -> None:
    for bad in ({"max_sessions": 0}, {"max_entries": 0}, {"max_sessions_per_caller": 0}):
        with pytest.raises(ValueError, match="at least 1"):
            MemoryStateStore(**bad)  # type: ignore[arg-type]


async def test_renewing_a_session_many_times_keeps_the_expiry_queue_bounded() -> None:
    clock = FakeClock(start=T0)
    store = MemoryStateStore(clock=clock)
    for _ in range(5000):
        await store.reserve(_reservation("a"))
        clock.advance(0.01)
    assert len(store._session_queue) <= 2 * len(store._sessions) + 1024
    assert len(store._counter_queue) <= 2 * len(store._counters) + 1024


# -- the property ---------------------------------------------------------------------------

_FLOOD = st.lists(
    st.tuples(
        st.integers(0, 7),  # the flooding session (or none)
        st.integers(0, 3),  # the flooding caller
        st.sets(st.sampled_from(["a", "b", "secret"]), max_size=2),  # labels
        st.sampled_from([(60,), (3600,), (60, 3600)]),  # windows counted
        st.integers(0, 2),  # seconds passing before it
    ),
    max_size=40,
)


@given(
    flood=_FLOOD,
    max_sessions=st.integers(1, 6),
    max_entries=st.integers(2, 12),
    per_caller=st.one_of(st.none(), st.integers(1, 3)),
)
def test_no_flood_of_other_sessions_changes_what_a_session_reads(
    flood: list[tuple[int, int, set[str], tuple[int, ...], int]],
    max_sessions: int,
    max_entries: int,
    per_caller: int | None,
) -> None:
    # The victim's session, labels and counters stay as they were while they are live (the
    # flood lasts under 90 s: the flood's minutes may close, the victim's hour and session
    # do not).
    async def run() -> None:
        clock = FakeClock(start=T0)
        bound: dict[str, Any] = (
            {} if per_caller is None else {"max_sessions_per_caller": per_caller}
        )
        store = MemoryStateStore(
            clock=clock, max_sessions=max_sessions, max_entries=max_entries, **bound
        )
        victim = dataclasses.replace(
            _reservation("victim", caller="v", labels=("secret",), windows=(3600,)),
            counters={"caller": "v", "session": "v-s"},
            limits=(("caller", 3600, 5),),
        )
        assert (await store.reserve(victim)).status == "ok"
        query = StateQuery("victim", {"caller": "v", "session": "v-s"}, (3600,))
        before = await store.read(query)
        for session, caller, labels, windows, seconds in flood:
            clock.advance(seconds)
            reservation = _reservation(
                f"f{session}" if session else None,
                caller=f"f{caller}",
                labels=tuple(sorted(labels)),
                windows=windows,
                limits=(("caller", windows[0], 3),),
                session_tool=f"f{session}-t",
            )
            with contextlib.suppress(StateUnavailableError):
                await store.reserve(reservation)
            assert len(store._sessions) <= max_sessions
            assert len(store._counters) <= max_entries
            assert await store.read(query) == before
        again = await store.reserve(dataclasses.replace(victim, labels=()))
        assert again.status == "ok"
        assert (await store.read(query)).counts == {"caller": {3600: 2}, "session": {3600: 2}}

    asyncio.run(run())
