"""Real redis-server processes for the Redis backend's tests (they fail when none exists)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.testing import RedisServer


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def durable_redis() -> Iterator[RedisServer]:
    # Every acknowledged write fsynced to the append-only file: it survives a SIGKILL.
    with RedisServer(persistent=True) as server:
        yield server
