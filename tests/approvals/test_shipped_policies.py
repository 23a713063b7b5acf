"""The shipped policies' obligations through HTTP on both engines: a treasurer's approval of
payments above 1000, and query_db's ssn column redacted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from gateway.cli import main
from gateway.server import build_service, load_config
from gateway.testing import LiveServer, OpaServer
from tests.server.conftest import BUNDLE, EXAMPLE_CONFIG, POLICIES, gateway_toml, toml_value

TINA: Final = "approvals-test-key-tina"
THEO: Final = "approvals-test-key-theo"
ANNA: Final = "approvals-test-key-anna"
KEYS: Final = {
    TINA: {"subject": "tina", "roles": ["treasurer"], "tenant": "acme"},
    THEO: {"subject": "theo", "roles": ["treasurer"], "tenant": "acme"},
    ANNA: {"subject": "anna", "roles": ["analyst"], "tenant": "acme"},
}
PAYMENT: Final = {"from_account": "acct-acme-001", "to_account": "acct-x", "amount": 5000}


@pytest.fixture(scope="module")
def shipped_opa(opa_binary: str) -> Iterator[OpaServer]:
    server = OpaServer(binary=opa_binary, policy_paths=[POLICIES]).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["embedded", "opa"])
def url(request: pytest.FixtureRequest, tmp_path: Path, opa_binary: str) -> Iterator[str]:
    options: dict[str, Any] = (
        # The committed bundle is the shipped policies compiled (policies/check.sh holds it so).
        {"bundle": BUNDLE}
        if request.param == "embedded"
        else {"opa_url": request.getfixturevalue("shipped_opa").url}
    )
    text = gateway_toml(
        engine=request.param,
        audit_path=tmp_path / "audit.jsonl",
        api_keys=KEYS,
        tools=["tests.approvals.http_tools:SHIPPED_TOOLS"],
        **options,
    )
    text += f"\n[approvals]\nenabled = true\npath = {toml_value(tmp_path / 'approvals.json')}\n"
    (tmp_path / "gateway.toml").write_text(text, encoding="utf-8")
    server = LiveServer(build_service(load_config(tmp_path / "gateway.toml")).app).start()
    try:
        yield server.url
    finally:
        server.stop()


def send(url: str, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, url + path, json=body, headers={"X-API-Key": key}, timeout=10)


def test_a_large_payment_runs_once_another_treasurer_approved_it(url: str) -> None:
    call = {"id": "p1", "name": "pay", "arguments": PAYMENT}
    pending = send(url, TINA, "POST", "/v1/calls", call)
    assert pending.status_code == 202
    assert pending.json()["message"] == "this call needs the approval of a treasurer"
    approval = pending.json()["approval_url"]
    assert send(url, TINA, "POST", approval + "/approve").status_code == 403  # her own call
    assert send(url, ANNA, "POST", approval + "/approve").status_code == 403  # not a treasurer
    assert send(url, THEO, "POST", approval + "/approve").status_code == 200
    ran = send(url, TINA, "POST", "/v1/calls", call)
    assert ran.status_code == 200
    assert ran.json()["output"]["text"] == "paid 5000.0 from acct-acme-001 to acct-x"
    assert send(url, TINA, "POST", "/v1/calls", call).status_code == 202


def test_a_small_payment_needs_no_approval(url: str) -> None:
    call = {"id": "p2", "name": "pay", "arguments": {**PAYMENT, "amount": 1000}}
    assert send(url, TINA, "POST", "/v1/calls", call).status_code == 200


def test_query_db_rows_come_back_without_their_ssn(url: str) -> None:
    call = {
        "id": "q1",
        "name": "query_db",
        "arguments": {"database": "acme_sales", "query": "SELECT name, ssn FROM customers"},
    }
    answer = send(url, ANNA, "POST", "/v1/calls", call)
    assert answer.status_code == 200
    assert answer.json()["output"]["details"]["rows"] == [{"name": "ann", "ssn": "[redacted]"}]
    assert "123-45" not in answer.text


def test_check_shows_the_obligations_of_a_decision(capsys: pytest.CaptureFixture[str]) -> None:
    context = json.dumps(KEYS[TINA])
    status = main(
        ["check", "--config", str(EXAMPLE_CONFIG), "--tool", "pay", "--arguments",
         json.dumps(PAYMENT), "--context", context]
    )  # fmt: skip
    answer = json.loads(capsys.readouterr().out)
    assert status == 0
    assert answer["obligations"] == [{"type": "require_approval", "role": "treasurer"}]
