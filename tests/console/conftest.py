"""Fixtures of the console tests: a console over real parts (approval desk, file trail)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from starlette.testclient import TestClient

from gateway.approvals import Approval, ApprovalDesk, ApprovalKey, AuditEvents, MemoryApprovalStore
from gateway.audit import FsyncPolicy, JsonlFileSink, Masker
from gateway.console import ConsoleApp, SessionStore, TrailReader, console_roles
from gateway.service import Authenticator
from gateway.service._config import ApiKey, AuthConfig
from gateway.testing import FakeClock
from tests.server.conftest import opa_binary  # the browser tests' policy compiler

TREASURER: Final = "test-key-tina"
AUDITOR: Final = "test-key-anna"
CLERK: Final = "test-key-clerk"
STRANGER: Final = "test-key-theo"
#: An auditor of the console (by role) whose context also holds the approvals' role.
TESS: Final = "test-key-tess"
KEYS: Final = {
    TREASURER: {"subject": "tina", "roles": ["treasurer"]},
    AUDITOR: {"subject": "anna", "roles": ["auditor"]},
    CLERK: {"subject": "carl", "roles": ["clerk"]},
    STRANGER: {"subject": "theo", "roles": []},
    TESS: {"subject": "tess", "roles": ["treasurer", "compliance"]},
}
#: A card number the trail masks: no page may ever show it.
SENTINEL: Final = "4111111111111111"
TRAIL_KEY: Final = b"console-test-trail-key-0123456789"
ORIGIN: Final = "https://testserver"
WALL_START: Final = 1_780_000_000.0


def authenticator() -> Authenticator:
    keys = tuple(
        ApiKey(sha256=hashlib.sha256(k.encode()).hexdigest(), context=c) for k, c in KEYS.items()
    )
    return Authenticator(AuthConfig(api_keys=keys))


@dataclass
class Console:
    app: ConsoleApp
    store: MemoryApprovalStore
    sink: JsonlFileSink
    trail_path: Path
    wall: FakeClock
    sessions: FakeClock
    masker: Masker

    def client(self, *, base_url: str = ORIGIN, **kwargs: Any) -> TestClient:
        return TestClient(self.app, base_url=base_url, follow_redirects=False, **kwargs)

    def pending(
        self, approval_id: str = "apr_one", *, subject: str = "carl", tenant: str | None = None
    ) -> Approval:
        now = self.wall()
        approval = Approval(
            id=approval_id,
            key=ApprovalKey("pay", "d" * 64, "c" * 64),
            revision="rev-1",
            role="treasurer",
            subject=subject,
            tenant=tenant,
            message="a treasurer must approve every payment",
            created_at=now - 120,
            expires_at=now + 780,
        )
        decision_id = "dec_" + approval_id
        record = {
            "type": "decision",
            "time": "2026-06-01T10:00:00+00:00",
            "decision_id": decision_id,
            "call_id": "c1",
            "tool": "pay",
            "arguments_digest": "d" * 64,
            "arguments": self.masker.mask(
                {"to_account": "ACME-7", "amount": 1200, "card_number": SENTINEL}, []
            ),
            "context": {"subject": subject, "roles": ["clerk"]},
            "result": "allow",
            "code": None,
            "message": "ok",
            "reasons": ["payments need a treasurer"],
            "revision": "rev-1",
        }
        self.sink.submit(record).result(5)
        self.sink.submit(
            {
                "type": "approval",
                "time": "2026-06-01T10:00:00+00:00",
                "decision_id": decision_id,
                "event": "requested",
                "approval_id": approval_id,
                "tool": "pay",
            }
        ).result(5)
        self.store.add(approval)
        return approval

    def records(self) -> list[dict[str, Any]]:
        import json

        return [json.loads(line) for line in self.trail_path.read_text().splitlines() if line]


@pytest.fixture
def console(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Console]:
    roles = getattr(request, "param", None) or console_roles(
        approver_roles=["treasurer"], auditors=["anna"]
    )
    wall = FakeClock(WALL_START)
    session_clock = FakeClock()
    trail_path = tmp_path / "audit.jsonl"
    sink = JsonlFileSink(trail_path, fsync=FsyncPolicy.NONE, key=TRAIL_KEY)
    events = AuditEvents(sink, clock=wall)
    store = MemoryApprovalStore()
    masker = Masker()
    app = ConsoleApp(
        authenticator=authenticator(),
        roles=roles,
        sessions=SessionStore(
            idle_timeout_s=900, max_age_s=3600, max_sessions=10, clock=session_clock
        ),
        desk=ApprovalDesk(store, events=events, clock=wall),
        store=store,
        trail=TrailReader(trail_path, key=TRAIL_KEY, masker=masker, limit=1000),
        wall=wall,
    )
    try:
        yield Console(app, store, sink, trail_path, wall, session_clock, masker)
    finally:
        sink.close()


_CSRF: Final = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, "the page has no CSRF token"
    return found.group(1)


def sign_in(client: TestClient, credential: str, *, origin: str = ORIGIN) -> Any:
    page = client.get("/console/login")
    return client.post(
        "/console/login",
        data={"credential": credential, "csrf": csrf_of(page.text)},
        headers={"Origin": origin},
    )


__all__ = ["opa_binary"]
