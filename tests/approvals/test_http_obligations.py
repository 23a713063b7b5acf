"""Every obligation type and the approval steps through HTTP, on both engines.

A real uvicorn server on 127.0.0.1 serves a service built from a TOML file, with the
embedded engine (the policy compiled by the pinned opa) or a real OPA server.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from gateway.audit import verify_trail
from gateway.cli import main
from gateway.policy import build_bundle
from gateway.server import build_service, load_config
from gateway.testing import LiveServer, OpaServer
from tests.server.conftest import gateway_toml, read_audit, toml_value

POLICY: Final = Path(__file__).resolve().parent / "policy"
CLERK: Final = "approvals-test-key-clerk"
TREASURER: Final = "approvals-test-key-treasurer"
ANALYST: Final = "approvals-test-key-analyst"
KEYS: Final = {
    CLERK: {"subject": "carl", "roles": ["clerk"], "tenant": "acme"},
    TREASURER: {"subject": "tina", "roles": ["treasurer"], "tenant": "acme"},
    ANALYST: {"subject": "andy", "roles": ["analyst"], "tenant": "acme"},
}


class Running:
    def __init__(self, folder: Path, config: Path) -> None:
        self.folder = folder
        self.config = config
        self.server = LiveServer(build_service(load_config(config)).app).start()

    def stop(self) -> None:
        self.server.stop()

    def call(self, key: str, mode: str, **arguments: Any) -> httpx.Response:
        body = {"id": "c1", "name": "ledger", "arguments": {"mode": mode, **arguments}}
        return httpx.post(
            self.server.url + "/v1/calls", json=body, headers={"X-API-Key": key}, timeout=10
        )

    def get(self, key: str, path: str) -> httpx.Response:
        return httpx.get(self.server.url + path, headers={"X-API-Key": key}, timeout=10)

    def post(self, key: str, path: str) -> httpx.Response:
        return httpx.post(self.server.url + path, headers={"X-API-Key": key}, timeout=10)

    def audit(self) -> list[dict[str, Any]]:
        return read_audit(self.folder / "audit.jsonl")


Factory = Callable[[], Running]


@pytest.fixture(scope="module")
def policy_opa(opa_binary: str) -> Iterator[OpaServer]:
    server = OpaServer(binary=opa_binary, policy_paths=[POLICY]).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def policy_bundle(opa_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test policy compiled once for the module's embedded engines."""
    folder = tmp_path_factory.mktemp("policy-bundle")
    return build_bundle(
        opa_binary, POLICY, folder / "policy.tar.gz", entrypoints=("gateway/authz/decision",)
    )


@pytest.fixture(params=["embedded", "opa"])
def start(request: pytest.FixtureRequest, tmp_path: Path, policy_bundle: Path) -> Iterator[Factory]:
    kind: str = request.param
    running: list[Running] = []
    options: dict[str, Any] = (
        {"bundle": policy_bundle}
        if kind == "embedded"
        else {"opa_url": request.getfixturevalue("policy_opa").url}
    )
    config = tmp_path / "gateway.toml"
    text = gateway_toml(
        engine=kind,
        audit_path=tmp_path / "audit.jsonl",
        api_keys=KEYS,
        tools=["tests.approvals.http_tools:TOOLS"],
        **options,
    )
    text += f"\n[approvals]\nenabled = true\npath = {toml_value(tmp_path / 'approvals.json')}\n"
    config.write_text(text, encoding="utf-8")

    def make() -> Running:
        service = Running(tmp_path, config)
        running.append(service)
        return service

    try:
        yield make
    finally:
        for service in running:
            service.stop()


def test_a_clamp_reaches_the_tool_and_the_audit_has_both_digests(start: Factory) -> None:
    service = start()
    answer = service.call(CLERK, "clamp", limit=500)
    assert answer.status_code == 200
    assert answer.json()["output"]["details"]["seen"]["limit"] == 10
    service.stop()
    decision = next(r for r in service.audit() if r["type"] == "decision")
    original = {"limit": 500, "mode": "clamp"}
    assert (
        decision["arguments_digest"]
        == hashlib.sha256(
            json.dumps(original, separators=(",", ":"), sort_keys=True).encode()
        ).hexdigest()
    )
    assert (
        decision["rewritten_arguments_digest"]
        == hashlib.sha256(b'{"limit":10,"mode":"clamp"}').hexdigest()
    )


def test_a_redacted_column_never_reaches_the_caller(start: Factory) -> None:
    service = start()
    answer = service.call(CLERK, "redact")
    assert answer.status_code == 200
    rows = answer.json()["output"]["details"]["rows"]
    assert [row["ssn"] for row in rows] == ["[redacted]", "[redacted]"]
    assert "123-45" not in answer.text
    assert "987-65" not in answer.text


