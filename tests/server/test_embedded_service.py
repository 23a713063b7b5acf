"""The service's embedded engine: OPA-compiled bundles, verified when a key is configured.

``engine.bundle`` serves a bundle (the demo: the committed ``bundles/policies.tar.gz``, so no
opa binary is needed); ``engine.policies`` compiles a directory with the opa binary at start.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from gateway import Authorization, ToolDefinition
from gateway.policy import EmbeddedEngine, InputDocument, _epoch, build_bundle, caller_context
from gateway.server import ConfigError, build_service, parse_config
from gateway.service._builder import build_engine
from gateway.testing import write_rsa_key_pair
from tests.server.conftest import (
    ALICE,
    BUNDLE,
    POLICIES,
    REPO_ROOT,
    served_client,
    shipped_service_config,
)

ADD = ToolDefinition(
    "add",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    "Add two integers",
)


def _config(tmp_path: Path, engine: dict[str, Any]) -> Any:
    return parse_config(
        {
            "engine": {"kind": "embedded", **engine},
            "audit": {"enabled": False},
            "auth": {"api_keys": [{"sha256": "a" * 64, "context": {"subject": "alice"}}]},
            "tools": {"modules": ["examples.example_tools:TOOLS"]},
        },
        base=tmp_path,
    )


def _decide(engine: Any, roles: list[str]) -> bool:
    async def decide() -> bool:
        with caller_context(subject="alice", roles=roles, tenant="acme"):
            document = InputDocument(Authorization(ADD, b'{"a": 1, "b": 2}'))
            answer = await engine.evaluate("gateway/authz/decision", document)
        return bool(answer.value["allow"])

    return asyncio.run(decide())


def test_the_committed_bundle_is_what_opa_builds_from_the_shipped_policies(
    tmp_path: Path, opa_binary: str
) -> None:
    built = build_bundle(
        opa_binary, POLICIES, tmp_path / "b.tar.gz", entrypoints=("gateway/authz/decision",)
    )
    assert built.read_bytes() == BUNDLE.read_bytes(), "bundles/policies.tar.gz: run make bundle"


def test_a_bundle_is_served_with_no_opa_binary_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPA_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    engine = build_engine(_config(tmp_path, {"bundle": str(BUNDLE)}))
    assert isinstance(engine, EmbeddedEngine)
    assert engine.identity == f"embedded:{BUNDLE}"
    assert _decide(engine, ["writer"]) is True
    assert _decide(engine, []) is False


def test_a_policy_directory_is_compiled_with_the_configured_opa(
    tmp_path: Path, opa_binary: str
) -> None:
    config = _config(tmp_path, {"policies": str(POLICIES), "opa_binary": opa_binary})
    engine = build_engine(config)
    assert isinstance(engine, EmbeddedEngine)
    assert _decide(engine, ["writer"]) is True


def test_a_policy_directory_without_an_opa_binary_names_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPA_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"^engine\.policies: .*no opa binary"):
        build_engine(_config(tmp_path, {"policies": str(POLICIES)}))


def test_a_bundle_that_does_not_load_names_its_key_and_quotes_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"SECRET-TEXT-" * 100)
    with pytest.raises(ConfigError) as caught:
        build_engine(_config(tmp_path, {"bundle": str(broken)}))
    assert str(caught.value).startswith("engine.bundle: the policy does not load")
    assert "SECRET" not in str(caught.value)


def test_a_decision_path_the_bundle_cannot_answer_names_its_key(tmp_path: Path) -> None:
    config = _config(tmp_path, {"bundle": str(BUNDLE), "decision_path": "gateway/other/decision"})
    with pytest.raises(ConfigError, match=r"^engine\.decision_path: .*not an entrypoint"):
        build_engine(config)


@pytest.fixture(scope="module")
def rsa_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A private key for opa to sign with, and its public key for the gateway."""
    return write_rsa_key_pair(tmp_path_factory.mktemp("bundle-keys"), "signer")


def test_a_signed_bundle_is_served_when_it_verifies(
    tmp_path: Path, rsa_keys: tuple[Path, Path], opa_binary: str
) -> None:
    private, public = rsa_keys
    signed = build_bundle(
        opa_binary,
        POLICIES,
        tmp_path / "signed.tar.gz",
        entrypoints=("gateway/authz/decision",),
        signing_key=private,
        signing_alg="RS256",
    )
    config = _config(tmp_path, {"bundle": str(signed), "verification": {"key_file": str(public)}})
    engine = build_engine(config)
    assert isinstance(engine, EmbeddedEngine)
    assert engine.bundle.signed is True
    assert _decide(engine, ["writer"]) is True


@pytest.mark.parametrize("bundle", ["unsigned", "other key"])
def test_a_bundle_that_does_not_verify_is_refused_at_start(
    tmp_path: Path, rsa_keys: tuple[Path, Path], bundle: str, opa_binary: str
) -> None:
    _, public = rsa_keys
    if bundle == "unsigned":
        served = BUNDLE
    else:
        key, _ = write_rsa_key_pair(tmp_path, "other")
        served = build_bundle(
            opa_binary,
            POLICIES,
            tmp_path / "other.tar.gz",
            entrypoints=("gateway/authz/decision",),
            signing_key=key,
            signing_alg="RS256",
        )
    config = _config(tmp_path, {"bundle": str(served), "verification": {"key_file": str(public)}})
    with pytest.raises(ConfigError, match=r"^engine\.bundle: the policy does not load"):
        build_engine(config)


@pytest.mark.skipif(not _epoch.native_timers(), reason="the deadline clock needs a thread here")
async def test_a_serving_process_runs_no_python_thread_that_wakes_by_itself(
    tmp_path: Path,
) -> None:
    # Every Python thread that wakes on its own takes the interpreter's lock from the thread
    # serving calls, which pays at each system call that lets it go (the embedded engine's
    # deadline clock did, every 5 ms: 81 us per call on the app's call path against 62 us
    # without it). Only the audit syncer may run beside the loop, and it sleeps until a
    # record asks for an fsync; the loop's executor threads wait for work, for good.
    before = set(threading.enumerate())
    config = shipped_service_config(tmp_path)
    config["audit"]["fsync"] = "batch"
    service = build_service(parse_config(config, base=REPO_ROOT))
    async with served_client(service, {"X-API-Key": ALICE}) as client:
        answer = await client.post(
            "/v1/calls", json={"id": "1", "name": "add", "arguments": {"a": 1, "b": 2}}
        )
        assert answer.json()["status"] == "ok"
        started = {
            t.name
            for t in threading.enumerate()
            if t not in before and not t.name.startswith("asyncio_")
        }
    assert started == {"gateway-audit"}
