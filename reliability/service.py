"""The HTTP service of the suite, on a real uvicorn in a background thread.

It is built from a configuration exactly as ``gateway serve`` builds it, and served on
127.0.0.1 (port 0).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from gateway.server import Service, build_service, parse_config
from gateway.testing import LiveServer
from reliability.opa import POLICIES, ROOT

#: API keys of the suite's service and the caller context each one stands for. The shipped
#: policies allow alice (reader) to add and carol (treasurer) to pay from acme's accounts,
#: and deny bob (clerk) to add.
API_KEYS: Final[Mapping[str, Mapping[str, Any]]] = {
    "reliability-key-alice": {"subject": "alice", "roles": ["reader"], "tenant": "acme"},
    "reliability-key-bob": {"subject": "bob", "roles": ["clerk"], "tenant": "globex"},
    "reliability-key-carol": {"subject": "carol", "roles": ["treasurer"], "tenant": "acme"},
}


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
        "audit": {"enabled": True, "path": str(audit_path), "fsync": fsync, "unkeyed": True},
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


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve ``app`` for the block; yields the base URL."""
    server = LiveServer(app).start()
    try:
        yield server.url
    finally:
        server.stop()
