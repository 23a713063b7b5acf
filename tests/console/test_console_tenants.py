"""The console offers the decision on an approval only to an approver of the asker's tenant."""

from __future__ import annotations

import pytest

from tests.console.conftest import ORIGIN, TREASURER, Console, csrf_of, sign_in


@pytest.mark.parametrize(
    ("tenant", "offered", "status", "after"),
    [
        pytest.param("globex", False, 404, "pending", id="another-tenant"),
        pytest.param(None, True, 303, "approved", id="same-tenant"),
    ],
)
def test_the_console_offers_and_takes_a_decision_only_within_the_askers_tenant(
    console: Console, tenant: str | None, offered: bool, status: int, after: str
) -> None:
    # The console's approvers have no tenant: an approval asked without one is theirs.
    console.pending(tenant=tenant)
    client = console.client()
    sign_in(client, TREASURER)

    page = client.get("/console/approvals/apr_one")
    response = client.post(
        "/console/approvals/apr_one",
        data={"action": "approve", "comment": "looks fine", "csrf": csrf_of(page.text)},
        headers={"Origin": ORIGIN},
    )

    assert page.status_code == 200
    assert ('name="action"' in page.text) is offered
    assert response.status_code == status
    assert console.store.get("apr_one").status == after  # type: ignore[union-attr]
    approved = [r for r in console.records() if r.get("event") == "approved"]
    assert len(approved) == (1 if offered else 0)
