"""The command line: ``gateway serve``, ``gateway check``, ``--version`` and ``--help``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from gateway.cli import main
from gateway.testing import OpaServer, free_port, wait_until_healthy
from tests.server.conftest import (
    ALICE,
    EXAMPLE_CONFIG,
    REPO_ROOT,
    gateway_toml,
    read_audit,
)

ALICE_CONTEXT: Final = '{"subject": "alice", "roles": ["reader"], "tenant": "acme"}'
BOB_CONTEXT: Final = '{"subject": "bob", "roles": ["clerk"], "tenant": "globex"}'
ANSWER_KEYS: Final = {"allow", "code", "message", "reasons", "decision_id"}


def check(
    capsys: pytest.CaptureFixture[str], *args: str, config: Path = EXAMPLE_CONFIG
) -> tuple[int, dict[str, Any]]:
    """Run ``gateway check`` in process; the exit status and the printed JSON."""
    capsys.readouterr()
    status = main(["check", "--config", str(config), *args])
    out = capsys.readouterr().out
    answer: dict[str, Any] = json.loads(out)
    assert set(answer) >= ANSWER_KEYS, answer
    return status, answer


# -- gateway check --------------------------------------------------------------------------


def test_check_allowed_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    status, answer = check(
        capsys, "--tool", "add", "--arguments", '{"a": 1, "b": 2}', "--context", ALICE_CONTEXT
    )
    assert status == 0
    assert answer["allow"] is True
    assert answer["code"] == "ok"
    assert answer["message"] == "the call is authorized"
    assert answer["reasons"] == ['rbac: tool "add" granted by role(s) reader']
    assert isinstance(answer["decision_id"], str)


def test_check_denied_exits_1_with_message_and_reasons(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, answer = check(
        capsys,
        "--tool",
        "pay",
        "--arguments",
        '{"from_account": "acct-globex-001", "to_account": "x", "amount": 5000}',
        "--context",
        BOB_CONTEXT,
    )
    assert status == 1
    assert answer["allow"] is False
    assert answer["code"] == "denied"
    assert answer["message"] == "the amount exceeds what the caller's roles allow"
    assert answer["reasons"]
    assert all(reason.startswith("limits:") for reason in answer["reasons"])
    assert isinstance(answer["decision_id"], str)


def test_check_without_context_is_denied(capsys: pytest.CaptureFixture[str]) -> None:
    status, answer = check(capsys, "--tool", "add", "--arguments", '{"a": 1, "b": 2}')
    assert status == 1
    assert answer["message"] == "caller identity is required"


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        ("add", '{"a": "one", "b": 2}', "invalid_arguments"),
        ("add", '{"a": 1}', "invalid_arguments"),
        ("add", "not json", "invalid_arguments"),
        ("delete_everything", "{}", "unknown_tool"),
    ],
)
def test_check_invalid_calls_exit_2(
    capsys: pytest.CaptureFixture[str], tool: str, arguments: str, code: str
) -> None:
    status, answer = check(
        capsys, "--tool", tool, "--arguments", arguments, "--context", ALICE_CONTEXT
    )
    assert status == 2
    assert answer["allow"] is False
    assert answer["code"] == code
    assert answer["message"]
    assert answer["reasons"] == []
    assert answer["decision_id"] is None


def test_check_without_a_decision_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, undefined_policy_dir: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        gateway_toml(
            engine="embedded",
            audit_path=tmp_path / "audit.jsonl",
            policies=undefined_policy_dir,
            tools=["examples.example_tools:TOOLS"],
        ),
        encoding="utf-8",
    )
    status, answer = check(
        capsys, "--tool", "add", "--arguments", "{}", "--context", "{}", config=config
    )
    assert status == 2
    assert answer["allow"] is False
    assert answer["code"] == "invalid_arguments"
    status, answer = check(
        capsys,
        "--tool",
        "add",
        "--arguments",
        '{"a": 1, "b": 2}',
        "--context",
        ALICE_CONTEXT,
        config=config,
    )
    assert status == 2
    assert answer["code"] == "undefined_decision"
    assert answer["decision_id"] is None
    assert not (tmp_path / "audit.jsonl").exists(), "check never writes the audit trail"


def test_check_against_a_real_opa(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, shared_opa: OpaServer
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        gateway_toml(
            engine="opa",
            audit_path=tmp_path / "audit.jsonl",
            opa_url=shared_opa.url,
            tools=["examples.example_tools:TOOLS"],
        ),
        encoding="utf-8",
    )
    args = ("--tool", "add", "--arguments", '{"a": 1, "b": 2}')
    status, answer = check(capsys, *args, "--context", ALICE_CONTEXT, config=config)
    assert (status, answer["allow"]) == (0, True)
    assert isinstance(answer["decision_id"], str)
    status, answer = check(capsys, *args, "--context", BOB_CONTEXT, config=config)
    assert (status, answer["code"]) == (1, "denied")
    assert answer["message"] == "the caller's roles do not permit this tool"


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ("{not json", "--context is not valid JSON"),
        ('["alice"]', "--context must be a JSON object"),
    ],
)
def test_check_with_a_bad_context_exits_2(
    capsys: pytest.CaptureFixture[str], context: str, message: str
) -> None:
    capsys.readouterr()
    command = ["check", "--config", str(EXAMPLE_CONFIG), "--tool", "add"]
    status = main([*command, "--arguments", '{"a": 1, "b": 2}', "--context", context])
    assert status == 2
    assert message in capsys.readouterr().err


def test_check_with_an_invalid_config_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        gateway_toml(engine="wasm", audit_path=tmp_path / "audit.jsonl", opa_url="x"),
        encoding="utf-8",
    )
    capsys.readouterr()
    assert main(["check", "--config", str(config), "--tool", "add"]) == 2
    assert "engine.kind" in capsys.readouterr().err


def test_check_with_a_broken_policy_exits_2_with_the_engine_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "main.rego").write_text("package gateway.authz\n\ndecision := {", "utf-8")
    config = tmp_path / "gateway.toml"
    config.write_text(
        gateway_toml(
            engine="embedded",
            audit_path=tmp_path / "audit.jsonl",
            policies=policies,
            tools=["examples.example_tools:TOOLS"],
        ),
        encoding="utf-8",
    )
    capsys.readouterr()
    command = ["check", "--config", str(config), "--tool", "add", "--arguments", '{"a":1,"b":2}']
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith("gateway check: engine.policies: the policy does not load"), err
    assert "main.rego" in err


# -- gateway serve --------------------------------------------------------------------------


def invalid_configs(tmp_path: Path) -> list[tuple[str, str]]:
    base = gateway_toml(
        engine="embedded",
        audit_path=tmp_path / "audit.jsonl",
        policies=REPO_ROOT / "policies",
        tools=["examples.example_tools:TOOLS"],
    )
    a_file = tmp_path / "a-file"  # an audit path below a regular file cannot be created
    a_file.write_text("", encoding="utf-8")
    broken_policy = tmp_path / "broken-policy"
    broken_policy.mkdir()
    (broken_policy / "p.rego").write_text("package gateway.authz\n\ndecision := {", "utf-8")
    return [
        (base.replace('kind = "embedded"', 'kind = "wasm"'), "engine.kind"),
        (base.replace("max_body_bytes = 65536", "max_body_bytes = 1"), "server.max_body_bytes"),
        (base.replace("[server]", "[server]\nport = 99999"), "server.port"),
        (base.replace("[server]", "[server]\nthreads = 4"), "server.threads: unknown key"),
        (base.replace("[server]", "[server]\nworkers = 0"), "server.workers: must be 1-64"),
        (base.replace('fsync = "always"', 'fsync = "never"'), "audit.fsync"),
        (base.split("[[auth.api_keys]]")[0], "auth"),
        (base.replace("sha256 = ", 'sha256 = "nothex" # ', 1), "auth.api_keys[0].sha256"),
        (
            base.replace("examples.example_tools:TOOLS", "gateway_no_such_module:TOOLS"),
            "tools.modules",
        ),
        (base.replace("examples.example_tools:TOOLS", "no_colon"), "tools.modules"),
        (base + "[auth.jwt]\nalgorithms = ['HS256']\n", "auth.jwt"),
        (base.replace("[engine]", "[engine]\ndecision_path = 'a b'"), "engine.decision_path"),
        (
            base.replace(json.dumps(str(REPO_ROOT / "policies")), json.dumps(str(broken_policy))),
            "engine.policies",
        ),
        ("this is [not toml", "config: "),
        (
            base.replace(json.dumps(str(tmp_path / "audit.jsonl")), json.dumps(str(a_file / "a"))),
            "audit.path: cannot open",
        ),
    ]


def test_serve_with_an_invalid_config_exits_2_naming_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    for text, named in invalid_configs(tmp_path):
        config.write_text(text, encoding="utf-8")
        capsys.readouterr()
        assert main(["serve", "--config", str(config)]) == 2, named
        err = capsys.readouterr().err
        assert err.startswith(f"gateway serve: {named}"), (named, err)
        assert "Traceback" not in err
        if named == "engine.policies":  # the engine's own message says what is wrong, where
            assert "p.rego" in err, err
    capsys.readouterr()
    assert main(["serve", "--config", str(tmp_path / "missing.toml")]) == 2
    assert capsys.readouterr().err.startswith("gateway serve: config: cannot read")


def test_serve_runs_the_service_until_stopped(
    tmp_path: Path, policy_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit_path = tmp_path / "audit" / "audit.jsonl"
    config = tmp_path / "gateway.toml"
    config.write_text(
        gateway_toml(
            engine="embedded",
            audit_path=audit_path,
            policies=policy_dir,
            tools=["examples.example_tools:TOOLS"],
        ).replace("[server]", "[server]\nport = 1"),
        encoding="utf-8",
    )
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        # The port is bound at once and answered once the policies are compiled (opa build,
        # which takes tens of seconds on a loaded machine): a bound on start-up, not a timing.
        wait_until_healthy(url, process, log=log, timeout=120)
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.get("/readyz").json() == {"ready": True}
            allowed = http.post(
                "/v1/calls",
                json={"id": "1", "name": "add", "arguments": {"a": 2, "b": 2}},
                headers={"X-API-Key": ALICE},
            )
            assert allowed.status_code == 200, allowed.text
            assert allowed.json()["output"]["text"] == "4"
            invalid = http.post(
                "/v1/calls",
                json={"id": "2", "name": "pay", "arguments": '{"amount": 1}'},
                headers={"X-API-Key": ALICE},
            )
            assert invalid.status_code == 400
            refused = http.post("/v1/calls", json={"id": "3", "name": "add", "arguments": {}})
            assert refused.status_code == 401
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert process.wait(timeout=20) in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert f"serving 6 tools on http://127.0.0.1:{port}" in log.read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["audit", "verify", "--config", str(config)]) == 0
    assert [r["call_id"] for r in read_audit(audit_path)] == ["1", "1", "2"]


def test_serve_on_a_port_in_use_exits_2_naming_it_before_building_anything(
    tmp_path: Path, policy_dir: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        gateway_toml(
            engine="embedded",
            audit_path=tmp_path / "audit" / "audit.jsonl",
            policies=policy_dir,
            tools=["examples.example_tools:TOOLS"],
        ),
        encoding="utf-8",
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "serve", "--config", str(config),
             "--host", "127.0.0.1", "--port", str(port)],
            capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip

    assert done.returncode == 2
    assert done.stderr.startswith(f"gateway serve: cannot listen on 127.0.0.1:{port}: ")
    assert "serving" not in done.stderr
    # Nothing was built: the audit trail was never opened.
    assert not (tmp_path / "audit" / "audit.jsonl").exists()


# -- --version and --help -------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.strip() == "gateway 0.1.0"


@pytest.mark.parametrize(
    "command", [[], ["serve"], ["check"], ["audit"], ["audit", "verify"]], ids=" ".join
)
def test_help_everywhere(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*command, "--help"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.startswith("usage: gateway")


def test_a_missing_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    with pytest.raises(SystemExit) as caught:
        main(["serve"])
    assert caught.value.code == 2
    assert "--config" in capsys.readouterr().err
