"""The service follows an OPA bundle server (``engine.bundle_url``), as replicas of it would.

The shipped policies are built and signed by the real ``opa build`` twice: as shipped, and
with the ``reader`` role no longer granted ``add``. The bundle server is a real HTTP server
on 127.0.0.1; the service runs under uvicorn on loopback and is called over HTTP.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from gateway.policy import EmbeddedEngine, build_bundle
from gateway.server import ConfigError, api_key_digest, build_service, parse_config
from gateway.testing import BundleServer, LiveServer, write_rsa_key_pair

ROOT: Final = Path(__file__).resolve().parents[2]
DECISION: Final = "gateway/authz/decision"
API_KEY: Final = "bundle-service-key"
CALL: Final = {"id": "c", "name": "add", "arguments": {"a": 1, "b": 2}}


@pytest.fixture(scope="module")
def published(opa_binary: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Signed bundles of the shipped policies: ``granted`` as shipped, ``revoked`` without
    ``add`` for readers, ``forged`` (granted again) signed with a key the service lacks."""
    folder = tmp_path_factory.mktemp("bundle-service")
    private, public = write_rsa_key_pair(folder, "signer")
    other, _ = write_rsa_key_pair(folder, "other")
    revoked = folder / "revoked"
    shutil.copytree(ROOT / "policies", revoked)
    data = json.loads((revoked / "data.json").read_text())
    reader = data["gateway"]["config"]["roles"]["reader"]
    reader["tools"] = [tool for tool in reader["tools"] if tool != "add"]
    (revoked / "data.json").write_text(json.dumps(data))
    built: dict[str, Any] = {"public_key": public}
    for name, source, revision, key in (
        ("granted", ROOT / "policies", "granted-1", private),
        ("revoked", revoked, "revoked-2", private),
        ("forged", ROOT / "policies", "forged-3", other),
    ):
        output = build_bundle(
            opa_binary,
            source,
            folder / f"{name}.tar.gz",
            entrypoints=(DECISION,),
            revision=revision,
            signing_key=key,
            signing_alg="RS256",
        )
        built[name] = output.read_bytes()
    return built


@pytest.fixture
def bundle_server() -> Iterator[BundleServer]:
    """A running bundle server, stopped afterwards."""
    with BundleServer() as server:
        yield server


def _service(url: str, public_key: Path, tmp_path: Path, **engine: Any) -> Any:
    config = parse_config(
        {
            "engine": {
                "kind": "embedded",
                "bundle_url": url,
                "poll_interval_s": 0.05,
                "verification": {"key_file": str(public_key), "algorithm": "RS256"},
                **engine,
            },
            "audit": {"enabled": False},
            "auth": {
                "api_keys": [
                    {
                        "sha256": api_key_digest(API_KEY),
                        "context": {"subject": "alice", "roles": ["reader"], "tenant": "acme"},
                    }
                ]
            },
            "tools": {"modules": ["examples.example_tools:TOOLS"]},
        },
        base=ROOT,
    )
    return build_service(config)


def _call(server: LiveServer) -> int:
    response = httpx.post(
        f"{server.url}/v1/calls", json=CALL, headers={"X-API-Key": API_KEY}, timeout=30
    )
    return response.status_code


def _rounds(server: BundleServer, count: int) -> None:
    # The poller asks again only once it has acted on the previous answer. Of `count` more
    # answered requests, the first may have been asked before the change, the second was
    # asked after it, and a third answered means the poller acted on the second.
    assert server.wait_for_requests(server.answered + count)


