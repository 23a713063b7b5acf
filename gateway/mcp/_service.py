"""The MCP service assembled from a configuration: policy, audit, tools, upstreams, front.

It serves the configured ``tools.modules`` and the tools of every ``[[mcp.upstreams]]``
server through one :class:`~gateway.service.Gateway` (one authorizer, one audit trail).
Whenever an upstream's tool list changes (:meth:`McpService.refresh`, or a reconnection that
finds a different list), the gateway is rebuilt from the current tools and the front
switches to it; calls already in flight finish on the gateway they started on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Final, Literal, Self, TextIO

import uvicorn

from gateway._contract import Tool
from gateway.mcp._front import McpFront
from gateway.mcp._sessions import SessionTable
from gateway.mcp._upstream import UpstreamSet
from gateway.policy import CallerContext, ToolVisibility
from gateway.service import (
    AccessLog,
    ConfigError,
    Gateway,
    GatewayConfig,
    build_components,
    configure_logging,
    expand,
    load_tools,
    run_on_fastest_loop,
)

_LOG: Final = logging.getLogger("gateway.mcp")

Transport = Literal["stdio", "http"]


class McpService:
    """Everything ``gateway mcp`` runs, built from a configuration (nothing is started).

    Use it as an async context manager (or call :meth:`start` and :meth:`aclose`): starting
    opens the engine when it is an OPA server, connects to every upstream and lists its
    tools, and builds the gateway.

    Args:
        config: the validated configuration.
        errlog: where stdio upstreams' stderr goes (default: this process's stderr).
    """

    def __init__(self, config: GatewayConfig, *, errlog: TextIO | None = None) -> None:
        self.config = config
        self.components = build_components(config)
        self.engine = self.components.engine
        self.cache = self.components.cache
        self.authorizer = self.components.authorizer
        self.sink = self.components.sink
        self.trail = self.components.trail
        self.metrics = self.components.metrics
        #: Where it is served (``stdio``, ``http://host:port``), for the start-up line.
        self.listening: str | None = None
        self._local: list[Tool] = load_tools(config) if config.tools else []
        local_names = [tool.definition().name for tool in expand(self._local)]
        self.upstreams = UpstreamSet(config.mcp.upstreams, reserved=local_names, errlog=errlog)
        stdio = config.mcp.stdio_context
        self.front = McpFront(
            self._build(),
            authenticator=self.components.authenticator,
            stdio_context=CallerContext(dict(stdio)) if stdio is not None else None,
            audit=self.trail,
            listing_extras=self._listing_extras,
            upstreams=self.upstreams,
            visibility=ToolVisibility.for_engine(
                self.components.engine, cache=self.components.cache
            ),
        )

    @property
    def gateway(self) -> Gateway:
        """The gateway served now."""
        return self.front.gateway

    def _listing_extras(self, name: str) -> dict[str, Any] | None:
        for tool in self.upstreams.tools():
            if tool.definition().name == name:
                return tool.listing_extras
        return None

    def _build(self) -> Gateway:
        return self.components.gateway([*self._local, *self.upstreams.tools()])

    def rebuild(self) -> None:
        """Serve a new gateway built from the current tools (keeps the old one on error)."""
        try:
            gateway = self._build()
        except Exception:  # noqa: BLE001 - the old gateway stays; its stale tools fail closed
            _LOG.exception("could not rebuild the gateway after a tool list change")
            return
        self.front.gateway = gateway
        _LOG.info("serving %d tool(s)", len(gateway.definitions()))

    async def start(self) -> None:
        """Open the engine, connect to the upstreams, build the gateway."""
        await self.components.open()
        await self.upstreams.start()
        collisions = self.upstreams.collisions
        if collisions:
            raise ConfigError("mcp.upstreams: " + "; ".join(collisions))
        self.rebuild()
        self.upstreams.on_change = self.rebuild
        self.components.log_startup("mcp", self.gateway, self.listening)

    async def refresh(self) -> bool:
        """List every upstream's tools again; whether any list changed (then rebuilt)."""
        return await self.upstreams.refresh()

    async def aclose(self) -> None:
        """Close the upstream sessions, the engine and the audit sink."""
        self.upstreams.on_change = None
        try:
            await self.upstreams.aclose()
        finally:
            await self.components.close()

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def serve_stdio(self) -> None:
        """Serve MCP over stdin/stdout until stdin closes (the service must be started)."""
        await self.front.serve_stdio()

    async def serve_http(
        self, *, host: str | None = None, port: int | None = None, log_level: str = "info"
    ) -> None:
        """Serve streamable HTTP at ``/mcp`` until stopped (the service must be started)."""
        await self.http_server(host=host, port=port, log_level=log_level).serve()

    def http_server(
        self, *, host: str | None = None, port: int | None = None, log_level: str = "info"
    ) -> uvicorn.Server:
        """A uvicorn server for the authenticated streamable HTTP app at ``/mcp``.

        ``host`` and ``port`` default to ``[server]``. Stop it with ``should_exit = True``.
        """
        host = host or self.config.server.host
        port = port if port is not None else self.config.server.port
        sessions = SessionTable(
            max_per_caller=self.config.mcp.max_sessions_per_caller,
            idle_timeout=self.config.mcp.session_idle_timeout_s,
        )
        app = self.front.http_app(
            host=host, max_body_bytes=self.config.server.max_body_bytes, sessions=sessions
        )
        config = uvicorn.Config(
            AccessLog(app) if self.config.log.access else app,
            log_config=None,  # the gateway's own logging (configure_logging)
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            ws="none",
            lifespan="on",
        )
        return _Server(config)


class _Server(uvicorn.Server):
    # The service handles SIGINT/SIGTERM itself (run_mcp): uvicorn's own handlers would
    # raise the signal again after shutting down, ending the process with -2/-15.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def run_mcp(
    config: GatewayConfig,
    *,
    transport: Transport,
    host: str | None = None,
    port: int | None = None,
    log_level: str | None = None,
) -> None:
    """Run ``gateway mcp``: build, start and serve until stdin closes or the server stops.

    Raises:
        ConfigError: the configuration cannot be served on this transport.
        GatewayError: the service cannot be assembled (tools, audit trail, policies).
    """
    if transport == "stdio" and config.mcp.stdio_context is None:
        raise ConfigError(
            "mcp.stdio_context: required for the stdio transport (the caller context of the "
            "local, trusted launcher)"
        )
    level = log_level or config.log.level
    configure_logging(dataclasses.replace(config.log, level=level))
    service = McpService(config)
    if transport == "stdio":
        service.listening = "stdio"
    else:
        bound = port if port is not None else config.server.port
        service.listening = f"http://{host or config.server.host}:{bound}"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        _LOG.debug("event loop: %s", type(loop).__module__)
        task = asyncio.current_task()
        assert task is not None  # noqa: S101 - run by asyncio.run
        server: uvicorn.Server | None = None
        stopping = False

        def stop(signum: int) -> None:
            # SIGINT or SIGTERM: stop serving, then close the sessions and the upstreams.
            nonlocal stopping
            if not stopping:
                _LOG.info("%s: shutting down", signal.Signals(signum).name)
            stopping = True
            if server is not None:
                server.should_exit = True
            else:
                task.cancel()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop, signum)
        try:
            async with service:
                if transport == "stdio":
                    await service.serve_stdio()
                else:
                    server = service.http_server(host=host, port=port, log_level=level)
                    await server.serve()
        except asyncio.CancelledError:
            if not stopping:
                raise
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    # The event loop of ``gateway serve``: uvloop when importable.
    run_on_fastest_loop(main)