def test_audit_fields_land_in_the_decision_record(start: Factory) -> None:
    service = start()
    assert service.call(CLERK, "audit").status_code == 200
    service.stop()
    decision = next(r for r in service.audit() if r["type"] == "decision")
    assert decision["fields"] == {"ticket": "T-42"}


def test_an_unknown_obligation_denies_and_a_malformed_one_is_malformed(start: Factory) -> None:
    service = start()
    unknown = service.call(CLERK, "unknown")
    assert (unknown.status_code, unknown.json()["code"]) == (403, "obligation_unfulfilled")
    malformed = service.call(CLERK, "malformed")
    assert (malformed.status_code, malformed.json()["code"]) == (503, "malformed_decision")
    assert "not a list" not in malformed.text


def test_an_approval_from_request_to_single_use_run(start: Factory) -> None:
    service = start()
    pending = service.call(CLERK, "approve", amount=5000)
    assert pending.status_code == 202
    body = pending.json()
    assert body["code"] == "approval_pending"
    assert body["message"] == "a treasurer must approve this"
    url = body["approval_url"]
    assert url == f"/v1/approvals/{body['approval_id']}"
    assert service.get(CLERK, url).json()["status"] == "pending"
    assert service.get(ANALYST, url).status_code == 404  # neither the caller nor an approver
    listed = service.get(TREASURER, "/v1/approvals").json()["approvals"]
    assert [a["id"] for a in listed] == [body["approval_id"]]
    assert "5000" not in json.dumps(listed)  # only the digest of the arguments
    refused = service.post(ANALYST, url + "/approve")
    assert (refused.status_code, refused.json()["code"]) == (403, "approver_not_allowed")
    assert service.post(CLERK, url + "/approve").status_code == 403
    approved = service.post(TREASURER, url + "/approve")
    assert (approved.status_code, approved.json()["status"]) == (200, "approved")
    assert service.post(TREASURER, url + "/approve").status_code == 409
    changed = service.call(CLERK, "approve", amount=5001)
    assert changed.status_code == 202
    ran = service.call(CLERK, "approve", amount=5000)
    assert ran.status_code == 200
    assert ran.json()["output"]["details"]["seen"]["amount"] == 5000
    assert service.get(CLERK, url).json()["status"] == "used"
    replay = service.call(CLERK, "approve", amount=5000)
    assert replay.status_code == 202
    assert replay.json()["approval_id"] != body["approval_id"]
    assert httpx.get(service.server.url + url, timeout=10).status_code == 401
    service.stop()
    events = [r["event"] for r in service.audit() if r["type"] == "approval"]
    assert events == ["requested", "approved", "requested", "used", "requested"]
    key = (service.folder / ".audit.key").read_bytes().strip()
    results = verify_trail(service.folder / "audit.jsonl", key=key)
    assert results
    assert all(result.ok for _, result in results)


def test_a_pending_approval_survives_a_restart_and_is_then_approved(start: Factory) -> None:
    first = start()
    pending = first.call(CLERK, "approve", amount=7000).json()
    first.stop()
    second = start()
    assert [a["id"] for a in second.get(TREASURER, "/v1/approvals").json()["approvals"]] == [
        pending["approval_id"]
    ]
    assert second.post(TREASURER, pending["approval_url"] + "/approve").status_code == 200
    assert second.call(CLERK, "approve", amount=7000).status_code == 200


def test_the_cli_lists_and_approves_as_the_approver_in_the_environment(
    start: Factory, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    service = start()
    pending = service.call(CLERK, "approve", amount=9000).json()
    url = ["--url", service.server.url]
    monkeypatch.setenv("GATEWAY_API_KEY", TREASURER)
    assert main(["approvals", "list", *url]) == 0
    listed = json.loads(capsys.readouterr().out)["approvals"]
    assert [a["id"] for a in listed] == [pending["approval_id"]]
    monkeypatch.setenv("GATEWAY_API_KEY", ANALYST)
    assert main(["approvals", "approve", pending["approval_id"], *url]) == 1
    assert json.loads(capsys.readouterr().out)["code"] == "approver_not_allowed"
    monkeypatch.setenv("GATEWAY_API_KEY", TREASURER)
    assert main(["approvals", "reject", pending["approval_id"], *url]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "rejected"
    assert main(["approvals", "approve", pending["approval_id"], *url]) == 1
    assert main(["approvals", "show", "../etc", *url]) == 2
    monkeypatch.delenv("GATEWAY_API_KEY")
    assert main(["approvals", "list", *url]) == 2
    assert service.call(CLERK, "approve", amount=9000).status_code == 202
