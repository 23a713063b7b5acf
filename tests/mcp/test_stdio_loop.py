"""``gateway mcp`` runs on the event loop of ``gateway serve``: uvloop.

A real process: the gateway (``python -m gateway mcp``) and the test upstream it starts.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.mcp.conftest import REPO, ConfigWriter
from tests.mcp.surfaces import initialize


def test_the_stdio_gateway_serves_on_a_uvloop_event_loop(write_config: ConfigWriter) -> None:
    config = write_config()
    command = [sys.executable, "-m", "gateway", "mcp", "--config", str(config)]
    gateway = subprocess.run(
        [*command, "--log-level", "debug"],
        cwd=REPO,
        env=dict(os.environ),
        input=initialize(1) + b"\n",  # then stdin ends: the session ends
        capture_output=True,
        timeout=120,
        check=False,
    )

    stderr = gateway.stderr.decode("utf-8", "replace")
    assert gateway.returncode == 0, stderr
    assert "on stdio" in stderr  # it started serving
    assert "event loop: uvloop" in stderr
