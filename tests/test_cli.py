"""The gateway command line: `audit verify` exit codes and messages, `check`, and --help."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import function_tool
from gateway.audit import JsonlFileSink, head_path, trail_files
from gateway.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
POLICIES = str(ROOT / "policies")
RECORDS = 5
ALICE = '{"subject": "alice", "roles": ["reader"], "tenant": "acme"}'


KEY = b"cli-test-audit-key-of-32-bytes!!"


def write_trail(
    path: Path, count: int = RECORDS, *, key: bytes | None = KEY, max_bytes: int | None = None
) -> list[dict[str, Any]]:
    with JsonlFileSink(path, fsync="none", key=key, max_bytes=max_bytes) as sink:
        return [sink.submit({"n": n}).result(30) for n in range(1, count + 1)]


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def key_file(tmp_path: Path) -> str:
    path = tmp_path.parent / f"{tmp_path.name}.key"
    path.write_bytes(KEY + b"\n")
    return str(path)


# --- audit verify ---------------------------------------------------------------------------


def test_verify_exits_zero_on_an_intact_trail_and_names_its_last_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_file: str
) -> None:
    path = tmp_path / "audit.jsonl"
    records = write_trail(path)

    actual = run(capsys, "audit", "verify", "--key-file", key_file, str(path))

    expected = f"ok: {path}: 5 records in 1 file(s), last hash {records[-1]['hash']}\n"
    assert actual == (0, expected, "")


def test_verify_without_a_key_warns_that_an_intact_trail_proves_nothing_against_a_writer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path, key=None)

    status, out, err = run(capsys, "audit", "verify", str(path))

    assert status == 0
    assert out.startswith("UNKEYED, intact, proves nothing against a writer: ")
    assert "ok" not in out.split(":")[0]
    assert "WARNING: no key" in err
    assert "proves nothing against anyone who can write the trail" in err


def test_verify_takes_the_key_from_the_service_config_as_the_service_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "audit" / "audit.jsonl"
    write_trail(path)
    (tmp_path / "audit.key").write_bytes(KEY)
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"""
[engine]
policies = {json.dumps(POLICIES)}
[audit]
path = "audit/audit.jsonl"
key_file = "audit.key"
[[auth.api_keys]]
sha256 = "{"0" * 64}"
context = {{ subject = "alice" }}
[tools]
modules = ["tests.test_cli:TOOLS"]
""",
        encoding="utf-8",
    )
    monkeypatch.setenv("GATEWAY_TEST_CLI_AUDIT_KEY", KEY.decode())

    by_config = run(capsys, "audit", "verify", "--config", str(config))
    by_env = run(capsys, "audit", "verify", "--key-env", "GATEWAY_TEST_CLI_AUDIT_KEY", str(path))
    config.write_text(config.read_text().replace("key_file", 'key_env = "UNSET_X"\n#'))
    unset = run(capsys, "audit", "verify", "--config", str(config))

    assert (by_config[0], by_config[1].startswith(f"ok: {path}: 5 records")) == (0, True)
    assert (by_env[0], by_env[1].startswith(f"ok: {path}: 5 records")) == (0, True)
    assert (unset[0], unset[2]) == (
        2,
        "gateway audit verify: audit.key_env: environment variable UNSET_X is not set\n",
    )


def test_a_forger_who_rewrites_a_keyed_trail_without_the_key_fails_verification(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_file: str
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    path.unlink()
    head_path(path).unlink()
    write_trail(path, key=None)  # rewritten and rehashed by someone without the key

    status, _, err = run(capsys, "audit", "verify", "--key-file", key_file, str(path))

    assert (status, err.startswith(f"FAILED: {path}:1: record was modified")) == (1, True)


def _flip(lines: list[bytes]) -> list[bytes]:
    lines = list(lines)
    lines[2] = lines[2].replace(b'"n":3', b'"n":4')
    return lines


# (how the file is changed, the line the message must name, words it must contain)
TAMPERING = [
    pytest.param(_flip, 3, "hash mismatch", id="flip-a-byte"),
    pytest.param(lambda lines: lines[:2] + lines[3:], 3, "sequence 4, expected 3", id="delete"),
    pytest.param(
        lambda lines: [lines[0], lines[2], lines[1], *lines[3:]], 2, "sequence 3", id="swap"
    ),
    pytest.param(
        lambda lines: [*lines[:-1], lines[-1][:10]], 5, "truncated record", id="cut-mid-line"
    ),
    pytest.param(lambda lines: lines[:-1], 5, "record 5 is missing", id="drop-the-last-line"),
]


@pytest.mark.parametrize(("tamper", "line", "words"), TAMPERING)
def test_verify_exits_one_naming_the_first_bad_record(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key_file: str,
    tamper: Callable[[list[bytes]], list[bytes]],
    *,
    line: int,
    words: str,
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    path.write_bytes(b"".join(tamper(lines_of(path))))

    status, out, err = run(capsys, "audit", "verify", "--key-file", key_file, str(path))

    assert (status, out) == (1, "")
    assert err.startswith(f"FAILED: {path}:{line}: ")
    assert words in err
    assert err.endswith(f"(after {line - 1} good records)\n")


def test_verify_with_no_head_does_not_check_for_a_cut_at_a_line_boundary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_file: str
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    path.write_bytes(b"".join(lines_of(path)[:-1]))

    assert run(capsys, "audit", "verify", "--key-file", key_file, "--no-head", str(path))[0] == 0
    assert run(capsys, "audit", "verify", "--key-file", key_file, str(path))[0] == 1


def test_verify_finds_the_rotated_segments_beside_the_active_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_file: str
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path, 20, max_bytes=200)
    files = trail_files(path)

    status, out, _ = run(capsys, "audit", "verify", "--key-file", key_file, str(path))

    assert len(files) > 2
    assert (status, out.startswith(f"ok: {path}: 20 records in {len(files)} file(s)")) == (0, True)


def test_verify_exact_checks_exactly_the_files_given_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_file: str
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path, 20, max_bytes=200)
    files = [str(file) for file in trail_files(path)]
    keyed = ("audit", "verify", "--key-file", key_file, "--exact")

    whole = run(capsys, *keyed, *files)
    gap = run(capsys, *keyed, files[0], *files[2:])
    reordered = run(capsys, *keyed, files[1], files[0], *files[2:])

    assert whole[0] == 0
    assert (gap[0], gap[2].startswith(f"FAILED: {files[2]}:1: sequence")) == (1, True)
    assert (reordered[0], reordered[2].startswith(f"FAILED: {files[1]}:1: sequence")) == (1, True)


def test_verify_uses_the_key_file_for_a_keyed_trail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path, key=b"the key, 16 bytes or more")
    right, wrong = tmp_path.parent / "right.key", tmp_path.parent / "wrong.key"
    right.write_bytes(b"the key, 16 bytes or more\n")
    wrong.write_bytes(b"another key of 16 bytes\n")

    assert run(capsys, "audit", "verify", "--key-file", str(right), str(path))[0] == 0
    status, _, err = run(capsys, "audit", "verify", "--key-file", str(wrong), str(path))
    assert (status, err.startswith(f"FAILED: {path}:1: record was modified")) == (1, True)
    assert run(capsys, "audit", "verify", str(path))[0] == 1


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        pytest.param(["{dir}/absent.jsonl"], "no such file", id="missing-trail"),
        pytest.param(["--exact", "{dir}"], "{dir}", id="directory-as-a-file"),
        pytest.param(["--key-file", "{dir}/absent.key", "{trail}"], "absent.key", id="missing-key"),
        pytest.param(["--key-file", "{dir}/short.key", "{trail}"], "shorter than", id="short-key"),
        pytest.param(["--key-env", "GATEWAY_UNSET_KEY_X", "{trail}"], "not set", id="unset-env"),
        pytest.param([], "name the trail", id="no-trail"),
    ],
)
def test_verify_exits_two_on_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], words: str
) -> None:
    trail = tmp_path / "audit.jsonl"
    write_trail(trail)
    (tmp_path / "short.key").write_bytes(b"short")
    argv = [a.format(dir=tmp_path, trail=trail) for a in arguments]

    status, out, err = run(capsys, "audit", "verify", *argv)

    assert (status, out) == (2, "")
    assert words.format(dir=tmp_path) in err
    assert "short" not in err or "shorter" in err  # a key is never shown


def test_verify_takes_one_key_source(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["audit", "verify", "--key-env", "A", "--key-file", "b", "x"])

    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# --- check ----------------------------------------------------------------------------------


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


#: The tools the test configuration serves (``tools.modules = ["tests.test_cli:TOOLS"]``).
TOOLS = [function_tool(add)]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A service configuration: the shipped policies on the embedded engine, the add tool."""
    # Loading tools puts the config's folder on sys.path; keep that inside this test.
    monkeypatch.setattr(sys, "path", [*sys.path])
    path = tmp_path / "gateway.toml"
    path.write_text(
        f"""
[engine]
kind = "embedded"
policies = {json.dumps(POLICIES)}

[audit]
enabled = false

[[auth.api_keys]]
sha256 = "{"0" * 64}"
context = {{ subject = "alice" }}

[tools]
modules = ["tests.test_cli:TOOLS"]
""",
        encoding="utf-8",
    )
    return str(path)


