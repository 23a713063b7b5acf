"""Approvals on Redis: one store for several replicas (a real redis-server on loopback)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.approvals._redis import RedisApprovalStore
from gateway.audit import AuditTrail, MemorySink
from gateway.service import ConfigError, parse_config
from gateway.service._builder import build_approvals
from gateway.testing import FakeClock
from gateway.testing._redis_server import RedisServer
from tests.approvals.test_approvals import CLERK, TREASURER, World

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with RedisServer(persistent=True) as server:
        yield server


def store(server: RedisServer, clock: FakeClock) -> RedisApprovalStore:
    return RedisApprovalStore.from_url(server.url, prefix="t:", timeout_s=2.0, clock=clock)


async def test_an_approval_asked_on_one_replica_is_decided_and_used_on_another(
    redis_server: RedisServer,
) -> None:
    clock = FakeClock(1_700_000_000.0)
    first, second = (
        World(store(redis_server, clock), clock),
        World(store(redis_server, clock), clock),
    )
    pending = await first.pay(500)
    assert pending.code == "approval_pending"
    assert [a.id for a in await second.desk.pending(TREASURER)] == [pending.approval_id]
    await second.desk.decide(pending.approval_id, TREASURER, approve=True)

    assert (await second.pay(500)).code == "ok"
    assert (await first.pay(500)).code == "approval_pending"  # single use, across replicas
    assert first.tool.count + second.tool.count == 1


async def test_retries_at_once_on_several_replicas_run_the_approved_call_once(
    redis_server: RedisServer,
) -> None:
    clock = FakeClock(1_700_000_000.0)
    replicas = [World(store(redis_server, clock), clock) for _ in range(3)]
    pending = await replicas[0].pay(500)
    await replicas[1].desk.decide(pending.approval_id, TREASURER, approve=True)

    results = await asyncio.gather(*(w.pay(500) for w in replicas for _ in range(3)))

    assert [r.code for r in results].count("ok") == 1
    assert sum(w.tool.count for w in replicas) == 1


async def test_pending_approvals_survive_a_restart_of_redis(redis_server: RedisServer) -> None:
    clock = FakeClock(1_700_000_000.0)
    world = World(store(redis_server, clock), clock)
    pending = await world.pay(500)
    redis_server.kill()
    redis_server.restart()
    again = World(store(redis_server, clock), clock)

    assert [a.id for a in await again.desk.pending(TREASURER)] == [pending.approval_id]


async def test_redis_down_refuses_the_approval_step_and_never_runs_the_call(
    redis_server: RedisServer,
) -> None:
    clock = FakeClock(1_700_000_000.0)
    world = World(store(redis_server, clock), clock)
    pending = await world.pay(500)
    await world.desk.decide(pending.approval_id, TREASURER, approve=True)
    redis_server.kill()

    result = await world.pay(500, caller=CLERK)

    assert result.code == "no_decision"
    assert world.tool.count == 0


# -- [approvals] backend = "redis" ----------------------------------------------------------


def _config_data(tmp_path: Path, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "engine": {"kind": "opa", "url": "http://127.0.0.1:8181"},
        "audit": {"path": str(tmp_path / "audit.jsonl"), "unkeyed": True},
        "auth": {"api_keys": [{"sha256": "a" * 64, "context": {"subject": "alice"}}]},
        "tools": {"modules": ["tests.approvals.http_tools:TOOLS"]},
        "approvals": {"enabled": True, "backend": "redis"},
        "state": state,
    }


def test_redis_approvals_need_the_redis_of_the_state(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^approvals\.backend: "):
        parse_config(_config_data(tmp_path, {}), base=tmp_path)
    data = _config_data(tmp_path, {})
    data["approvals"]["backend"] = "sqlite"
    with pytest.raises(ConfigError, match=r"^approvals\.backend: must be"):
        parse_config(data, base=tmp_path)


async def test_the_service_keeps_approvals_in_the_redis_of_its_state(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    config = parse_config(
        _config_data(tmp_path, {"backend": "redis", "url": redis_server.url}), base=tmp_path
    )
    trail = AuditTrail(MemorySink())
    gate, desk = build_approvals(config, trail)

    assert gate is not None
    assert desk is not None
    assert isinstance(gate.store, RedisApprovalStore)
