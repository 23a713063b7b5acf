"""Helpers for tests that start a server process: a free loopback port, waiting for health."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_healthy(
    url: str,
    process: subprocess.Popen[bytes],
    *,
    log: Path | None = None,
    timeout: float = 60.0,
    path: str = "/healthz",
) -> None:
    """Poll ``GET url+path`` until it answers 200 while ``process`` runs.

    The timeout bounds start-up (a server compiling policies on a loaded machine may take
    tens of seconds); it is not a timing assertion.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8080``.
        process: the server process; its exit ends the wait.
        log: the file the process writes its output to, quoted in the error.
        timeout: the most seconds to wait.
        path: the health path.

    Raises:
        RuntimeError: the process exited first, or ``path`` did not answer 200 in time;
            the message holds the log, if any.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"the server exited with {process.returncode} before {path} answered"
                + _log_text(log)
            )
        if _answers_200(f"{url}{path}"):
            return
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{path} did not answer 200 within {timeout} s" + _log_text(log))
        time.sleep(0.05)


def _answers_200(url: str) -> bool:
    # urllib, not httpx: gateway.testing needs only the gateway's own dependencies.
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:  # noqa: S310 - http://host:port
            return bool(answer.status == 200)
    except urllib.error.HTTPError as err:
        err.close()
        return False
    except OSError:
        return False


def _log_text(log: Path | None) -> str:
    if log is None:
        return ""
    try:
        return "\n" + log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
