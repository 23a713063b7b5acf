"""The console in a real browser: Debian's Chromium driven by playwright-core, one launch.

A live gateway on 127.0.0.1 (embedded engine, keyed trail, file approvals, console on).
The clerk's agent asks for two payments, which wait for approval; in the browser, an
unauthenticated visitor, an auditor and a treasurer use the console. Then the agent retries.
Fails, never skips, when Chromium or playwright-core cannot be provisioned.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.console import SECURITY_HEADERS
from tests.console import console_tools
from tests.console.browser import (
    AUDITOR,
    SENTINEL,
    TREASURER,
    Live,
    run_plan,
    sign_in_steps,
    start_live,
)


@pytest.fixture(scope="module")
def seen(opa_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("console-browser")
    live = start_live(folder, opa_binary)
    try:
        console_tools.RUNS.clear()
        first, second = live.pay("pay-approve"), live.pay("pay-reject")
        assert first.status_code == 202, first.text
        assert second.status_code == 202, second.text
        assert live.lookup("closed").status_code == 403
        approve_id, reject_id = first.json()["approval_id"], second.json()["approval_id"]
        steps: list[dict[str, Any]] = [
            # Nobody signed in: every view leads to the login form.
            {"op": "context"},
            {"op": "goto", "path": "/console/approvals", "name": "anonymous approvals"},
            {"op": "goto", "path": f"/console/approvals/{approve_id}", "name": "anonymous one"},
            {"op": "goto", "path": "/console/decisions", "name": "anonymous decisions"},
            {
                "op": "post",
                "path": f"/console/approvals/{approve_id}",
                "form": {"action": "approve", "comment": "x"},
                "headers": {"Origin": live.url},
                "name": "anonymous post",
            },
            # The auditor reads; the page offers no control, and a forged POST is refused.
            *sign_in_steps(AUDITOR),
            {"op": "goto", "path": "/console/approvals", "name": "auditor approvals"},
            {"op": "goto", "path": f"/console/approvals/{approve_id}", "name": "auditor one"},
            {"op": "count", "selector": "button[name=action]", "name": "auditor buttons"},
            {
                "op": "post",
                "path": f"/console/approvals/{approve_id}",
                "form": {"action": "approve", "comment": "forged"},
                "withToken": True,
                "headers": {"Origin": live.url},
                "name": "auditor forged post",
            },
            {"op": "goto", "path": "/console/decisions", "name": "auditor decisions"},
            {"op": "goto", "path": "/console/replay", "name": "auditor replay"},
            # The treasurer: keyboard first (skip link), then approve one and reject the other.
            *sign_in_steps(TREASURER),
            {"op": "goto", "path": f"/console/approvals/{approve_id}", "name": "treasurer one"},
            {"op": "press", "key": "Tab", "name": "first tab"},
            {
                "op": "post",
                "path": f"/console/approvals/{approve_id}",
                "form": {"action": "approve", "comment": "no token"},
                "headers": {"Origin": live.url},
                "name": "post without token",
            },
            {
                "op": "post",
                "path": f"/console/approvals/{approve_id}",
                "form": {"action": "approve", "comment": "other origin"},
                "withToken": True,
                "headers": {"Origin": "http://evil.example"},
                "name": "post from another origin",
            },
            {"op": "fill", "selector": "#comment", "value": "invoice 2231 matches the order"},
            {"op": "click", "selector": "button[value=approve]", "name": "approved"},
            {"op": "goto", "path": f"/console/approvals/{reject_id}", "name": "treasurer two"},
            {"op": "fill", "selector": "#comment", "value": "no such supplier"},
            {"op": "click", "selector": "button[value=reject]", "name": "rejected"},
            {"op": "goto", "path": "/console/decisions?tool=pay", "name": "treasurer decisions"},
        ]
        result = run_plan(live.url, steps)
        result["by_name"] = {r["step"]: r for r in result["results"]}
        result["live"] = live
        result["ids"] = (approve_id, reject_id)
        result["retries"] = [
            live.pay("pay-approve"),
            live.pay("pay-approve"),
            live.pay("pay-reject"),
        ]
        result["runs"] = list(console_tools.RUNS)
        result["trail"] = (folder / "audit.jsonl").read_text(encoding="utf-8")
        yield result
    finally:
        live.stop()


def test_an_unauthenticated_visitor_sees_nothing_but_the_login(seen: dict[str, Any]) -> None:
    live: Live = seen["live"]
    for name in ("anonymous approvals", "anonymous one", "anonymous decisions"):
        step = seen["by_name"][name]
        assert step["url"] == live.url + "/console/login"
        assert 'id="credential"' in step["html"]
        assert "pay" not in step["html"].replace("password", "")
    assert seen["by_name"]["anonymous post"]["status"] == 303  # to the login; nothing decided


def test_every_page_carries_the_content_security_policy(seen: dict[str, Any]) -> None:
    gotos = [r for r in seen["results"] if "headers" in r]
    assert gotos
    for step in gotos:
        csp = step["headers"]["content-security-policy"]
        assert csp == SECURITY_HEADERS["Content-Security-Policy"]
        assert step["headers"]["x-content-type-options"] == "nosniff"
        assert step["headers"]["cache-control"] == "no-store"


def test_the_browser_fetches_nothing_outside_the_gateway(seen: dict[str, Any]) -> None:
    assert seen["external"] == []


def test_an_auditor_has_no_control_and_a_forged_approval_is_refused(seen: dict[str, Any]) -> None:
    one = seen["by_name"]["auditor one"]
    assert "Auditors read approvals" in one["html"]
    assert seen["by_name"]["auditor buttons"]["count"] == 0
    assert seen["by_name"]["auditor forged post"]["status"] == 403
    assert "pay" in seen["by_name"]["auditor approvals"]["html"]


def test_a_post_without_the_token_or_from_another_origin_is_refused(seen: dict[str, Any]) -> None:
    assert seen["by_name"]["post without token"]["status"] == 403
    assert seen["by_name"]["post from another origin"]["status"] == 403


def test_the_skip_link_is_the_first_thing_the_keyboard_reaches(seen: dict[str, Any]) -> None:
    assert seen["by_name"]["first tab"]["focused"] == "Skip to content"


def test_an_approved_payment_runs_exactly_once_and_a_rejected_one_never(
    seen: dict[str, Any],
) -> None:
    approved = seen["by_name"]["approved"]
    assert "was approved" in approved["html"]
    assert "was rejected" in seen["by_name"]["rejected"]["html"]
    after_approval, again, after_rejection = seen["retries"]
    assert after_approval.status_code == 200
    assert after_approval.json()["status"] == "ok"
    assert again.status_code == 202  # used once: the same call needs a new approval
    assert after_rejection.status_code == 202
    assert seen["runs"] == ["pay-approve"]


def test_the_decisions_show_in_the_trail_with_the_approvers_identity_and_comment(
    seen: dict[str, Any],
) -> None:
    import json

    records = [json.loads(line) for line in seen["trail"].splitlines()]
    approve_id, reject_id = seen["ids"]
    approved = [r for r in records if r.get("event") == "approved"]
    rejected = [r for r in records if r.get("event") == "rejected"]
    assert [(r["approval_id"], r["decided_by"], r["comment"]) for r in approved] == [
        (approve_id, "tina", "invoice 2231 matches the order")
    ]
    assert [(r["approval_id"], r["decided_by"]) for r in rejected] == [(reject_id, "tina")]
    decisions = seen["by_name"]["treasurer decisions"]["html"]
    assert "verified" in decisions


def test_a_masked_value_never_appears_in_any_page(seen: dict[str, Any]) -> None:
    pages = [r["html"] for r in seen["results"] if "html" in r]
    assert len(pages) > 10
    assert all(SENTINEL not in page for page in pages)
    assert SENTINEL not in seen["trail"]
    assert any("masked:" in page for page in pages)
