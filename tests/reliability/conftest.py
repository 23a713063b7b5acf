"""Fixtures of the reliability suite: one real OPA (never skipped) and the faulty front.

OPA is the pinned binary from ``$OPA_BIN`` or ``scripts/provision-opa``; when neither gives
one, every test that needs it fails.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.testing import OpaServer
from reliability.faults import FaultEnvironment
from reliability.front import FaultyFront
from reliability.opa import OpaUnavailableError, main_module, opa_binary, start_opa


@pytest.fixture(autouse=True)
def _frozen_heap() -> Iterator[None]:
    """The heap the rest of the suite left behind is kept out of the collector's scans.

    These tests time calls against an engine deadline in this process. After the other suites
    a full collection of that heap took 0.38 s here: a pause that lands inside a measured
    call is the harness's, not the gateway's.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture(scope="session")
def opa_bin() -> str:
    """The pinned OPA binary; fails (never skips) when it cannot be provisioned."""
    try:
        return opa_binary()
    except OpaUnavailableError as exc:
        pytest.fail(f"OPA is required for the reliability suite: {exc}")


@pytest.fixture(scope="module")
def opa(opa_bin: str) -> Iterator[OpaServer]:
    """A real OPA serving the shipped policies, for one test module."""
    server = start_opa(opa_bin)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def front(opa: OpaServer) -> Iterator[FaultyFront]:
    """The faulty front, proxying to the module's OPA."""
    with FaultyFront(opa.url) as server:
        yield server


@pytest.fixture(scope="module")
def environment(opa: OpaServer, front: FaultyFront) -> FaultEnvironment:
    """OPA, the front, and the shipped main module to restore after a policy fault."""
    return FaultEnvironment(opa, front, *main_module(opa))