def test_a_revision_published_on_the_bundle_server_is_enforced_by_the_running_service(
    published: dict[str, Any], bundle_server: BundleServer, tmp_path: Path
) -> None:
    bundle_server.serve(published["granted"], '"granted"')
    service = _service(bundle_server.url, published["public_key"], tmp_path)
    engine = service.engine
    assert isinstance(engine, EmbeddedEngine)
    assert not engine.polling  # polling starts with the service, not with its assembly
    server = LiveServer(service.app).start()
    try:
        assert engine.polling
        assert _call(server) == 200
        assert _call(server) == 200  # now from the decision cache
        bundle_server.serve(published["revoked"], '"revoked"')
        _rounds(bundle_server, 3)
        assert engine.revision() == "revoked-2"
        assert _call(server) == 403
        # A bundle signed with another key is refused; the revision in force stays.
        bundle_server.serve(published["forged"], '"forged"')
        _rounds(bundle_server, 3)
        assert engine.revision() == "revoked-2"
        assert _call(server) == 403
        # So does a server that fails.
        bundle_server.fail(500)
        _rounds(bundle_server, 3)
        assert _call(server) == 403
        bundle_server.serve(published["granted"], '"granted-again"')
        _rounds(bundle_server, 3)
        assert _call(server) == 200
    finally:
        server.stop()
    assert not engine.polling


def test_a_service_does_not_start_on_a_bundle_it_cannot_verify(
    published: dict[str, Any], bundle_server: BundleServer, tmp_path: Path
) -> None:
    bundle_server.serve(published["forged"], '"forged"')
    with pytest.raises(ConfigError, match=r"engine\.bundle_url: the policy does not load"):
        _service(bundle_server.url, published["public_key"], tmp_path)


TOKEN_ENV: Final = "GATEWAY_TEST_BUNDLE_TOKEN"  # noqa: S105 - a variable name


def test_the_bundle_server_gets_the_bearer_token_the_environment_holds(
    published: dict[str, Any],
    bundle_server: BundleServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "t0ken-value")
    bundle_server.serve(published["granted"], '"granted"')
    service = _service(
        bundle_server.url,
        published["public_key"],
        tmp_path,
        bundle_token_env=TOKEN_ENV,
        poll_interval_s=0.01,
        poll_max_interval_s=0.03,
    )
    engine = service.engine
    assert isinstance(engine, EmbeddedEngine)
    server = LiveServer(service.app).start()
    try:
        bundle_server.serve(published["revoked"], '"revoked"')
        _rounds(bundle_server, 3)
        assert engine.revision() == "revoked-2"
    finally:
        server.stop()
    assert {sent["Authorization"] for sent in bundle_server.requests} == {"Bearer t0ken-value"}
    assert "t0ken" not in f"{engine.identity} {engine!r} {service.config!r}"


@pytest.mark.parametrize("value", [None, "", "two words", "line\nbreak"])
def test_a_token_variable_that_is_unset_or_not_a_token_is_a_config_error(
    published: dict[str, Any],
    bundle_server: BundleServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    value: str | None,
) -> None:
    if value is None:
        monkeypatch.delenv(TOKEN_ENV, raising=False)
    else:
        monkeypatch.setenv(TOKEN_ENV, value)
    bundle_server.serve(published["granted"], '"granted"')
    with pytest.raises(ConfigError, match=TOKEN_ENV) as caught:
        _service(bundle_server.url, published["public_key"], tmp_path, bundle_token_env=TOKEN_ENV)
    if value:
        assert value not in str(caught.value)
    assert bundle_server.requests == []


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ({"bundle_token_env": "NOT A NAME"}, "must name an environment variable"),
        ({"poll_interval_s": 2, "poll_max_interval_s": 1}, "at least engine.poll_interval_s"),
    ],
)
def test_bundle_credentials_and_jitter_are_checked_by_the_config(
    published: dict[str, Any],
    bundle_server: BundleServer,
    tmp_path: Path,
    engine: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(ConfigError, match=message):
        _service(bundle_server.url, published["public_key"], tmp_path, **engine)


def test_bundle_credentials_and_jitter_are_only_for_a_bundle_server(tmp_path: Path) -> None:
    for key, value in (("bundle_token_env", TOKEN_ENV), ("poll_max_interval_s", 5.0)):
        with pytest.raises(ConfigError, match=f"engine.{key}: only for engine.bundle_url"):
            parse_config(
                {
                    "engine": {"kind": "embedded", "bundle": "bundles/policies.tar.gz", key: value},
                    "tools": {"modules": ["examples.example_tools:TOOLS"]},
                },
                base=ROOT,
            )
