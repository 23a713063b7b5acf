"""The HTTP service of the suite, on a real uvicorn in a background thread.

It is built from a configuration exactly as ``gateway serve`` builds it, and served on
127.0.0.1 (port 0).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import uvicorn

from gateway.server import Service, build_service, parse_config
from reliability.opa import POLICIES, ROOT

#: API keys of the suite's service and the caller context each one stands for. The shipped
#: policies allow alice (reader) to add and carol (treasurer) to pay from acme's accounts,
#: and deny bob (clerk) to add.
API_KEYS: Final[Mapping[str, Mapping[str, Any]]] = {
    "reliability-key-alice": {"subject": "alice", "roles": ["reader"], "tenant": "acme"},
    "reliability-key-bob": {"subject": "bob", "roles": ["clerk"], "tenant": "globex"},
    "reliability-key-carol": {"subject": "carol", "roles": ["treasurer"], "tenant": "acme"},
}

_START_TIMEOUT: Final = 20.0
_STOP_TIMEOUT: Final = 20.0


def service_config(
    *,
    audit_path: Path,
    opa_url: str | None = None,
    policies: Path = POLICIES,
    timeout_s: float = 1.0,
    fsync: str = "always",
    max_body_bytes: int = 2 * 1024 * 1024,
) -> dict[str, Any]:
    """A decoded configuration: the embedded engine on ``policies``, or OPA at ``opa_url``."""
    engine: dict[str, Any] = (
        {"kind": "embedded", "policies": str(policies)}
        if opa_url is None
        else {"kind": "opa", "url": opa_url, "revision_interval_s": 1.0}
    )
    engine["timeout_s"] = timeout_s
    return {
        "engine": engine,
        "cache": {"enabled": True, "max_ttl_s": 30},
        "audit": {"enabled": True, "path": str(audit_path), "fsync": fsync},
        "server": {"host": "127.0.0.1", "port": 0, "max_body_bytes": max_body_bytes},
        "auth": {
            "api_keys": [
                {"sha256": hashlib.sha256(key.encode()).hexdigest(), "context": dict(context)}
                for key, context in API_KEYS.items()
            ]
        },
        "tools": {"modules": ["reliability.tools:TOOLS"]},
    }


def build(config: Mapping[str, Any]) -> Service:
    """The whole service, assembled exactly as ``gateway serve`` assembles it."""
    return build_service(parse_config(config, base=ROOT))


class LiveServer:
    """uvicorn serving an ASGI app on a free port of 127.0.0.1, in a thread (lifespan on)."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", access_log=False
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)
        self.url = ""

    def start(self) -> LiveServer:
        """Start and wait until the port is bound.

        Raises:
            RuntimeError: uvicorn exited or did not start in time.
        """
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("uvicorn exited during startup")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn did not start within {_START_TIMEOUT} s")
            time.sleep(0.005)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        """Stop (the lifespan closes the engine and flushes the audit trail).

        Raises:
            RuntimeError: uvicorn did not stop in time.
        """
        if not self._thread.is_alive():
            return
        self._server.should_exit = True
        self._thread.join(_STOP_TIMEOUT)
        if self._thread.is_alive():
            raise RuntimeError(f"uvicorn did not stop within {_STOP_TIMEOUT} s")


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve ``app`` for the block; yields the base URL."""
    server = LiveServer(app).start()
    try:
        yield server.url
    finally:
        server.stop()
