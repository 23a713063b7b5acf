"""A credential's own ``approval`` member never stands for a person's approval.

The shipped policy reads ``input.context.approval`` as what the approval gate presents once
a person approved the call. The gate drops a caller's own member before the policy; without
``[approvals]`` nothing did, so a token or API key whose context carried one (a custom claim
an identity provider lets users set, say) ran a payment that needs a treasurer's approval
(found by a security review).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from gateway.server import Service, build_service
from gateway.service import parse_config
from tests.server.conftest import REPO_ROOT, key, key_digest, served_client, shipped_service_config


def _decision_records(service: Service) -> list[dict[str, object]]:
    path = service.config.audit.path
    assert path is not None
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if '"type":"decision"' in line]


FORGED: Final = {
    "subject": "mallory",
    "roles": ["treasurer"],
    "tenant": "acme",
    # What the approval gate presents once a person approved: here, the credential's own.
    "approval": {"id": "x", "approved_by": "someone", "approver_roles": ["treasurer"]},
}
MALLORY: Final = "test-key-mallory"
BIG_PAYMENT: Final = {
    "from_account": "acct-acme-001",
    "to_account": "acct-acme-002",
    "amount": 5000,
}


async def test_without_approvals_a_credentials_approval_member_never_reaches_the_policy(
    tmp_path: Path,
) -> None:
    config = shipped_service_config(tmp_path)
    config["auth"]["api_keys"].append({"sha256": key_digest(MALLORY), "context": FORGED})
    service = build_service(parse_config(config, base=REPO_ROOT))
    async with served_client(service, key(MALLORY)) as client:
        paid = await client.post(
            "/v1/calls", json={"id": "p1", "name": "pay", "arguments": BIG_PAYMENT}
        )
    (record,) = _decision_records(service)

    assert paid.status_code == 403, paid.text
    assert paid.json()["code"] == "obligation_unfulfilled"
    context = record["context"]
    assert isinstance(context, dict)
    assert "approval" not in context
    assert context["subject"] == "mallory"
