"""``gateway serve`` with ``server.workers``: several processes, each with its own audit chain."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx
import pytest

from gateway.cli import main
from gateway.server import check_workers, worker_audit_path, worker_config
from gateway.service import ConfigError, parse_config
from gateway.service._config_models import ConfigFile, keys_of
from gateway.testing import RedisServer, free_port
from tests.server.conftest import ALICE, REPO_ROOT

BUNDLE: Final = REPO_ROOT / "bundles" / "policies.tar.gz"
#: Whether the configuration has session and quota state (``[state]``), which several
#: workers must keep in Redis.
HAS_STATE: Final = "state" in keys_of(ConfigFile)
STARTUP_S: Final = 120.0  # two workers each load the engine; slow on a loaded machine


def _config_text(
    folder: Path,
    port: int,
    workers: int,
    *,
    state: str = 'backend = "redis"\nurl = "redis://127.0.0.1:1/0"',
) -> str:
    digest = hashlib.sha256(ALICE.encode()).hexdigest()
    return f"""
[engine]
kind = "embedded"
bundle = {json.dumps(str(BUNDLE))}

[audit]
path = {json.dumps(str(folder / "audit.jsonl"))}
fsync = "batch"
key_file = {json.dumps(str(folder / ".audit.key"))}
generate_key = true

[server]
host = "127.0.0.1"
port = {port}
workers = {workers}

{"[state]" if HAS_STATE else ""}
{state if HAS_STATE else ""}

[[auth.api_keys]]
sha256 = "{digest}"
context = {{ subject = "alice", roles = ["reader"], tenant = "acme" }}

[tools]
modules = ["examples.example_tools:TOOLS"]
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _serving(pid: int) -> list[int]:
    # The worker processes: the children that mapped uvicorn's HTTP parser.
    workers = []
    for child in _children(pid):
        try:
            if "httptools/parser" in Path(f"/proc/{child}/maps").read_text():
                workers.append(child)
        except OSError:
            continue
    return workers


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    # The workers share their session and quota state in a real Redis.
    with RedisServer() as redis:
        yield from _serve_two(tmp_path, f'backend = "redis"\nurl = "{redis.url}"')


def _serve_two(folder: Path, state: str) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    tmp_path = folder
    port = free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(_config_text(tmp_path, port, 2, state=state), encoding="utf-8")
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while len(_serving(process.pid)) < 2 or not _ready(url):
            assert process.poll() is None, log.read_text(encoding="utf-8")
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.1)
        yield process, url, tmp_path
    finally:
        # The workers first: once the parent is gone they are no longer its children.
        for pid in _children(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_worker_n_writes_the_audit_path_with_n_before_its_suffix() -> None:
    assert worker_audit_path(Path("/var/log/audit.jsonl"), 1) == Path("/var/log/audit.1.jsonl")
    assert worker_audit_path(Path("/var/log/audit.jsonl"), 12) == Path("/var/log/audit.12.jsonl")
    assert worker_audit_path(Path("/var/log/trail"), 2) == Path("/var/log/trail.2")


def test_a_workers_configuration_differs_only_in_its_audit_chain(tmp_path: Path) -> None:
    config = parse_config(_toml(tmp_path, 3), base=tmp_path)

    second = worker_config(config, 2)

    assert second.audit.path == tmp_path / "audit.2.jsonl"
    assert second.server == config.server
    assert second.engine == config.engine
    assert second.auth == config.auth


def _toml(folder: Path, workers: int) -> dict[str, object]:
    return tomllib.loads(_config_text(folder, 8080, workers))


@pytest.mark.parametrize("workers", [0, -1, 65], ids=["zero", "negative", "over-64"])
def test_a_worker_count_outside_1_to_64_is_refused(tmp_path: Path, workers: int) -> None:
    with pytest.raises(ConfigError, match=r"server\.workers: must be 1-64"):
        parse_config(_toml(tmp_path, workers), base=tmp_path)


@pytest.mark.skipif(not HAS_STATE, reason="this configuration has no [state] table")
def test_several_workers_with_session_and_quota_state_in_memory_are_refused(
    tmp_path: Path,
) -> None:
    # Each worker would count its own quotas: a quota of N calls would allow N per worker.
    data = tomllib.loads(_config_text(tmp_path, 8080, 2, state='backend = "memory"'))
    with pytest.raises(ConfigError, match=r'server\.workers: .*state\.backend = "redis"'):
        check_workers(parse_config(data, base=tmp_path))
    data = tomllib.loads(_config_text(tmp_path, 8080, 2, state=""))
    with pytest.raises(ConfigError, match=r"server\.workers"):
        check_workers(parse_config(data, base=tmp_path))


def test_several_workers_with_an_approval_store_are_refused(tmp_path: Path) -> None:
    text = _config_text(tmp_path, 8080, 2) + (
        f"\n[approvals]\nenabled = true\npath = {json.dumps(str(tmp_path / 'approvals.json'))}\n"
    )
    with pytest.raises(ConfigError, match=r"server\.workers: .*\[approvals\]"):
        check_workers(parse_config(tomllib.loads(text), base=tmp_path))


def test_one_worker_may_keep_its_state_in_memory(tmp_path: Path) -> None:
    data = tomllib.loads(_config_text(tmp_path, 8080, 1, state='backend = "memory"'))

    check_workers(parse_config(data, base=tmp_path))


@pytest.mark.skipif(not HAS_STATE, reason="this configuration has no [state] table")
def test_serve_refuses_several_workers_with_state_in_memory_before_starting_any(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(_config_text(tmp_path, 8080, 2, state=""), encoding="utf-8")

    assert main(["serve", "--config", str(config)]) == 2
    assert 'state.backend = "redis"' in capsys.readouterr().err
    assert not list(tmp_path.glob("audit*"))


def test_one_worker_is_the_default(tmp_path: Path) -> None:
    data = _toml(tmp_path, 1)
    server = data["server"]
    assert isinstance(server, dict)
    del server["workers"]

    assert parse_config(data, base=tmp_path).server.workers == 1


def test_two_workers_serve_calls_each_on_its_own_audit_chain_and_stop_on_sigterm(
    served: tuple[subprocess.Popen[bytes], str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    process, url, folder = served
    with httpx.Client(base_url=url, timeout=10, headers={"X-API-Key": ALICE}) as http:
        for index in range(40):
            answer = http.post(
                "/v1/calls",
                json={"id": str(index), "name": "add", "arguments": {"a": index, "b": 1}},
                # A fresh connection each time, so that both workers accept some.
                headers={"Connection": "close"},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["output"]["text"] == str(index + 1)

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0

    chains = [folder / "audit.1.jsonl", folder / "audit.2.jsonl"]
    assert not (folder / "audit.jsonl").exists()
    ids: list[str] = []
    for chain in chains:
        ids += [json.loads(line)["call_id"] for line in chain.read_text().splitlines()]
    # Every call has its decision and outcome records, in one chain or the other.
    assert sorted(ids) == sorted([str(index) for index in range(40)] * 2)
    # Each chain verifies on its own, with the service's one key.
    for chain in chains:
        capsys.readouterr()
        assert main(["audit", "verify", "--config", str(folder / "gateway.toml"), str(chain)]) == 0


def test_a_worker_that_dies_stops_the_service_with_a_failure_status(
    served: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    process, _, _ = served
    first, second = _serving(process.pid)

    os.kill(first, signal.SIGKILL)

    assert process.wait(timeout=30) == 1
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)
