"""``gateway mcp`` stops on SIGINT or SIGTERM: upstreams closed, exit 0, no traceback.

Real processes: the gateway (``python -m gateway mcp``) and the test upstream it starts.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcp.conftest import REPO, ConfigWriter
from tests.mcp.surfaces import initialize
from tests.mcp.upstream_server import read_record


def _events(record: Path) -> list[str]:
    return [entry["event"] for entry in read_record(record)]


def _command(config: Path, transport: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gateway",
        "mcp",
        "--config",
        str(config),
        "--transport",
        transport,
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_stdio_gateway_cleanly_with_exit_0(
    write_config: ConfigWriter, record: Path, signum: signal.Signals
) -> None:
    config = write_config()
    gateway = subprocess.Popen(
        _command(config, "stdio"),
        cwd=REPO,
        env=dict(os.environ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert gateway.stdin is not None
        assert gateway.stdout is not None
        gateway.stdin.write(initialize(1) + b"\n")
        gateway.stdin.flush()
        answer = json.loads(gateway.stdout.readline())  # serving: started and answering
        assert answer["id"] == 1
        assert "result" in answer

        gateway.send_signal(signum)  # stdin stays open: the signal alone ends it
        _, stderr = gateway.communicate(timeout=60)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()

    text = stderr.decode("utf-8", "replace")
    assert gateway.returncode == 0, text
    assert "Traceback" not in text
    assert _events(record) == ["start", "stop"]  # the upstream was closed, not killed


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_http_gateway_cleanly_with_exit_0(
    write_config: ConfigWriter, record: Path, signum: signal.Signals
) -> None:
    config = write_config()
    port = _free_port()
    gateway = subprocess.Popen(
        [*_command(config, "http"), "--host", "127.0.0.1", "--port", str(port), "--log-level=info"],
        cwd=REPO,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []
    try:
        assert gateway.stderr is not None
        for raw in gateway.stderr:
            lines.append(raw.decode("utf-8", "replace"))
            if "Application startup complete" in lines[-1]:
                break
        gateway.send_signal(signum)
        _, rest = gateway.communicate(timeout=60)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()

    text = "".join(lines) + rest.decode("utf-8", "replace")
    assert gateway.returncode == 0, text
    assert "Traceback" not in text
    assert _events(record) == ["start", "stop"]
