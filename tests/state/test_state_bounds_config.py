"""``[state] max_sessions`` and ``max_sessions_per_caller``: the memory backend's bounds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.service import ConfigError, parse_config
from gateway.service._builder import build_state_store
from gateway.state import MemoryStateStore, Reservation, StateFullError, StateUnavailableError
from tests.server.test_config import at, valid


def test_the_bounds_reach_the_memory_store(tmp_path: Path) -> None:
    data = at(at(valid(tmp_path), "state.max_sessions", 3), "state.max_sessions_per_caller", 2)
    config = parse_config(data, base=tmp_path)

    store = build_state_store(config)

    assert isinstance(store, MemoryStateStore)
    caller = {"caller": "acme/alice"}
    for session in ("s1", "s2"):
        assert asyncio.run(store.reserve(_reservation(session, caller))).status == "ok"
    with pytest.raises(StateFullError):
        asyncio.run(store.reserve(_reservation("s3", caller)))
    assert asyncio.run(store.reserve(_reservation("s4", {"caller": "acme/bob"}))).status == "ok"
    with pytest.raises(StateUnavailableError):
        asyncio.run(store.reserve(_reservation("s5", {"caller": "acme/carol"})))


def _reservation(session: str, counters: dict[str, str]) -> Reservation:
    return Reservation(
        session=session,
        expected_version=None,
        tool="t",
        counters=counters,
        windows=(60,),
        limits=(),
        labels=(),
        history_max=10,
        session_ttl_s=3600,
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_sessions": 0}, r"^state\.max_sessions: must be at least 1"),
        ({"max_sessions_per_caller": 0}, r"^state\.max_sessions_per_caller: must be between"),
        (
            {"max_sessions": 10, "max_sessions_per_caller": 11},
            r"^state\.max_sessions_per_caller: must be between",
        ),
        ({"max_sessions_per_caller": "5"}, r"^state\.max_sessions_per_caller: must be int"),
        ({"max_sessions": True}, r"^state\.max_sessions: must be int"),
    ],
)
def test_a_bound_out_of_range_is_refused_by_name(
    tmp_path: Path, values: dict[str, object], message: str
) -> None:
    data = valid(tmp_path)
    for name, value in values.items():
        data = at(data, f"state.{name}", value)

    with pytest.raises(ConfigError, match=message):
        parse_config(data, base=tmp_path)


def test_the_bounds_are_refused_with_the_redis_backend(tmp_path: Path) -> None:
    data = at(valid(tmp_path), "state.backend", "redis")
    data = at(at(data, "state.url", "redis://127.0.0.1:6379/0"), "state.max_sessions_per_caller", 5)

    with pytest.raises(ConfigError, match=r"^state\.max_sessions: only with backend"):
        parse_config(data, base=tmp_path)
