"""The Redis backend against a real redis-server: atomic across replicas, fail-closed, durable."""

from __future__ import annotations

import asyncio
import collections

from gateway import ToolCall
from gateway.service import CallResult, Gateway
from gateway.state import MemoryStateStore, RedisStateStore, StateQuery, StateStore
from gateway.testing import RedisServer
from tests.state.helpers import ALICE, QUOTA, build, call

#: A deadline no loaded machine reaches, for the tests that are not about deadlines.
SLACK = 10.0


async def _trifecta_and_quota(store: StateStore) -> None:
    gateway, _engine, tools = build(store)
    await gateway.call(call("read_secret"), caller=ALICE, session="s1")
    await gateway.call(call("fetch_page"), caller=ALICE, session="s1")
    refused = await gateway.call(call("send_email"), caller=ALICE, session="s1")
    allowed = await gateway.call(call("send_email", 1), caller=ALICE, session="s2")
    pays = await asyncio.gather(*(gateway.call(call("pay", n), caller=ALICE) for n in range(12)))

    assert (refused.code, allowed.code) == ("denied", "ok")
    assert sum(r.code == "ok" for r in pays) == QUOTA
    assert tools["pay"].count == QUOTA


async def test_the_redis_backend_decides_like_the_in_process_one(
    redis_server: RedisServer,
) -> None:
    store = RedisStateStore(redis_server.url, timeout_s=SLACK)
    try:
        await _trifecta_and_quota(store)
    finally:
        await store.close()
    await _trifecta_and_quota(MemoryStateStore())


async def test_replicas_sharing_redis_never_run_more_calls_than_the_quota(
    redis_server: RedisServer,
) -> None:
    stores = [RedisStateStore(redis_server.url, timeout_s=SLACK) for _ in range(3)]
    replicas = [build(store) for store in stores]
    try:
        results = await asyncio.gather(
            *(
                replicas[n % 3][0].call(call("pay", n), caller=ALICE, session=f"s{n}")
                for n in range(60)
            )
        )
    finally:
        for store in stores:
            await store.close()

    assert sum(r.code == "ok" for r in results) == QUOTA
    assert sum(tools["pay"].count for _gateway, _engine, tools in replicas) == QUOTA


async def test_an_unreachable_redis_fails_the_calls_that_need_state_and_no_other(
    redis_server: RedisServer,
) -> None:
    store = RedisStateStore(redis_server.url, timeout_s=0.2)
    gateway, _engine, tools = build(store)
    redis_server.kill()
    try:
        reads = await gateway.call(call("send_email"), caller=ALICE, session="s1")
        labels = await gateway.call(call("read_secret"), caller=ALICE, session="s1")
        plain = await gateway.call(call("echo"), caller=ALICE, session="s1")
    finally:
        await store.close()

    assert reads.code == labels.code == "state_unavailable"
    assert reads.status == 503
    assert "127.0.0.1" not in (reads.message or "")
    assert plain.code == "ok"
    assert (tools["send_email"].count, tools["read_secret"].count) == (0, 0)


async def test_a_paused_redis_times_out_into_state_unavailable_and_recovers(
    redis_server: RedisServer,
) -> None:
    store = RedisStateStore(redis_server.url, timeout_s=1.0)
    gateway, _engine, tools = build(store)
    try:
        assert (await gateway.call(call("pay"), caller=ALICE)).code == "ok"
        redis_server.pause()
        paused = await gateway.call(call("pay", 1), caller=ALICE)
        redis_server.resume()
        after = await gateway.call(call("pay", 2), caller=ALICE)
    finally:
        redis_server.resume()
        await store.close()

    assert paused.code == "state_unavailable"
    assert after.code == "ok"
    assert tools["pay"].count == 2