def test_check_prints_an_allowed_decision_and_exits_zero(
    capsys: pytest.CaptureFixture[str], config: str
) -> None:
    status, out, _ = run(
        capsys,
        "check",
        "--config",
        config,
        "--tool",
        "add",
        "--arguments",
        '{"a":1,"b":2}',
        "--context",
        ALICE,
    )

    answer = json.loads(out)
    assert (status, answer["allow"], answer["code"]) == (0, True, "ok")


def test_check_prints_a_denied_decision_and_exits_one(
    capsys: pytest.CaptureFixture[str], config: str
) -> None:
    status, out, _ = run(
        capsys, "check", "--config", config, "--tool", "add", "--arguments", '{"a":1,"b":2}'
    )

    answer = json.loads(out)
    assert (status, answer["allow"], answer["code"]) == (1, False, "denied")
    assert isinstance(answer["message"], str)


@pytest.mark.parametrize(
    ("options", "code"),
    [
        pytest.param(["--tool", "nope"], "unknown_tool", id="unknown-tool"),
        pytest.param(["--tool", "add", "--arguments", '{"a":"1"}'], "invalid_arguments", id="bad"),
        pytest.param(["--tool", "add", "--arguments", "{"], "invalid_arguments", id="not-json"),
    ],
)
def test_check_prints_a_refused_call_and_exits_two(
    capsys: pytest.CaptureFixture[str], config: str, options: list[str], code: str
) -> None:
    status, out, _ = run(capsys, "check", "--config", config, "--context", ALICE, *options)

    answer = json.loads(out)
    assert (status, answer["allow"], answer["code"]) == (2, False, code)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(["--context", "{"], id="context-not-json"),
        pytest.param(["--context", "[1]"], id="context-not-an-object"),
        pytest.param(["--config", "/nonexistent/gateway.toml"], id="no-config"),
    ],
)
def test_check_exits_two_on_a_usage_error(
    capsys: pytest.CaptureFixture[str], config: str, options: list[str]
) -> None:
    status, out, err = run(
        capsys,
        "check",
        "--config",
        config,
        "--tool",
        "add",
        "--arguments",
        '{"a":1,"b":2}',
        *options,
    )

    assert (status, out) == (2, "")
    assert err.startswith("gateway check: ")


