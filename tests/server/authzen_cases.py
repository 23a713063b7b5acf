"""The AuthZEN Authorization API 1.0 certification scenario's requests, as it states them.

Transcribed from the OpenID AuthZEN working group's "Authorization API 1.0 - Certification
Scenario" (certification/authorization-api-1_0-scenario.md in openid/authzen), sections
C.2 (Basic: Access Evaluation) and C.3 (Batch: Access Evaluations), with the status and the
decisions it expects. ``decision`` / ``decisions`` of ``None`` mean the scenario checks
only the response structure there (the decision is the implementer's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True)
class Case:
    """One request of the scenario and what it expects."""

    id: str
    path: str
    body: Any
    status: int = 200
    decision: bool | None = None
    decisions: tuple[bool | None, ...] | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


EVALUATION: Final = "/access/v1/evaluation"
EVALUATIONS: Final = "/access/v1/evaluations"

ALICE: Final = {"type": "user", "id": "alice"}
BOB: Final = {"type": "user", "id": "bob"}
BOB_ADMIN: Final = {"type": "user", "id": "bob", "properties": {"role": "admin"}}
READ: Final = {"name": "read"}
WRITE: Final = {"name": "write"}
RECORD_1: Final = {"type": "record", "id": "record-1"}
RECORD_2: Final = {"type": "record", "id": "record-2"}
ARCHIVED_2: Final = {"type": "record", "id": "record-2", "properties": {"status": "archived"}}

BASIC: Final = (
    Case(
        "C.2.2.1",
        EVALUATION,
        {"subject": ALICE, "action": READ, "resource": RECORD_1},
        decision=True,
    ),
    Case(
        "C.2.2.2",
        EVALUATION,
        {"subject": BOB, "action": WRITE, "resource": RECORD_1},
        decision=False,
    ),
    Case(
        "C.2.2.3",
        EVALUATION,
        {
            "subject": ALICE,
            "action": READ,
            "resource": RECORD_1,
            "context": {"time": "2025-06-27T18:03-07:00", "ip": "192.168.1.1"},
        },
        decision=True,
    ),
    Case(
        "C.2.2.4",
        EVALUATION,
        {"subject": ALICE, "action": WRITE, "resource": ARCHIVED_2},
        decision=False,
    ),
    Case(
        "C.2.2.5",
        EVALUATION,
        {"subject": BOB_ADMIN, "action": WRITE, "resource": ARCHIVED_2},
        decision=True,
    ),
    Case(
        "C.2.2.6",
        EVALUATION,
        {
            "subject": ALICE,
            "action": {"name": "delete", "properties": {"soft": True}},
            "resource": RECORD_1,
        },
        decision=True,
    ),
    Case(
        "C.2.2.7",
        EVALUATION,
        {
            "subject": ALICE,
            "action": {"name": "delete", "properties": {"soft": False}},
            "resource": RECORD_1,
        },
        decision=False,
    ),
    Case(
        "C.2.2.8",
        EVALUATION,
        {
            "subject": {
                "type": "user",
                "id": "alice",
                "properties": {"department": "Sales", "role": "manager"},
            },
            "action": {"name": "read", "properties": {"method": "GET"}},
            "resource": {
                "type": "record",
                "id": "record-1",
                "properties": {"status": "active", "owner": "bob"},
            },
        },
        decision=True,
    ),
    Case(
        "C.2.2.9",
        EVALUATION,
        {
            "subject": ALICE,
            "action": READ,
            "resource": RECORD_1,
            "foo": "bar",
            "futureField": {"nested": True},
        },
        decision=True,
    ),
    # C.2.4.1 missing required fields
    Case("C.2.4.1 no subject", EVALUATION, {"action": READ, "resource": RECORD_1}, status=400),
    Case("C.2.4.1 no action", EVALUATION, {"subject": ALICE, "resource": RECORD_1}, status=400),
    Case("C.2.4.1 no resource", EVALUATION, {"subject": ALICE, "action": READ}, status=400),
    # C.2.4.2 missing required sub-fields
    Case(
        "C.2.4.2 subject.type",
        EVALUATION,
        {"subject": {"id": "alice"}, "action": READ, "resource": RECORD_1},
        status=400,
    ),
    Case(
        "C.2.4.2 subject.id",
        EVALUATION,
        {"subject": {"type": "user"}, "action": READ, "resource": RECORD_1},
        status=400,
    ),
    Case(
        "C.2.4.2 action.name",
        EVALUATION,
        {"subject": ALICE, "action": {}, "resource": RECORD_1},
        status=400,
    ),
    Case(
        "C.2.4.2 resource.type",
        EVALUATION,
        {"subject": ALICE, "action": READ, "resource": {"id": "record-1"}},
        status=400,
    ),
    Case(
        "C.2.4.2 resource.id",
        EVALUATION,
        {"subject": ALICE, "action": READ, "resource": {"type": "record"}},
        status=400,
    ),
    # C.2.4.3 - C.2.4.6
    Case(
        "C.2.4.3 content type",
        EVALUATION,
        {"subject": ALICE, "action": READ, "resource": RECORD_1},
        status=400,
        content_type="text/plain",
    ),
    Case(
        "C.2.4.4 malformed JSON",
        EVALUATION,
        b'{"subject": {"type": "user", "id": "alice"',
        status=400,
    ),
    Case("C.2.4.5 empty body", EVALUATION, b"", status=400),
    Case(
        "C.2.4.6 subject a string",
        EVALUATION,
        {"subject": "alice", "action": READ, "resource": RECORD_1},
        status=400,
    ),
    Case(
        "C.2.4.6 action.name a number",
        EVALUATION,
        {"subject": ALICE, "action": {"name": 123}, "resource": RECORD_1},
        status=400,
    ),
)

BATCH: Final = (
    Case(
        "C.3.2.1",
        EVALUATIONS,
        {
            "subject": ALICE,
            "action": READ,
            "evaluations": [{"resource": RECORD_1}, {"resource": RECORD_2}],
        },
        decisions=(None, None),
    ),
    Case(
        "C.3.2.2",
        EVALUATIONS,
        {
            "subject": BOB,
            "resource": RECORD_1,
            "evaluations": [{"action": READ}, {"action": WRITE}],
        },
        decisions=(True, False),
    ),
    Case(
        "C.3.2.3",
        EVALUATIONS,
        {
            "subject": ALICE,
            "action": WRITE,
            "evaluations": [
                {
                    "resource": {
                        "type": "record",
                        "id": "record-1",
                        "properties": {"status": "active"},
                    }
                },
                {"resource": ARCHIVED_2},
            ],
        },
        decisions=(True, False),
    ),
    Case(
        "C.3.2.4",
        EVALUATIONS,
        {
            "action": WRITE,
            "resource": ARCHIVED_2,
            "evaluations": [{"subject": ALICE}, {"subject": BOB_ADMIN}],
        },
        decisions=(False, True),
    ),
    Case(
        "C.3.2.5",
        EVALUATIONS,
        {
            "evaluations": [
                {"subject": ALICE, "action": READ, "resource": RECORD_1},
                {"subject": BOB, "action": WRITE, "resource": RECORD_1},
            ]
        },
        decisions=(True, False),
    ),
    Case(
        "C.3.2.6",
        EVALUATIONS,
        {
            "subject": ALICE,
            "action": READ,
            "context": {"time": "2025-06-27T18:03-07:00"},
            "evaluations": [
                {"resource": RECORD_1},
                {
                    "resource": RECORD_2,
                    "context": {"time": "2025-06-27T19:00-07:00", "source": "batch-override"},
                },
            ],
        },
        decisions=(None, None),
    ),
    Case(
        "C.3.2.7",
        EVALUATIONS,
        {
            "subject": ALICE,
            "action": WRITE,
            "resource": {"type": "record", "id": "record-1", "properties": {"status": "active"}},
            "evaluations": [{}, {"resource": ARCHIVED_2}],
        },
        decisions=(True, False),
    ),
    Case(
        "C.3.4.1",
        EVALUATIONS,
        {
            "subject": ALICE,
            "action": READ,
            "options": {"evaluations_semantic": "execute_all"},
            "evaluations": [{"resource": RECORD_1}, {}],
        },
        decisions=(True, False),
    ),
)
