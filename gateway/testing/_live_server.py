"""LiveServer: a real uvicorn server for an ASGI app on a free loopback port, in a thread."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any, Final

import uvicorn

from gateway.service import server_stack

_TIMEOUT: Final = 20.0


class LiveServer:
    """Serve an ASGI app (e.g. ``GatewayApp``) on ``127.0.0.1`` at a free port.

    ``start()`` returns once the port is bound (``url`` is then set); ``stop()`` runs the
    app's shutdown (lifespan) and joins the thread. Also a context manager.

    Args:
        app: the ASGI application.
        timeout: the most seconds start and stop may each take.
    """

    def __init__(self, app: Any, *, timeout: float = _TIMEOUT) -> None:
        # The stack `gateway serve` runs on (uvloop, httptools).
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="on",
            access_log=False,
            **server_stack(),
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="gateway-live", daemon=True)
        self._timeout = timeout
        self.url = ""

    def start(self) -> LiveServer:
        """Start and wait until the port is bound.

        Raises:
            RuntimeError: uvicorn exited during start-up or did not start in time.
        """
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("uvicorn exited during startup (see the captured log)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn did not start within {self._timeout} s")
            time.sleep(0.002)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        """Stop (running the app's shutdown) and join the thread; idempotent.

        Raises:
            RuntimeError: uvicorn did not stop in time.
        """
        if not self._thread.is_alive():
            return
        self._server.should_exit = True
        self._thread.join(self._timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"uvicorn did not stop within {self._timeout} s")

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
