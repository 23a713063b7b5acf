"""Shared pieces of the replay tests: two real policies that differ on known calls.

The baseline is what was enforced when the trail was recorded; the candidate changes
exactly the decisions :data:`CALLS` says it changes. Both run on the real OPA (the
embedded engine compiles them with it; the OPA server serves them), which must be
provisioned: the tests fail, never skip, without it.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from gateway import Authorization, ToolDefinition
from gateway.audit import AuditingAuthorizer, AuditTrail, JsonlFileSink
from gateway.policy import CallerContext, EmbeddedEngine, PolicyAuthorizer, caller_context
from gateway.policy._engine import PolicyEngine
from gateway.replay import DecisionTap, KeyRing, ObservedAuthorizer, ReplayCapture
from tests.policy.conftest import provisioned_opa

BASELINE: Final = """package gateway.authz

roles := {"reader": {"search", "read"}, "writer": {"search", "read", "write"}}

decision := {"allow": true} if {
	some role in input.context.roles
	input.tool.name in roles[role]
} else := {"allow": false, "message": "denied by default"}
"""

CANDIDATE: Final = """package gateway.authz

roles := {"reader": {"search", "read", "write"}, "writer": {"search", "read"}}

decision := {"allow": false, "message": "deletion is not allowed"} if {
	input.tool.name == "delete"
} else := {"allow": true, "reasons": ["read is logged"]} if {
	input.tool.name == "read"
	some role in input.context.roles
	input.tool.name in roles[role]
} else := {"allow": true} if {
	some role in input.context.roles
	input.tool.name in roles[role]
} else := "not a decision" if {
	input.tool.name == "explode"
} else := {"allow": false, "message": "denied by default"}
"""


@dataclass(frozen=True, slots=True)
class Call:
    """One recorded call and the change the candidate makes to its decision."""

    tool: str
    roles: tuple[str, ...]
    arguments: bytes
    change: str | None


#: The calls recorded, and exactly what the candidate changes of each.
CALLS: Final = (
    Call("search", ("reader",), b'{"q": "x"}', None),
    Call("read", ("reader",), b'{"path": "/a"}', "reasons"),
    Call("write", ("reader",), b'{"path": "/a", "password": "hunter2"}', "deny-to-allow"),
    Call("write", ("writer",), b'{"path": "/b"}', "allow-to-deny"),
    Call("delete", ("writer",), b'{"path": "/b"}', "message"),
    Call("explode", ("reader",), b"{}", "deny-to-error"),
    Call("search", (), b"{}", None),
    Call("write", ("reader", "writer"), b'{"n": 1.50}', None),
)

SCHEMA: Final = {"type": "object"}


def key_entry(key_id: str, byte: int) -> str:
    """A fixed key ring entry (the same bytes every run)."""
    return f"{key_id}:{base64.b64encode(bytes([byte]) * 32).decode('ascii')}"


@pytest.fixture(scope="session")
def opa_bin() -> str:
    """The real opa (fails, never skips, when missing)."""
    return provisioned_opa()


@pytest.fixture(scope="session")
def policy_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The baseline and the candidate policy folders."""
    root = tmp_path_factory.mktemp("replay-policies")
    folders = []
    for name, text in (("baseline", BASELINE), ("candidate", CANDIDATE)):
        folder = root / name
        folder.mkdir()
        (folder / "authz.rego").write_text(text, encoding="utf-8")
        folders.append(folder)
    return folders[0], folders[1]


@pytest.fixture
def baseline_engine(opa_bin: str, policy_dirs: tuple[Path, Path]) -> Iterator[EmbeddedEngine]:
    """The enforced policy, embedded."""
    with EmbeddedEngine.from_directory(policy_dirs[0], opa_binary=opa_bin) as engine:
        yield engine


@pytest.fixture
def candidate_engine(opa_bin: str, policy_dirs: tuple[Path, Path]) -> Iterator[EmbeddedEngine]:
    """The candidate policy, embedded."""
    with EmbeddedEngine.from_directory(policy_dirs[1], opa_binary=opa_bin) as engine:
        yield engine


async def record(
    engine: PolicyEngine,
    trail_dir: Path,
    *,
    capture_dir: Path | None = None,
    keyring: KeyRing | None = None,
    calls: Sequence[Call] = CALLS,
) -> list[str]:
    """Decide ``calls`` through the audit trail (and the capture); their decision ids."""
    sink = JsonlFileSink(trail_dir / "audit.jsonl", fsync="none")
    capture = (
        ReplayCapture(capture_dir, keyring)
        if capture_dir is not None and keyring is not None
        else None
    )
    trail = AuditTrail(DecisionTap(sink, capture=capture))
    authorizer = AuditingAuthorizer(ObservedAuthorizer(PolicyAuthorizer(engine)), trail)
    try:
        for call in calls:
            definition = ToolDefinition(call.tool, SCHEMA)
            context = CallerContext({"subject": "s", "roles": list(call.roles)})
            # An error decision raises; it is recorded like any other.
            with caller_context(context), contextlib.suppress(Exception):
                await authorizer.authorize(Authorization(definition, call.arguments))
    finally:
        trail.sink.close()
    return decision_ids(trail_dir)


def decision_ids(trail_dir: Path) -> list[str]:
    """The decision ids of the trail's decision records, in order."""
    records = [
        json.loads(line)
        for line in (trail_dir / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    return [record["decision_id"] for record in records if record["type"] == "decision"]


def expected_changes(calls: Sequence[Call] = CALLS) -> dict[str, int]:
    """How many of each change the candidate makes of ``calls``."""
    counts: dict[str, int] = {}
    for call in calls:
        if call.change is not None:
            counts[call.change] = counts.get(call.change, 0) + 1
    return counts
