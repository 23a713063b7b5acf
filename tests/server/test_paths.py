"""``[paths]``: the service resolves the path arguments it names, and the policy decides on them.

End to end over HTTP on each engine: the example ``read_file`` tool, a real folder tree that
stands for the tools' ``/srv``, and a symbolic link from one tenant's folder into another's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.server import ConfigError, build_service, load_config, parse_config
from gateway.service._builder import build_path_view
from gateway.testing import LiveServer
from tests.server.conftest import ALICE, GatewayFactory, RunningGateway
from tests.server.test_config import at, valid


@pytest.fixture
def srv(tmp_path: Path) -> Path:
    root = tmp_path / "srv"
    (root / "tenants" / "acme").mkdir(parents=True)
    (root / "tenants" / "globex").mkdir(parents=True)
    (root / "tenants" / "globex" / "pay.csv").write_text("globex")
    (root / "tenants" / "acme" / "to-globex").symlink_to(root / "tenants" / "globex")
    return root


def _with_paths(config_path: Path, srv: Path) -> None:
    text = config_path.read_text(encoding="utf-8")
    text += f'\n[paths]\nresolve = {{ read_file = ["/path"] }}\nmounts = {{ "/srv" = "{srv}" }}\n'
    config_path.write_text(text, encoding="utf-8")


async def _read(gateway: RunningGateway, path: str) -> tuple[int, dict[str, Any]]:
    async with gateway.client() as client:
        response = await client.post(
            "/v1/calls",
            headers={"X-API-Key": ALICE},
            json={"id": "c1", "name": "read_file", "arguments": {"path": path}},
        )
    return response.status_code, response.json()


async def test_a_link_into_another_tenant_is_denied_when_the_service_resolves_paths(
    start_gateway: GatewayFactory, engine_kind: str, srv: Path
) -> None:
    plain = start_gateway(engine_kind)
    status, body = await _read(plain, "/srv/tenants/acme/to-globex/pay.csv")
    # Without [paths] the text is all the policy sees, and it looks confined.
    assert (status, body["status"]) == (200, "ok")

    plain.stop()
    _with_paths(plain.config_path, srv)
    service = build_service(load_config(plain.config_path))
    server = LiveServer(service.app).start()
    try:
        resolving = RunningGateway(
            engine_kind, plain.config_path, plain.audit_path, service, server
        )
        status, body = await _read(resolving, "/srv/tenants/acme/to-globex/pay.csv")
        assert (status, body["code"]) == (403, "denied")
        assert body["message"] == "path is not allowed: it leads outside the allowed directories"
        status, body = await _read(resolving, "/srv/tenants/acme/new.txt")
        assert (status, body["status"]) == (200, "ok")
    finally:
        server.stop()


def test_paths_settings_load(tmp_path: Path) -> None:
    data = at(
        valid(tmp_path),
        "paths",
        {"resolve": {"read_file": ["/path"]}, "mounts": {"/srv": "/mnt/srv"}},
    )
    config = parse_config(data, base=tmp_path)
    assert config.paths.resolve == {"read_file": ("/path",)}
    assert config.paths.mounts == {"/srv": "/mnt/srv"}
    view = build_path_view(config)
    assert view is not None
    assert view.covers("read_file")
    assert not view.covers("add")


def test_without_paths_settings_nothing_is_resolved(tmp_path: Path) -> None:
    assert build_path_view(parse_config(valid(tmp_path), base=tmp_path)) is None


@pytest.mark.parametrize(
    ("paths", "fragment"),
    [
        pytest.param(
            {"resolve": {"read_file": "/path"}},
            "paths.resolve.read_file: must be a list",
            id="not-a-list",
        ),
        pytest.param({"resolve": {"read_file": ["path"]}}, "JSON pointers", id="not-a-pointer"),
        pytest.param(
            {"mounts": {"srv": "/mnt"}}, "paths.mounts.srv: both folders", id="relative-mount"
        ),
        pytest.param({"mounts": {"/srv": 3}}, "paths.mounts./srv: both folders", id="not-text"),
        pytest.param({"resolv": {}}, "paths.resolv: unknown key", id="unknown-key"),
    ],
)
def test_a_bad_paths_setting_is_refused_naming_the_key(
    tmp_path: Path, paths: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        parse_config(at(valid(tmp_path), "paths", paths), base=tmp_path)
