"""deploy/kubernetes: manifests the Kubernetes API accepts, carrying configurations the
gateway and OPA accept."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.server import load_config

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
KUBERNETES = "1.37"


def resources() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in MANIFESTS:
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document:
                found.append((f"{path.name}:{document['kind']}/{document['metadata']['name']}",
                              document))  # fmt: skip
    return found


def test_there_are_manifests_for_the_gateway_its_sidecar_and_redis() -> None:
    kinds = {name.split(":")[1] for name, _ in resources()}
    assert {"Deployment/gateway", "Service/gateway", "ConfigMap/gateway-config"} <= kinds
    assert "Deployment/gateway-redis" in kinds


@pytest.mark.parametrize(("name", "resource"), resources(), ids=lambda v: str(v)[:60])
def test_every_manifest_is_valid_for_the_kubernetes_api(name: str, resource: Any) -> None:
    kubernetes_validate.validate(resource, KUBERNETES, strict=True)


def test_the_validation_refuses_a_misspelt_field() -> None:
    deployment = copy.deepcopy(dict(resources())["gateway.yaml:Deployment/gateway"])
    deployment["spec"]["replica"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)


def test_the_config_map_holds_a_gateway_configuration_that_loads(tmp_path: Path) -> None:
    data = dict(resources())["gateway.yaml:ConfigMap/gateway-config"]["data"]
    # The Secret gateway-secrets, as the pod mounts it, in a folder of the test's own.
    (tmp_path / "audit.key").write_bytes(b"k" * 32)
    (tmp_path / "api_keys.toml").write_text(
        f'[[api_keys]]\nsha256 = "{"a" * 64}"\ncontext = {{ subject = "svc" }}\n', "utf-8"
    )
    path = tmp_path / "gateway.toml"
    path.write_text(
        data["gateway.toml"].replace("/run/secrets/gateway/", f"{tmp_path}/"), encoding="utf-8"
    )

    config = load_config(path)

    assert (config.engine.kind, config.audit.fsync, config.server.port) == ("opa", "always", 8080)


def test_the_sidecar_verifies_the_bundle_with_the_key_it_is_given() -> None:
    resource = dict(resources())["gateway.yaml:ConfigMap/gateway-config"]
    opa = yaml.safe_load(resource["data"]["opa.yaml"])
    keyid = opa["bundles"]["gateway"]["signing"]["keyid"]
    deployment = dict(resources())["gateway.yaml:Deployment/gateway"]
    sidecar = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "opa")  # fmt: skip

    assert keyid in opa["keys"]
    assert f"--set-file=keys.{keyid}.key=/run/secrets/bundle/public.pem" in sidecar["args"]