# --- help -----------------------------------------------------------------------------------


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every command path of the parser, the top level first."""
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield from _commands(command, (*path, name))


COMMANDS = list(_commands(build_parser()))


def test_the_command_table_lists_every_documented_command() -> None:
    assert {("audit", "verify"), ("check",), ("serve",)} <= set(COMMANDS)


@pytest.mark.parametrize(
    "command", [pytest.param(c, id=" ".join(c) or "gateway") for c in COMMANDS]
)
def test_every_command_has_help(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*command, "--help"])

    assert caught.value.code == 0
    assert capsys.readouterr().out.startswith(" ".join(("usage: gateway", *command)) + " ")


def test_python_dash_m_gateway_runs_the_command_line() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "gateway", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )

    assert (completed.returncode, completed.stdout.startswith("usage: gateway ")) == (0, True)


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])

    assert caught.value.code == 2
    assert "required: command" in capsys.readouterr().err


# --- gate -----------------------------------------------------------------------------------


async def unconfigured(query: str) -> str:
    """A tool the shipped policy data knows nothing about."""
    return query


#: A served tool with no settings in the policy data: every call would be denied.
UNKNOWN_TOOLS = [function_tool(add), function_tool(unconfigured)]


def test_gate_passes_a_configuration_the_policy_data_covers(
    capsys: pytest.CaptureFixture[str], config: str
) -> None:
    status, out, _ = run(capsys, "gate", "--config", config)

    assert status == 0
    assert out.splitlines()[-1].startswith("1 tools checked: 0 error(s)")


def test_gate_fails_naming_a_served_tool_the_policy_data_cannot_decide(
    capsys: pytest.CaptureFixture[str], config: str
) -> None:
    path = Path(config)
    path.write_text(
        path.read_text(encoding="utf-8").replace(
            "tests.test_cli:TOOLS", "tests.test_cli:UNKNOWN_TOOLS"
        ),
        encoding="utf-8",
    )

    status, out, _ = run(capsys, "gate", "--config", config)

    assert status == 1
    assert any(line.startswith("error: unconfigured: ") for line in out.splitlines())
    assert out.splitlines()[-1].startswith("2 tools checked: ")


def test_gate_needs_a_policy_folder_for_an_opa_engine(
    capsys: pytest.CaptureFixture[str], config: str
) -> None:
    path = Path(config)
    text = path.read_text(encoding="utf-8")
    _, _, rest = text.partition("[audit]")
    path.write_text(
        '[engine]\nkind = "opa"\nurl = "http://127.0.0.1:1"\n\n[audit]' + rest, encoding="utf-8"
    )

    status, _, err = run(capsys, "gate", "--config", config)

    assert status == 2
    assert "--policies" in err


# --- published keys on a listener that is not loopback ------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["serve", "--host", "0.0.0.0"], id="serve"),  # noqa: S104
        pytest.param(["mcp", "--transport", "http", "--host", "::"], id="mcp-http"),
    ],
)
def test_serving_a_published_key_beyond_loopback_is_refused_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, argv: list[str]
) -> None:
    path = Path(config)
    demo = hashlib.sha256(b"demo-key-alice").hexdigest()
    path.write_text(path.read_text(encoding="utf-8").replace("0" * 64, demo), encoding="utf-8")

    status, out, err = run(capsys, *argv, "--config", config)

    assert (status, out) == (2, "")
    assert "auth.api_keys[0]: this API key is published" in err
    assert "demo-key-alice" not in err


@pytest.mark.integration
def test_a_reader_that_goes_away_ends_the_command_quietly_with_the_pipe_status(
    config: str,
) -> None:
    # gateway check ... | head -1: the reader closes the pipe before the answer is written.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "gateway",
                "check",
                "--config",
                config,
                "--tool",
                "add",
                "--arguments",
                '{"a":1,"b":2}',
                "--context",
                ALICE,
            ],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        os.close(write_end)

    assert (completed.returncode, completed.stderr) == (128 + 13, "")


def test_verify_of_a_trail_without_its_head_says_its_end_is_unchecked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key_file: str
) -> None:
    path = tmp_path / "audit.jsonl"
    write_trail(path)
    head_path(path).unlink()

    status, out, _ = run(capsys, "audit", "verify", "--key-file", key_file, str(path))

    assert status == 0
    assert out.startswith("ok: ")
    assert out.rstrip().endswith(f"its end is unchecked: no head file {head_path(path).name}")
