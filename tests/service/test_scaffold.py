"""``gateway init``: a folder that serves a gateway on its own, wherever it is."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from gateway.server import build_service, load_config
from gateway.service._scaffold import (
    WRITTEN,
    ScaffoldError,
    scaffold,
    shipped_bundle,
    shipped_policies,
)
from gateway.testing import LiveServer

ROOT = Path(__file__).resolve().parents[2]


def test_init_writes_the_config_tools_policies_and_bundle(tmp_path: Path) -> None:
    made = scaffold(tmp_path / "gw")

    assert sorted(p.name for p in made.directory.iterdir()) == sorted(WRITTEN)
    assert (made.directory / "policies.tar.gz").read_bytes() == shipped_bundle().read_bytes()
    assert (made.directory / "policies" / "data.json").read_bytes() == (
        shipped_policies() / "data.json"
    ).read_bytes()


def test_init_keeps_only_the_digest_of_the_key_it_returns(tmp_path: Path) -> None:
    made = scaffold(tmp_path / "gw")
    text = made.config.read_text(encoding="utf-8")

    assert made.api_key not in text
    keys = tomllib.loads(text)["auth"]["api_keys"]
    assert [k["sha256"] for k in keys] == [hashlib.sha256(made.api_key.encode()).hexdigest()]


def test_two_inits_make_two_different_keys(tmp_path: Path) -> None:
    assert scaffold(tmp_path / "a").api_key != scaffold(tmp_path / "b").api_key


@pytest.mark.parametrize("existing", ["a file", "a folder with a file"])
def test_init_refuses_anything_but_an_empty_or_new_folder_and_writes_nothing(
    tmp_path: Path, existing: str
) -> None:
    target = tmp_path / "gw"
    if existing == "a file":
        target.write_text("mine", encoding="utf-8")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("mine", encoding="utf-8")
    before = sorted(str(p) for p in tmp_path.rglob("*"))

    with pytest.raises(ScaffoldError, match="not an empty folder"):
        scaffold(target)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


@pytest.mark.integration
def test_the_folder_init_makes_serves_the_caller_with_its_key_and_no_one_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = scaffold(tmp_path / "gw")
    monkeypatch.setattr(sys, "path", [*sys.path])  # loading tools adds the folder
    monkeypatch.chdir(tmp_path)  # paths resolve against the config's folder, not this one
    service = build_service(load_config(made.config))
    body = {"id": "1", "name": "add", "arguments": {"a": 2, "b": 3}}
    with LiveServer(service.app) as server, httpx.Client(base_url=server.url) as http:
        allowed = http.post("/v1/calls", json=body, headers={"X-API-Key": made.api_key})
        nobody = http.post("/v1/calls", json=body, headers={"X-API-Key": "demo-key-alice"})

    assert (allowed.status_code, allowed.json()["output"]["text"]) == (200, "5")
    assert nobody.status_code == 401
    assert (made.directory / "audit" / "audit.jsonl").stat().st_size > 0


@pytest.mark.integration
def test_an_installed_wheel_inits_a_folder_that_gateway_check_decides_with(
    tmp_path: Path,
) -> None:
    # The wheel, installed apart from the checkout, must carry the policies and bundle.
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        timeout=600,
        capture_output=True,
    )
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            *map(str, wheels.glob("gateway-*.whl")),
        ],
        check=True,
        timeout=600,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}

    def gateway(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway", *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    located = subprocess.run(
        [sys.executable, "-c", "import gateway; print(gateway.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert located.stdout.startswith(str(target))
    made = gateway("init", "gw")
    assert made.returncode == 0, made.stderr
    decided = gateway(
        "check",
        "--config",
        "gw/gateway.toml",
        "--tool",
        "add",
        "--arguments",
        '{"a":2,"b":3}',
        "--context",
        '{"subject": "me", "roles": ["reader"], "tenant": "acme"}',
    )
    assert decided.returncode == 0, decided.stderr
