"""A real ``redis-server`` on 127.0.0.1 for tests: random port, killed, paused and restarted."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from gateway.testing._serving import free_port


def find_redis_binary() -> str:
    """The ``redis-server`` to run: ``$REDIS_BIN`` if set, else the one on ``PATH``.

    Raises:
        RuntimeError: none found (run ``scripts/provision-redis``); tests that need one
            fail, never skip.
    """
    env = os.environ.get("REDIS_BIN")
    if env:
        return env
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if found is None:
        raise RuntimeError(
            "no redis-server found: set REDIS_BIN, or run scripts/provision-redis "
            '(REDIS_BIN="$(scripts/provision-redis)")'
        )
    return found


class RedisServer:
    """A ``redis-server`` child process on 127.0.0.1 and a port of its own.

    Without ``persistent`` nothing is written to disk (no RDB, no AOF): a restart starts
    empty. With it, every write is in an append-only file fsynced before the reply
    (``appendfsync always``), so a write the client saw acknowledged survives :meth:`kill`.

    Use as a context manager; :meth:`kill` (SIGKILL), :meth:`pause` (SIGSTOP),
    :meth:`resume` (SIGCONT) and :meth:`restart` (same port, same data directory).
    """

    def __init__(
        self, *, binary: str | None = None, persistent: bool = False, port: int | None = None
    ) -> None:
        self._binary = binary or find_redis_binary()
        self._persistent = persistent
        self._port = port or free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="gateway-redis-"))
        self._process: subprocess.Popen[bytes] | None = None
        self._paused = False

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self._port}/0"

    def _arguments(self) -> list[str]:
        args = [
            self._binary,
            "--bind", "127.0.0.1",
            "--port", str(self._port),
            "--dir", str(self._dir),
            "--save", "",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self._dir / "redis.log"),
            "--protected-mode", "yes",
        ]  # fmt: skip
        if self._persistent:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        return args

    def start(self, *, timeout: float = 10.0) -> None:
        """Start it and wait until it answers ``PING``."""
        if self._process is not None and self._process.poll() is None:
            return
        self._process = subprocess.Popen(  # noqa: S603 - our own argument list
            self._arguments(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        self._paused = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self._process.returncode}")
            if self.ping():
                return
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("redis-server did not answer in time")

    def ping(self) -> bool:
        """Whether it answers ``PING`` within half a second."""
        try:
            with socket.create_connection(("127.0.0.1", self._port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: it dies at once (an unpersisted write is lost; a persisted one is not)."""
        process = self._process
        if process is None:
            return
        if self._paused:
            process.send_signal(signal.SIGCONT)
            self._paused = False
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        self._process = None

    def pause(self) -> None:
        """SIGSTOP: it holds its connections and answers nothing until :meth:`resume`."""
        if self._process is not None and not self._paused:
            self._process.send_signal(signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self._process is not None and self._paused:
            self._process.send_signal(signal.SIGCONT)
            self._paused = False

    def restart(self) -> None:
        """Kill it and start it again on the same port and data directory."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """Kill it and remove its data directory."""
        self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
