"""Fixtures and helpers for the engine tests: a real OPA binary and server, the test policies.

Never skips: an OPA that cannot be provisioned is a test failure.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from gateway import (
    Authorization,
    AuthorizationError,
    Authorizer,
    Binding,
    Guard,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    bind,
)
from gateway.testing import OpaServer, RecordingTool

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
PROVISION_SCRIPT: Final = REPO_ROOT / "scripts" / "provision-opa"

#: The shipped policies, and the bundle compiled from them (``make bundle``).
POLICY_DIR: Final = REPO_ROOT / "policies"
SHIPPED_BUNDLE: Final = REPO_ROOT / "bundles" / "policies.tar.gz"

#: The test policies: package gateway.authz (a well-behaved decision) and gateway.faults.
REGO_DIR: Final = Path(__file__).resolve().parent / "rego"

#: Decision logging on: OPA then puts a decision_id into every answer.
DECISION_LOGS: Final = "--set=decision_logs.console=true"

DECISION: Final = "gateway/authz/decision"
DENY_MESSAGE: Final = "not authorized: ask an administrator"
ALLOWED_SUBJECTS: Final = ("alice", "bob")
#: 2^53 + 1: the smallest positive integer a binary64 float cannot hold.
BIG: Final = 9007199254740993

OBJECT_SCHEMA: Final = {"type": "object"}


@functools.cache
def provisioned_opa() -> str:
    """The pinned opa: ``$OPA_BIN``, else whatever ``scripts/provision-opa`` provides.

    Fails the test (never skips) when there is none.
    """
    configured = os.environ.get("OPA_BIN")
    if configured:
        if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
            pytest.fail(f"OPA_BIN={configured!r} is not an executable file")
        return configured
    try:
        result = subprocess.run(
            [str(PROVISION_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"cannot run {PROVISION_SCRIPT}: {exc}")
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        pytest.fail(
            f"{PROVISION_SCRIPT} failed (exit {result.returncode}); OPA is required, "
            f"set OPA_BIN or fix provisioning:\n{result.stderr[-4000:]}"
        )
    binary = lines[-1]
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{PROVISION_SCRIPT} printed {binary!r}, which is not executable")
    return binary


@pytest.fixture(scope="session")
def opa_binary() -> str:
    """The pinned opa (see :func:`provisioned_opa`)."""
    return provisioned_opa()


@pytest.fixture
def opa_server(opa_binary: str) -> Iterator[OpaServer]:
    """A fresh real OPA serving the test policies, decision logs on; stopped afterwards."""
    with OpaServer(
        binary=opa_binary, policy_paths=[REGO_DIR], extra_args=[DECISION_LOGS]
    ) as server:
        yield server


# -- helpers shared by the engine tests -----------------------------------------------------


def authorization(name: str = "echo", arguments: bytes = b"{}") -> Authorization:
    """An Authorization for a tool with an any-object schema."""
    return Authorization(ToolDefinition(name, OBJECT_SCHEMA), arguments)


def guarded(authorizer: Authorizer, name: str = "echo") -> tuple[Binding, RecordingTool]:
    """A RecordingTool behind a Guard, bound: the tool counts whether anything executed."""
    tool = RecordingTool(name, dict(OBJECT_SCHEMA))
    return bind(Guard(tool=tool, authorizer=authorizer)), tool


async def call(binding: Binding, arguments: str = "{}") -> ToolOutput:
    """Admit and run one call through the binding."""
    invocation = binding.prepare(ToolCall("call-1", binding.definition.name, arguments))
    return await binding.call(invocation)


async def denied_without_running(
    binding: Binding, tool: RecordingTool, arguments: str = "{}"
) -> AuthorizationError:
    """Run one call that must end in AuthorizationError with nothing executed; return it."""
    with pytest.raises(AuthorizationError) as caught:
        await call(binding, arguments)
    assert tool.count == 0, "the tool ran although no decision was established"
    error = caught.value
    assert error.__cause__ is None
    assert error.__context__ is None
    return error


def assert_no_leak(error: AuthorizationError, *secrets: str) -> None:
    """Nothing an engine said reaches what the caller sees (message, repr, the cause's text)."""
    visible = [str(error), repr(error), str(error.args)]
    if error.cause is not None:
        visible += [str(error.cause)]
    for text in visible:
        for secret in secrets:
            assert secret not in text, f"engine text {secret!r} leaked into {text!r}"


def paused(server: OpaServer) -> None:
    """Freeze OPA; ``OpaServer.pause`` returns once every thread is stopped."""
    server.pause()
