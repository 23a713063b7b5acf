"""The console offers the decision on an approval only to an approver of the asker's tenant."""

from __future__ import annotations

from tests.console.conftest import ORIGIN, TREASURER, Console, csrf_of, sign_in


def test_the_console_offers_no_decision_on_another_tenants_approval(console: Console) -> None:
    console.pending(tenant="globex")
    client = console.client()
    sign_in(client, TREASURER)

    page = client.get("/console/approvals/apr_one")
    assert page.status_code == 200
    assert 'name="action"' not in page.text
    response = client.post(
        "/console/approvals/apr_one",
        data={"action": "approve", "comment": "looks fine", "csrf": csrf_of(page.text)},
        headers={"Origin": ORIGIN},
    )
    assert response.status_code == 404
    assert console.store.get("apr_one").status == "pending"  # type: ignore[union-attr]
    assert not [r for r in console.records() if r.get("event") == "approved"]


def test_the_console_still_offers_the_decision_on_its_own_tenants_approval(
    console: Console,
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)

    assert 'name="action"' in client.get("/console/approvals/apr_one").text
    page = client.get("/console/approvals/apr_one")
    response = client.post(
        "/console/approvals/apr_one",
        data={"action": "approve", "comment": "looks fine", "csrf": csrf_of(page.text)},
        headers={"Origin": ORIGIN},
    )
    assert response.status_code == 303
    assert console.store.get("apr_one").status == "approved"  # type: ignore[union-attr]
