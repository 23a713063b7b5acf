"""The operator console through Starlette's TestClient: sign-in, sessions, CSRF, roles, views."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.approvals import APPROVED, PENDING, REJECTED
from gateway.console import SECURITY_HEADERS, console_roles
from tests.console.conftest import (
    AUDITOR,
    CLERK,
    ORIGIN,
    SENTINEL,
    STRANGER,
    TESS,
    TREASURER,
    Console,
    csrf_of,
    sign_in,
)

VIEWS = [
    "/console/",
    "/console/approvals",
    "/console/approvals/apr_one",
    "/console/decisions",
    "/console/decisions/dec_apr_one",
    "/console/replay",
]


def _decide(client: Any, approval_id: str, action: str, comment: str, **headers: str) -> Any:
    page = client.get(f"/console/approvals/{approval_id}")
    return client.post(
        f"/console/approvals/{approval_id}",
        data={"action": action, "comment": comment, "csrf": csrf_of(page.text)},
        headers={"Origin": ORIGIN, **headers},
    )


# -- who gets in ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", VIEWS)
def test_an_unauthenticated_visitor_is_sent_to_the_login_and_sees_no_data(
    console: Console, path: str
) -> None:
    console.pending()
    response = console.client().get(path)

    assert response.status_code == 303
    assert response.headers["location"] == "/console/login"
    assert "pay" not in response.text
    assert "carl" not in response.text


def test_every_console_response_carries_the_strict_security_headers(console: Console) -> None:
    client = console.client()
    for response in (
        client.get("/console/login"),
        client.get("/console/static/console.css"),
        client.get("/console/approvals"),
        client.get("/console/no-such-page"),
        client.post("/console/login", data={}),
    ):
        for name, value in SECURITY_HEADERS.items():
            assert response.headers[name] == value
    csp = SECURITY_HEADERS["Content-Security-Policy"]
    assert "default-src 'none'" in csp
    assert "script-src" not in csp
    assert "frame-ancestors 'none'" in csp
    assert "base-uri 'none'" in csp


def test_over_https_the_session_cookie_is_host_prefixed_secure_httponly_and_strict(
    console: Console,
) -> None:
    response = sign_in(console.client(), TREASURER)

    assert response.status_code == 303
    cookie = next(
        v for k, v in response.headers.multi_items() if k == "set-cookie" and "console" in v
    )
    assert cookie.startswith("__Host-gateway-console=")
    lowered = cookie.lower()
    assert "secure" in lowered
    assert "httponly" in lowered
    assert "samesite=strict" in lowered
    assert "path=/" in lowered
    assert "domain" not in lowered


def test_on_loopback_http_the_cookie_is_httponly_and_strict_without_secure(
    console: Console,
) -> None:
    client = console.client(base_url="http://127.0.0.1", client=("127.0.0.1", 50000))
    response = sign_in(client, TREASURER, origin="http://127.0.0.1")

    cookie = next(
        v for k, v in response.headers.multi_items() if k == "set-cookie" and "console" in v
    )
    assert cookie.startswith("gateway-console=")
    assert "secure" not in cookie.lower()
    assert "httponly" in cookie.lower()
    assert client.get("/console/approvals").status_code == 200


def test_plain_http_beyond_loopback_gets_a_secure_cookie_that_the_browser_never_returns(
    console: Console,
) -> None:
    client = console.client(base_url="http://gateway.example", client=("203.0.113.9", 50000))
    response = sign_in(client, TREASURER, origin="http://gateway.example")

    assert "secure" in response.headers["set-cookie"].lower()
    assert client.get("/console/approvals").status_code == 303  # fails closed


@pytest.mark.parametrize("credential", ["", "wrong-key", "x" * 9000, "a.b.c", "Bearer x"])
def test_a_credential_that_does_not_authenticate_makes_no_session(
    console: Console, credential: str
) -> None:
    client = console.client()
    response = sign_in(client, credential)

    assert response.status_code == 401
    assert "Sign-in failed" in response.text
    assert client.get("/console/approvals").status_code == 303


@pytest.mark.parametrize("credential", [CLERK, STRANGER])
def test_an_identity_that_is_neither_approver_nor_auditor_is_refused(
    console: Console, credential: str
) -> None:
    client = console.client()
    response = sign_in(client, credential)

    assert response.status_code == 403
    assert client.get("/console/decisions").status_code == 303


def test_the_credential_never_appears_in_a_url_a_header_or_a_page(console: Console) -> None:
    client = console.client()
    response = sign_in(client, TREASURER)
    pages = [client.get(path) for path in VIEWS]

    assert TREASURER not in response.headers.get("location", "")
    assert all(TREASURER not in value for _, value in response.headers.multi_items())
    assert all(TREASURER not in page.text for page in pages)
    login = console.client().get("/console/login").text
    assert 'method="post"' in login
    assert 'type="password"' in login


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
        {"Origin": "http://testserver"},
        {"Origin": ORIGIN, "Sec-Fetch-Site": "cross-site"},
    ],
)
def test_a_sign_in_from_another_origin_or_without_one_is_refused(
    console: Console, headers: dict[str, str]
) -> None:
    client = console.client()
    page = client.get("/console/login")
    response = client.post(
        "/console/login",
        data={"credential": TREASURER, "csrf": csrf_of(page.text)},
        headers=headers,
    )

    assert response.status_code == 403
    assert client.get("/console/approvals").status_code == 303


@pytest.mark.parametrize("token", [None, "", "forged", "0" * 64])
def test_a_sign_in_without_its_login_token_is_refused(console: Console, token: str | None) -> None:
    client = console.client()
    client.get("/console/login")
    data = {"credential": TREASURER} | ({} if token is None else {"csrf": token})
    response = client.post("/console/login", data=data, headers={"Origin": ORIGIN})

    assert response.status_code == 403
    assert client.get("/console/approvals").status_code == 303


# -- approving --------------------------------------------------------------------------------


def test_an_approver_approves_with_a_comment_and_the_trail_records_who_and_why(
    console: Console,
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)

    response = _decide(client, "apr_one", "approve", "  invoice 2231 checked  ")

    assert response.status_code == 303
    assert response.headers["location"] == "/console/approvals?done=approved"
    assert console.store.get("apr_one").status == APPROVED  # type: ignore[union-attr]
    assert console.store.get("apr_one").decided_by == "tina"  # type: ignore[union-attr]
    event = [r for r in console.records() if r.get("event") == "approved"]
    assert len(event) == 1
    assert event[0]["decided_by"] == "tina"
    assert event[0]["comment"] == "invoice 2231 checked"
    assert "was approved" in client.get(response.headers["location"]).text


def test_an_approver_rejects_and_the_approval_can_never_be_used(console: Console) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)

    _decide(client, "apr_one", "reject", "not ours")

    assert console.store.get("apr_one").status == REJECTED  # type: ignore[union-attr]
    assert console.store.claim(console.store.get("apr_one").key, console.wall()) is None  # type: ignore[union-attr]
    assert "Approve</button>" not in client.get("/console/approvals/apr_one").text


@pytest.mark.parametrize("comment", ["", "   ", "x" * 501, "bad\x00byte", "esc\x1b[31m"])
def test_a_decision_without_a_proper_comment_decides_nothing(
    console: Console, comment: str
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)

    response = _decide(client, "apr_one", "approve", comment)

    assert response.status_code == 400
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]
    assert not [r for r in console.records() if r.get("event") == "approved"]


@pytest.mark.parametrize("action", ["", "approve ", "APPROVE", "delete"])
def test_an_unknown_action_decides_nothing(console: Console, action: str) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)

    response = _decide(client, "apr_one", action, "fine")

    assert response.status_code == 400
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]


def test_an_auditor_sees_pending_approvals_without_any_decision_control(
    console: Console,
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, AUDITOR)

    listing = client.get("/console/approvals")
    detail = client.get("/console/approvals/apr_one")

    assert listing.status_code == 200
    assert "pay" in listing.text
    assert "carl" in listing.text
    assert detail.status_code == 200
    for page in (listing.text, detail.text):
        assert 'name="action"' not in page
        assert "Approve</button>" not in page
        assert 'name="comment"' not in page


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_an_auditors_forged_decision_is_refused_and_decides_nothing(
    console: Console, action: str
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, AUDITOR)
    token = csrf_of(client.get("/console/approvals").text)  # the sign-out form's token

    response = client.post(
        "/console/approvals/apr_one",
        data={"action": action, "comment": "forged", "csrf": token},
        headers={"Origin": ORIGIN},
    )

    assert response.status_code == 403
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]
    assert not [r for r in console.records() if r.get("event") in ("approved", "rejected")]


@pytest.mark.parametrize(
    "console", [console_roles(approvers=["tina"], auditor_roles=["compliance"])], indirect=True
)
def test_a_console_auditor_who_holds_the_approvals_role_still_cannot_decide(
    console: Console,
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TESS)
    page = client.get("/console/approvals/apr_one").text
    assert 'name="action"' not in page

    response = client.post(
        "/console/approvals/apr_one",
        data={"action": "approve", "comment": "forged", "csrf": csrf_of(page)},
        headers={"Origin": ORIGIN},
    )

    assert response.status_code == 403
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]


def test_an_approver_never_decides_their_own_call(console: Console) -> None:
    console.pending(subject="tina")
    client = console.client()
    sign_in(client, TREASURER)

    assert 'name="action"' not in client.get("/console/approvals/apr_one").text
    token = csrf_of(client.get("/console/approvals").text)
    response = client.post(
        "/console/approvals/apr_one",
        data={"action": "approve", "comment": "me", "csrf": token},
        headers={"Origin": ORIGIN},
    )

    assert response.status_code == 403
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]


def test_an_expired_approval_cannot_be_approved(console: Console) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)
    page = client.get("/console/approvals/apr_one")
    console.wall.advance(800)

    response = client.post(
        "/console/approvals/apr_one",
        data={"action": "approve", "comment": "late", "csrf": csrf_of(page.text)},
        headers={"Origin": ORIGIN},
    )

    assert response.status_code == 409
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
        {"Origin": ORIGIN, "Sec-Fetch-Site": "same-site"},
        {"Origin": ORIGIN + ":443"},
    ],
)
def test_a_decision_from_another_origin_or_without_one_is_refused(
    console: Console, headers: dict[str, str]
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)
    token = csrf_of(client.get("/console/approvals/apr_one").text)

    response = client.post(
        "/console/approvals/apr_one",
        data={"action": "approve", "comment": "ok", "csrf": token},
        headers=headers,
    )

    assert response.status_code == 403
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]


@pytest.mark.parametrize("token", [None, "", "forged", "another-session"])
def test_a_decision_without_this_sessions_csrf_token_is_refused(
    console: Console, token: str | None
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)
    if token == "another-session":  # noqa: S105 - a test case name
        other = console.client()
        sign_in(other, TREASURER)
        token = csrf_of(other.get("/console/approvals").text)
    data = {"action": "approve", "comment": "ok"} | ({} if token is None else {"csrf": token})

    response = client.post("/console/approvals/apr_one", data=data, headers={"Origin": ORIGIN})

    assert response.status_code == 403
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("a=" + "x" * 20000, "application/x-www-form-urlencoded"),
        ('{"action": "approve"}', "application/json"),
        ("&".join(f"f{i}=1" for i in range(50)), "application/x-www-form-urlencoded"),
    ],
)
def test_a_body_that_is_too_large_or_not_a_form_is_refused(
    console: Console, body: str, content_type: str
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)

    response = client.post(
        "/console/approvals/apr_one",
        content=body,
        headers={"Origin": ORIGIN, "Content-Type": content_type},
    )

    assert response.status_code == 400
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]


@pytest.mark.parametrize("declared", [b"\xb2", b"1\xb9", b"-1", b" 20"])
def test_a_content_length_that_is_no_ascii_numeral_decides_nothing(
    console: Console, declared: bytes
) -> None:
    # "²" (0xB2 read as Latin-1) passes str.isdigit and breaks int(): refused, not a crash.
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)
    page = client.get("/console/approvals/apr_one")
    body = f"action=approve&comment=ok&csrf={csrf_of(page.text)}".encode()

    headers = [
        (b"Origin", ORIGIN.encode()),
        (b"Content-Type", b"application/x-www-form-urlencoded"),
        (b"Content-Length", declared),
        (b"Cookie", "; ".join(f"{c.name}={c.value}" for c in client.cookies.jar).encode()),
    ]

    async def post() -> httpx.Response:
        # httpx's own ASGI transport hands the header bytes over as sent (the test client
        # re-encodes them, which would hide the byte under test).
        transport = httpx.ASGITransport(app=console.app)
        async with httpx.AsyncClient(transport=transport, base_url=str(client.base_url)) as raw:
            return await raw.post("/console/approvals/apr_one", content=body, headers=headers)

    response = asyncio.run(post())

    assert response.status_code == 400
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]


def test_a_failing_audit_trail_decides_nothing_and_the_page_says_nothing_of_why(
    console: Console,
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)
    page = client.get("/console/approvals/apr_one")
    console.sink.close()  # every later write fails

    response = client.post(
        "/console/approvals/apr_one",
        data={"action": "approve", "comment": "ok", "csrf": csrf_of(page.text)},
        headers={"Origin": ORIGIN},
    )

    assert response.status_code == 503
    assert "Traceback" not in response.text
    assert "closed" not in response.text.lower()
    assert console.store.get("apr_one").status == PENDING  # type: ignore[union-attr]


def test_an_unexpected_fault_is_answered_once_with_the_plain_503_page(console: Console) -> None:
    # A fault no handler expects (here the trail file became a folder) reaches Starlette's
    # error middleware, which answers and raises again: the request still gets one answer,
    # the console's own page, and nothing of the fault.
    client = console.client()
    sign_in(client, AUDITOR)
    console.sink.close()
    console.trail_path.unlink(missing_ok=True)
    console.trail_path.mkdir()

    response = client.get("/console/decisions")

    assert response.status_code == 503
    assert "The console cannot answer now." in response.text
    assert "Directory" not in response.text
    csp = SECURITY_HEADERS["Content-Security-Policy"]
    assert response.headers["content-security-policy"] == csp


# -- sessions ---------------------------------------------------------------------------------


def test_a_session_ends_after_its_idle_timeout(console: Console) -> None:
    client = console.client()
    sign_in(client, AUDITOR)
    console.sessions.advance(899)
    assert client.get("/console/decisions").status_code == 200
    console.sessions.advance(899)
    assert client.get("/console/decisions").status_code == 200
    console.sessions.advance(900)

    assert client.get("/console/decisions").status_code == 303


def test_a_session_ends_at_its_maximum_age_however_busy(console: Console) -> None:
    client = console.client()
    sign_in(client, AUDITOR)
    for _ in range(7):
        console.sessions.advance(500)
        assert client.get("/console/decisions").status_code == 200
    console.sessions.advance(500)

    assert client.get("/console/decisions").status_code == 303


def test_signing_out_ends_the_session_on_the_server(console: Console) -> None:
    client = console.client()
    sign_in(client, AUDITOR)
    cookie = dict(client.cookies)
    token = csrf_of(client.get("/console/decisions").text)

    response = client.post("/console/logout", data={"csrf": token}, headers={"Origin": ORIGIN})

    assert response.status_code == 303
    replay = console.client(cookies=cookie)
    assert replay.get("/console/decisions").status_code == 303


def test_the_oldest_session_ends_when_max_sessions_is_reached(console: Console) -> None:
    first = console.client()
    sign_in(first, AUDITOR)
    for _ in range(10):
        sign_in(console.client(), AUDITOR)

    assert first.get("/console/decisions").status_code == 303


def test_a_forged_session_cookie_is_no_session(console: Console) -> None:
    client = console.client(cookies={"__Host-gateway-console": "forged" * 5})

    assert client.get("/console/decisions").status_code == 303


# -- what the pages show ----------------------------------------------------------------------


def test_a_pending_approval_shows_tool_caller_masked_arguments_message_reasons_age_expiry(
    console: Console,
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, TREASURER)

    listing = client.get("/console/approvals").text
    detail = client.get("/console/approvals/apr_one").text

    assert "pay" in listing
    assert "carl" in listing
    assert "2 min" in listing
    assert "13 min" in listing
    assert "a treasurer must approve every payment" in detail
    assert "payments need a treasurer" in detail
    assert "ACME-7" in detail
    assert "masked:" in detail
    assert "rev-1" in detail


def test_a_masked_value_never_appears_in_any_page(console: Console) -> None:
    console.pending()
    # A record written under a narrower masking configuration: the console masks it again.
    console.sink.submit(
        {
            "type": "decision",
            "time": "2026-06-01T11:00:00+00:00",
            "decision_id": "dec_raw",
            "tool": "pay",
            "arguments": {"card_number": SENTINEL, "nested": {"password": SENTINEL}},
            "context": {"subject": "carl", "api_key": SENTINEL},
            "result": "deny",
            "code": "denied",
            "reasons": [],
            "revision": "rev-1",
        }
    ).result(5)
    client = console.client()
    sign_in(client, TREASURER)

    pages = [client.get(p).text for p in [*VIEWS, "/console/decisions/dec_raw"]]

    assert all(SENTINEL not in page for page in pages)
    assert "dec_raw" in pages[-1]


def test_the_decisions_table_filters_by_tool_caller_outcome_and_time(console: Console) -> None:
    for n, (tool, who, result, code, hour) in enumerate(
        [
            ("pay", "carl", "allow", None, 9),
            ("lookup", "carl", "deny", "denied", 10),
            ("lookup", "dora", "error", "engine_timeout", 11),
            ("pay", "dora", "allow", None, 12),
        ]
    ):
        console.sink.submit(
            {
                "type": "decision",
                "time": f"2026-06-01T{hour:02}:00:00+00:00",
                "decision_id": f"dec_{n}",
                "tool": tool,
                "context": {"subject": who},
                "result": result,
                "code": code,
                "revision": "rev-9",
            }
        ).result(5)
    client = console.client()
    sign_in(client, AUDITOR)

    def ids(query: str) -> set[str]:
        page = client.get("/console/decisions?" + query).text
        return {f"dec_{n}" for n in range(4) if f">dec_{n}<" in page}

    assert ids("") == {"dec_0", "dec_1", "dec_2", "dec_3"}
    assert ids("tool=pay") == {"dec_0", "dec_3"}
    assert ids("caller=dora") == {"dec_2", "dec_3"}
    assert ids("outcome=deny") == {"dec_1"}
    assert ids("outcome=engine_timeout") == {"dec_2"}
    assert ids("since=2026-06-01T10:30&until=2026-06-01T12:00") == {"dec_2", "dec_3"}
    assert ids("tool=lookup&caller=carl") == {"dec_1"}
    assert "<svg" in client.get("/console/decisions").text


def test_a_call_held_for_approval_reads_as_held_never_as_a_call_that_ran(console: Console) -> None:
    # The policy's answer was allow with an approval obligation; the call did not run. The
    # table shows what became of the call from its outcome record, beside the policy's answer.
    calls: list[tuple[str | None, str | None]] = [("pending", "approval_pending"), ("ok", "ok")]
    for n, (outcome, code) in enumerate([*calls, (None, None)]):
        console.sink.submit(
            {
                "type": "decision",
                "time": f"2026-06-01T1{n}:00:00+00:00",
                "decision_id": f"dec_{n}",
                "tool": "pay",
                "context": {"subject": "carl"},
                "result": "allow",
                "code": None,
                "revision": "rev-9",
            }
        ).result(5)
        if outcome is not None:
            console.sink.submit(
                {
                    "type": "outcome",
                    "time": f"2026-06-01T1{n}:00:01+00:00",
                    "decision_id": f"dec_{n}",
                    "tool": "pay",
                    "outcome": outcome,
                    "code": code,
                }
            ).result(5)
    client = console.client()
    sign_in(client, AUDITOR)

    def row(decision_id: str, query: str = "") -> str:
        page = client.get("/console/decisions?" + query).text
        start = page.index(f">{decision_id}<")
        return page[page.rindex("<tr>", 0, start) : page.index("</tr>", start)]

    assert "<td>approval_pending</td>" in row("dec_0")
    assert "<td>ok</td>" in row("dec_1")
    assert "(no outcome recorded)" in row("dec_2")
    held = client.get("/console/decisions?outcome=approval_pending").text
    assert ">dec_0<" in held
    assert ">dec_1<" not in held
    assert ">dec_2<" not in held


def _decisions_page_with(console: Console, decision_id: str) -> str:
    # The auditor's decisions page once a denied pay call with this decision id is recorded.
    console.sink.submit(
        {
            "type": "decision",
            "time": "2026-06-01T10:00:00+00:00",
            "decision_id": decision_id,
            "tool": "pay",
            "context": {"subject": "carl"},
            "result": "deny",
            "code": "denied",
            "revision": "rev-9",
        }
    ).result(5)
    client = console.client()
    sign_in(client, AUDITOR)
    return client.get("/console/decisions").text


def test_a_decision_id_in_a_link_is_one_path_segment_whatever_it_holds(console: Console) -> None:
    page = _decisions_page_with(console, "../approvals?x=1#top")

    assert 'href="/console/decisions/..%2Fapprovals%3Fx%3D1%23top"' in page
    assert 'href="/console/decisions/../' not in page


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    params=st.dictionaries(
        st.sampled_from(["tool", "caller", "outcome", "since", "until", "page", "other"]),
        st.one_of(
            st.text(max_size=300),
            st.text(max_size=40).map(lambda t: '"><x-injected ' + t),
            st.text(alphabet="0123456789\u00b2\u0663\u2460\uff10 -", max_size=8),  # numerals
        ),
        max_size=6,
    )
)
def test_any_filter_query_is_answered_200_or_400_and_never_echoed_unescaped(
    console: Console, params: dict[str, str]
) -> None:
    client = console.client()
    sign_in(client, AUDITOR)

    response = client.get("/console/decisions", params=params)

    assert response.status_code in (200, 400)
    assert "<x-injected" not in response.text


@pytest.mark.parametrize("page", ["\u00b2", "\u0663", "1\u00b9", "\uff12", "-1", "0", "999999"])
def test_a_page_number_that_is_no_ascii_numeral_shows_the_first_page(
    console: Console, page: str
) -> None:
    # "²" passes str.isdigit and breaks int(); "٣" is read as 3: neither is a page number.
    console.pending()
    client = console.client()
    sign_in(client, AUDITOR)

    response = client.get("/console/decisions", params={"page": page})

    assert response.status_code == 200
    assert ("dec_apr_one" in response.text) is (page != "999999")


@pytest.mark.parametrize(
    "query",
    ["since=yesterday", "until=2026-13-01", "tool=" + "x" * 201, "caller=a%00b", "outcome=%1b"],
)
def test_a_filter_that_is_not_understood_is_named_and_shows_no_rows(
    console: Console, query: str
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, AUDITOR)

    response = client.get("/console/decisions?" + query)

    assert response.status_code == 400
    assert "not understood" in response.text
    assert "dec_apr_one" not in response.text


def test_the_trail_status_reads_verified_then_broken_at_the_changed_record(
    console: Console,
) -> None:
    console.pending()
    client = console.client()
    sign_in(client, AUDITOR)
    assert "verified" in client.get("/console/decisions").text

    lines = console.trail_path.read_text().splitlines()
    record = json.loads(lines[0])
    record["tool"] = "lookup"
    lines[0] = json.dumps(record, sort_keys=True, separators=(",", ":"))
    console.trail_path.write_text("\n".join(lines) + "\n")

    page = client.get("/console/decisions").text
    assert "BROKEN" in page
    assert "broken at record 1" in page


def test_an_unkeyed_trail_reads_as_unkeyed(tmp_path: Path) -> None:
    from gateway.audit import JsonlFileSink, Masker
    from gateway.console import TrailReader

    sink = JsonlFileSink(tmp_path / "audit.jsonl", key=None)
    sink.submit({"type": "decision", "time": "2026-06-01T10:00:00+00:00"}).result(5)
    sink.close()

    status = TrailReader(tmp_path / "audit.jsonl", key=None, masker=Masker(), limit=10).status()

    assert status.state == "unkeyed"
    assert status.records == 1


def test_the_replay_view_counts_shadow_flips_by_tool_and_direction(console: Console) -> None:
    for n, (tool, change) in enumerate(
        [("pay", "allow-to-deny"), ("pay", "allow-to-deny"), ("lookup", "deny-to-allow")]
    ):
        console.sink.submit(
            {
                "type": "shadow",
                "time": "2026-06-01T10:00:00+00:00",
                "decision_id": f"dec_s{n}",
                "tool": tool,
                "change": change,
            }
        ).result(5)
    client = console.client()
    sign_in(client, AUDITOR)

    page = client.get("/console/replay").text

    assert "allow-to-deny" in page
    assert "deny-to-allow" in page
    assert "<code>pay</code></th><td>2</td><td>0</td>" in page
    assert "dec_s0" in page
    assert "3 would change" in page


def test_a_decisions_records_read_in_the_order_they_happened(console: Console) -> None:
    for record in (
        {"type": "decision", "time": "2026-06-01T10:00:01.250000+00:00", "decision_id": "d1"},
        {"type": "approval", "time": "2026-06-01T10:00:01+00:00", "decision_id": "d1"},
        {"type": "outcome", "time": "2026-06-01T10:00:01.500000+00:00", "decision_id": "d1"},
    ):
        console.sink.submit(record).result(5)
    client = console.client()
    sign_in(client, AUDITOR)

    page = client.get("/console/decisions/d1").text

    assert page.index("decision record") < page.index("approval record")
    assert page.index("approval record") < page.index("outcome record")


def test_a_bearer_token_signs_in_and_its_session_ends_when_the_token_expires() -> None:
    import time

    import jwt as pyjwt
    from starlette.testclient import TestClient

    from gateway.console import ConsoleApp, SessionStore
    from gateway.service import Authenticator
    from gateway.service._config import AuthConfig, JwtConfig
    from gateway.testing import FakeClock

    secret = b"a-console-test-jwt-secret-of-32-bytes!"
    authenticator = Authenticator(
        AuthConfig(jwt=JwtConfig(algorithms=("HS256",), secret=secret, issuer="idp", audience="gw"))
    )
    clock = FakeClock()
    app = ConsoleApp(
        authenticator=authenticator,
        roles=console_roles(approver_roles=["treasurer"]),
        sessions=SessionStore(idle_timeout_s=900, max_age_s=3600, max_sessions=5, clock=clock),
    )
    claims = {"sub": "tina", "roles": ["treasurer"], "iss": "idp", "aud": "gw"}
    token = pyjwt.encode({**claims, "exp": int(time.time()) + 300}, secret, algorithm="HS256")
    client = TestClient(app, base_url=ORIGIN, follow_redirects=False)

    assert sign_in(client, token).status_code == 303
    assert client.get("/console/approvals").status_code == 200
    clock.advance(301)
    assert client.get("/console/approvals").status_code == 303
    forged = pyjwt.encode({**claims, "exp": int(time.time()) + 300}, b"x" * 32, algorithm="HS256")
    assert sign_in(TestClient(app, base_url=ORIGIN), forged).status_code == 401


def test_the_shipped_pages_reference_nothing_outside_the_console() -> None:
    import re

    import gateway.console

    folder = Path(gateway.console.__file__).parent
    shipped = [*folder.glob("templates/*.html"), *folder.glob("static/*"), folder / "_chart.py"]
    for path in shipped:
        text = path.read_text(encoding="utf-8").replace("http://www.w3.org/2000/svg", "")
        assert not re.search(r"(?i)(https?:)?//[a-z0-9]", text), path.name
        assert "<script" not in text.lower(), path.name
        assert "@import" not in text, path.name


def test_an_address_with_too_many_failed_sign_ins_is_refused_until_its_window_passes(
    console: Console,
) -> None:
    from gateway.console._app import SIGN_IN_FAILURES, SIGN_IN_WINDOW_S

    client = console.client()
    for _ in range(SIGN_IN_FAILURES):
        assert sign_in(client, "not-a-key").status_code == 401

    refused = sign_in(client, AUDITOR)

    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= SIGN_IN_WINDOW_S
    assert AUDITOR not in refused.text
    assert client.get("/console/decisions").status_code == 303  # no session was made
    console.wall.advance(SIGN_IN_WINDOW_S)
    assert sign_in(client, AUDITOR).status_code == 303
    assert client.get("/console/decisions").status_code == 200


def test_a_successful_sign_in_forgets_the_failures_of_its_address(console: Console) -> None:
    from gateway.console._app import SIGN_IN_FAILURES

    client = console.client()
    for _ in range(SIGN_IN_FAILURES - 1):
        sign_in(client, "not-a-key")
    assert sign_in(client, AUDITOR).status_code == 303
    other = console.client()
    for _ in range(SIGN_IN_FAILURES - 1):
        assert sign_in(other, "not-a-key").status_code == 401
    assert sign_in(other, AUDITOR).status_code == 303


@given(st.lists(st.tuples(st.integers(0, 40), st.booleans(), st.floats(0, 100)), max_size=200))
def test_the_sign_in_throttle_remembers_a_bounded_number_of_addresses_and_failures(
    steps: list[tuple[int, bool, float]],
) -> None:
    from gateway.console._app import SignInThrottle
    from gateway.testing import FakeClock

    clock = FakeClock()
    throttle = SignInThrottle(clock, limit=3, window_s=50.0, addresses=8)
    for address, ok, wait in steps:
        clock.advance(wait)
        if ok:
            throttle.succeeded(str(address))
        else:
            throttle.failed(str(address))
        assert len(throttle._failures) <= 8
        assert all(len(times) <= 3 for times in throttle._failures.values())
        after = throttle.retry_after(str(address))
        assert after is None or 1 <= after <= 50


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(st.characters(codec="utf-8"), min_size=1, max_size=40))
def test_no_decision_id_can_leave_its_path_segment_in_any_link(
    console: Console, decision_id: str
) -> None:
    page = _decisions_page_with(console, decision_id)
    links = re.findall(r'href="/console/decisions/([^"]*)"', page)

    assert links
    for segment in links:
        assert not set(segment) & set("/?#&\\<>'\" ")
    assert urllib.parse.quote(decision_id, safe="") in links