async def test_records_are_stored_once_taken_once_and_kept_apart_by_namespace(
    redis_server: RedisServer,
) -> None:
    for store in (RedisStateStore(redis_server.url, timeout_s=SLACK), MemoryStateStore()):
        try:
            assert await store.add_record("approvals", "a1", b"\x00one", 60)
            assert not await store.add_record("approvals", "a1", b"two", 60)
            assert await store.get_record("other", "a1") is None
            assert await store.get_record("approvals", "a1") == b"\x00one"
            taken = await asyncio.gather(*(store.take_record("approvals", "a1") for _ in range(8)))
            assert [t for t in taken if t is not None] == [b"\x00one"]
            await store.put_record("approvals", "a2", b"x", 60)
            assert await store.delete_record("approvals", "a2")
            assert not await store.delete_record("approvals", "a2")
        finally:
            await store.close()


class _Load:
    # Concurrent callers in their own sessions, each calling pay and read_secret in turn.
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.results: list[tuple[str, str, CallResult]] = []
        self.done = 0
        self.failed = 0
        self.progress = asyncio.Event()

    async def caller(self, worker: int, calls: int) -> None:
        session = f"w{worker}"
        for n in range(calls):
            name = "pay" if n % 2 == 0 else "read_secret"
            result = await self.gateway.call(
                ToolCall(f"{worker}-{n}", name, "{}"), caller=ALICE, session=session
            )
            self.results.append((session, name, result))
            self.done += 1
            self.failed += result.code == "state_unavailable"
            self.progress.set()
            await asyncio.sleep(0)

    async def until(self, condition: collections.abc.Callable[[], bool]) -> None:
        while not condition():
            self.progress.clear()
            await self.progress.wait()


async def test_kill_pause_and_restart_under_load_lose_no_history_and_never_exceed_the_quota(
    durable_redis: RedisServer,
) -> None:
    store = RedisStateStore(durable_redis.url, timeout_s=1.0)
    # 8 callers try 160 payments; the quota of 60 is reached while the faults happen.
    quota = 60
    gateway, _engine, tools = build(store, reads=frozenset({"pay"}), quota=quota)
    load = _Load(gateway)
    workers = [asyncio.create_task(load.caller(w, 40)) for w in range(8)]
    try:
        await load.until(lambda: load.done >= 30)
        durable_redis.pause()
        await load.until(lambda: load.failed >= 8)
        durable_redis.resume()
        await load.until(lambda: load.done >= 120)
        durable_redis.kill()
        await load.until(lambda: load.failed >= 24)
        await asyncio.to_thread(durable_redis.start)
        await asyncio.gather(*workers)
        history = {f"w{w}": await _history(store, f"w{w}") for w in range(8)}
    finally:
        durable_redis.resume()
        for worker in workers:
            worker.cancel()
        await store.close()

    ran = [(s, name) for s, name, r in load.results if r.code == "ok"]
    codes = collections.Counter(r.code for _s, _n, r in load.results)
    assert set(codes) == {"ok", "denied", "state_unavailable"}
    # Zero over-quota executions: every pay that ran was reserved within the quota, and
    # the quota was reached (denials) despite the faults.
    assert tools["pay"].count == sum(name == "pay" for _s, name in ran) <= quota
    assert tools["pay"].count > quota // 2
    # Zero lost history entries: every call that ran in a session is in its history (a
    # reservation whose reply was lost may add an entry for a call that did not run).
    for w in range(8):
        executed = collections.Counter(name for s, name in ran if s == f"w{w}")
        recorded = collections.Counter(tool for tool, _outcome in history[f"w{w}"])
        assert all(recorded[name] >= count for name, count in executed.items()), w
        assert sum(executed.values()) > 0


async def _history(store: RedisStateStore, session: str) -> list[tuple[str, str]]:
    from gateway.state import counter_ids

    key, counters = counter_ids(ALICE, session, "pay")
    snapshot = await store.read(StateQuery(key, counters, (3600,)))
    assert snapshot.session is not None
    return [(entry.tool, entry.outcome) for entry in snapshot.session.history]
