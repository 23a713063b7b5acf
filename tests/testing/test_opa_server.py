"""Tests of the real-OPA test harness (gateway.testing._opa_server) against a real opa binary."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.testing import _opa_server, _serving
from gateway.testing._opa_server import (
    OPA_IMAGE,
    OPA_VERSION,
    OpaContainer,
    OpaServer,
    find_opa_binary,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
PROVISION_SCRIPT = REPO_ROOT / "scripts" / "provision-opa"

POLICY_ALICE = """\
package gateway.authz

default allow := false

allow if input.user == "alice"
"""

POLICY_BOB = """\
package gateway.authz

default allow := false

allow if input.user == "bob"
"""

POLICY_ROLES = """\
package gateway.roles

default admin := false

admin if input.user in data.admins
"""

ALLOW = "gateway/authz/allow"


@pytest.fixture(scope="module")
def opa_bin() -> str:
    """The pinned opa binary: $OPA_BIN, else whatever scripts/provision-opa provides.

    Never skips: a missing OPA is a test failure.
    """
    env = os.environ.get("OPA_BIN")
    if env:
        if not os.access(env, os.X_OK):
            pytest.fail(f"OPA_BIN={env} is not an executable file")
        return env
    proc = subprocess.run(
        [str(PROVISION_SCRIPT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/provision-opa failed (exit {proc.returncode}); set OPA_BIN or fix the "
            f"build.\nstderr:\n{proc.stderr[-4000:]}"
        )
    path = proc.stdout.strip()
    assert Path(path).is_absolute(), path
    return path


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "authz.rego"
    path.write_text(POLICY_ALICE, encoding="utf-8")
    return path


@pytest.fixture
def server(opa_bin: str, policy_file: Path) -> Iterator[OpaServer]:
    with OpaServer(binary=opa_bin, policy_paths=[policy_file]) as opa:
        yield opa


def _allowed(opa: OpaServer, user: str) -> object:
    return opa.query(ALLOW, {"user": user}).get("result")


def test_binary_reports_pinned_version(opa_bin: str) -> None:
    out = subprocess.run(
        [opa_bin, "version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert f"Version: {OPA_VERSION}\n" in out


def test_module_pin_matches_provision_script() -> None:
    script = PROVISION_SCRIPT.read_text(encoding="utf-8")
    match = re.search(r"^OPA_VERSION=v(\S+)$", script, re.MULTILINE)
    assert match is not None
    assert match.group(1) == OPA_VERSION
    assert f"openpolicyagent/opa:{OPA_VERSION}" == OPA_IMAGE


def test_provision_script_validates_opa_bin(opa_bin: str) -> None:
    env = {**os.environ, "OPA_BIN": opa_bin}
    ok = subprocess.run(
        [str(PROVISION_SCRIPT)], env=env, capture_output=True, text=True, check=False, timeout=30
    )
    assert ok.returncode == 0, ok.stderr
    printed = ok.stdout.removesuffix("\n")
    assert "\n" not in printed
    assert Path(printed).is_absolute()
    assert Path(printed).samefile(opa_bin)

    env["OPA_BIN"] = sys.executable  # executable, but not OPA
    bad = subprocess.run(
        [str(PROVISION_SCRIPT)], env=env, capture_output=True, text=True, check=False, timeout=30
    )
    assert bad.returncode != 0
    assert bad.stdout == ""
    assert f"pinned version is {OPA_VERSION}" in bad.stderr


def test_query_allow_and_deny(server: OpaServer) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server.url)
    assert server.url.endswith(f":{server.port}")
    assert server.running
    assert server.process.pid == server.pid
    assert _allowed(server, "alice") is True
    assert _allowed(server, "bob") is False


def test_undefined_document_has_no_result(server: OpaServer) -> None:
    body = server.query("gateway/authz/no_such_rule", {"user": "alice"})
    assert "result" not in body


def test_put_policy_changes_decision(server: OpaServer, policy_file: Path) -> None:
    assert _allowed(server, "bob") is False
    # Files loaded by `opa run` are registered under their path: replace that module.
    server.put_policy(str(policy_file), POLICY_BOB)
    assert _allowed(server, "bob") is True
    assert _allowed(server, "alice") is False


def test_put_policy_rejects_bad_rego(server: OpaServer) -> None:
    with pytest.raises(RuntimeError, match=r"(?s)HTTP 400.*rego_parse_error"):
        server.put_policy("broken", "package broken\n\nallow if {\n")


def test_data_param_and_put_data(opa_bin: str, tmp_path: Path) -> None:
    policy = tmp_path / "roles.rego"
    policy.write_text(POLICY_ROLES, encoding="utf-8")
    with OpaServer(binary=opa_bin, policy_paths=[tmp_path], data={"admins": ["carol"]}) as opa:
        assert opa.query("gateway/roles/admin", {"user": "carol"})["result"] is True
        assert opa.query("gateway/roles/admin", {"user": "dave"})["result"] is False
        opa.put_data("admins", ["dave"])
        assert opa.query("gateway/roles/admin", {"user": "dave"})["result"] is True
        assert opa.query("admins", {})["result"] == ["dave"]


def test_decision_logs_via_extra_args(opa_bin: str, policy_file: Path) -> None:
    with OpaServer(
        binary=opa_bin,
        policy_paths=[policy_file],
        extra_args=["--set=decision_logs.console=true"],
    ) as opa:
        body = opa.query(ALLOW, {"user": "alice"}, params={"metrics": "true"})
        assert body["result"] is True
        assert body["decision_id"]
        assert "metrics" in body
        opa.stop()
        assert body["decision_id"] in opa.read_log()


def test_pause_and_resume(server: OpaServer) -> None:
    server.pause()
    try:
        with pytest.raises(TimeoutError):
            server.query(ALLOW, {"user": "alice"}, timeout=0.5)
        assert server.running
    finally:
        server.resume()
    assert _allowed(server, "alice") is True


def test_kill_and_restart_on_same_port(server: OpaServer) -> None:
    port, pid = server.port, server.pid
    server.kill()
    assert not server.running
    assert server.process.returncode == -9
    with pytest.raises(urllib.error.URLError):
        server.query(ALLOW, {"user": "alice"}, timeout=1.0)
    server.kill()  # idempotent as well

    server.restart()
    assert server.port == port
    assert server.pid != pid
    assert server.running
    assert _allowed(server, "alice") is True


def test_restart_while_running_replaces_process(server: OpaServer) -> None:
    pid = server.pid
    server.restart()
    assert server.pid != pid
    assert _allowed(server, "alice") is True


def test_stop_is_idempotent_and_works_when_paused(server: OpaServer) -> None:
    server.pause()
    server.stop()
    assert not server.running
    assert server.process.returncode is not None
    server.stop()
    server.stop()
    with pytest.raises(RuntimeError, match="not running"):
        server.pause()
    with pytest.raises(RuntimeError, match="not running"):
        server.resume()


def test_stop_before_start_is_noop(opa_bin: str) -> None:
    opa = OpaServer(binary=opa_bin)
    opa.stop()
    opa.close()
    with pytest.raises(RuntimeError, match="not been started"):
        _ = opa.url
    with pytest.raises(RuntimeError, match="not been started"):
        _ = opa.pid
    with pytest.raises(RuntimeError, match="before start"):
        opa.restart()


def test_start_twice_raises(server: OpaServer) -> None:
    with pytest.raises(RuntimeError, match="already running"):
        server.start()


def test_bad_policy_file_fails_start_with_stderr(opa_bin: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.rego"
    bad.write_text("package gateway.authz\n\nallow if {\n", encoding="utf-8")
    opa = OpaServer(binary=opa_bin, policy_paths=[bad])
    with pytest.raises(RuntimeError, match=r"(?s)exited with code 1.*stderr.*rego_parse_error"):
        opa.start()
    assert not opa.running
    opa.close()


def test_missing_binary_fails_start(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="cannot execute OPA binary"):
        OpaServer(binary=tmp_path / "no-such-opa").start()


def test_start_retries_when_port_is_taken(
    opa_bin: str, policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        ports = iter([taken, taken])
        real_free_port = _serving.free_port
        monkeypatch.setattr(
            _opa_server, "free_port", lambda host: next(ports, 0) or real_free_port(host)
        )
        with OpaServer(binary=opa_bin, policy_paths=[policy_file]) as opa:
            assert opa.port != taken
            assert _allowed(opa, "alice") is True
            assert opa.read_log().count("address already in use") == 2


def test_find_opa_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPA_BIN", "/opt/opa/bin/opa")
    assert find_opa_binary() == "/opt/opa/bin/opa"

    monkeypatch.delenv("OPA_BIN")
    fake = tmp_path / "opa"
    fake.write_text("#!/bin/sh\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_opa_binary() == str(fake)

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(LookupError, match="provision-opa"):
        find_opa_binary()


def test_opa_container_without_testcontainers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Force the lazy import to fail so this never needs (or starts) Docker.
    monkeypatch.setitem(sys.modules, "testcontainers.core.container", None)
    container = OpaContainer(policy_paths=["policy"], data={"a": 1})
    with pytest.raises(RuntimeError, match="not been started"):
        _ = container.url
    with pytest.raises(RuntimeError, match="testcontainers"), container:
        pass  # pragma: no cover
    container.stop()
