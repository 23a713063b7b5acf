"""Upstream MCP servers whose tools the gateway serves behind policy.

An :class:`Upstream` keeps one client session to one MCP server (a local command over stdio,
or a streamable HTTP URL) and imports its tools as :class:`UpstreamTool` s: the name
(with the configured prefix), the description and the input schema. A call forwards the
admitted argument document to the upstream and maps what comes back:

- a result is a :class:`~gateway.ToolOutput` (text, media, structured content as details);
- an error result (``isError``) is ``Failure(FAILED)`` carrying the upstream's own text;
- a protocol error, a timeout or a broken connection is ``Failure(FAILED)`` with a fixed
  public text (or the upstream's error message) and the exception as the cause.

Reconnection: each session is owned by one background task. When the session dies (the
process exits, the transport breaks), the next call or :meth:`Upstream.refresh` opens a new
one and lists the tools again. A changed tool list is reported through ``on_change``: the
gateway's registry must then be rebuilt (see :class:`UpstreamSet` and
:class:`gateway.mcp.McpService`). A tool that was removed or changed upstream fails closed
from then on: calling its old :class:`UpstreamTool` (still held by a gateway built before the
change) raises ``Failure(FAILED)`` without contacting the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Final, Self, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client._transport import Transport, TransportStreams
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, REQUEST_TIMEOUT

from gateway._contract import Invocation, bind
from gateway._definition import ToolDefinition
from gateway._errors import (
    GatewayError,
    InvalidDefinitionError,
    InvalidToolError,
    InvalidToolOutputError,
)
from gateway._failure import Failure, FailureKind
from gateway._output import ToolOutput
from gateway.mcp._content import from_result, gateway_version, public_text
from gateway.service import McpUpstreamConfig

_LOG: Final = logging.getLogger("gateway.mcp")
_MAX_PAGES: Final = 100
_CLOSE_TIMEOUT_S: Final = 10.0
_UNAVAILABLE: Final = "the upstream MCP server is unavailable; the call was not completed"
_TIMED_OUT: Final = "the upstream MCP server did not answer in time"
_INVALID_RESULT: Final = "the upstream MCP server returned an invalid result"
_GONE: Final = "this tool is no longer available from its upstream MCP server; list the tools again"
_TOOL_FAILED: Final = "the upstream tool failed"
_HTTP_SESSION_ERRORS: Final = frozenset({REQUEST_TIMEOUT, INTERNAL_ERROR, INVALID_REQUEST})


class UpstreamError(GatewayError):
    """Why an upstream could not be used (the diagnostic cause of a ``Failure``)."""

    code = "upstream_error"


@dataclasses.dataclass(frozen=True, slots=True)
class SkippedTool:
    """An upstream tool that is not served, and why."""

    upstream: str
    name: str
    reason: str


class UpstreamTool:
    """One tool of an upstream MCP server, as a gateway Tool.

    Made by :class:`Upstream` only. ``definition()`` is the imported definition (prefixed
    name, description, input schema); ``call`` forwards the invocation's arguments to the
    upstream tool ``remote_name``.
    """

    __slots__ = ("_definition", "_listing", "_remote_name", "_upstream")

    def __init__(
        self,
        upstream: Upstream,
        remote_name: str,
        definition: ToolDefinition,
        listing: bytes = b"{}",
    ) -> None:
        self._upstream = upstream
        self._remote_name = remote_name
        self._definition = definition
        self._listing = listing

    @property
    def listing_extras(self) -> dict[str, Any]:
        """The upstream's ``tools/list`` members that are not in the definition (a fresh copy).

        ``execution`` (task support), ``icons`` and ``_meta``, as the upstream sent them.
        """
        value: dict[str, Any] = json.loads(self._listing)
        return value

    @property
    def remote_name(self) -> str:
        """The tool's name on the upstream server."""
        return self._remote_name

    @property
    def upstream(self) -> Upstream:
        """The upstream server the tool belongs to."""
        return self._upstream

    def definition(self) -> ToolDefinition:
        """The imported definition."""
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Forward the admitted arguments (exactly the admitted JSON document) upstream.

        Raises:
            Failure: ``FAILED`` for an upstream error result, a protocol or transport
                error, or a tool no longer served by its upstream.
        """
        arguments = json.loads(invocation.arguments)
        return await self._upstream.call_tool(self, arguments)

    def __repr__(self) -> str:
        return (
            f"UpstreamTool({self._definition.name!r} -> {self._upstream.name}:{self._remote_name})"
        )


class _WatchedReadStream:
    # The transport's read side, which reports the end of the session (EOF or close).
    def __init__(self, inner: ReadStream[SessionMessage | Exception], lost: asyncio.Event) -> None:
        self._inner = inner
        self._lost = lost

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._lost.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


@contextlib.asynccontextmanager
async def _watched(transport: Transport, lost: asyncio.Event) -> AsyncIterator[TransportStreams]:
    try:
        async with transport as (read_stream, write_stream):
            yield _WatchedReadStream(read_stream, lost), write_stream
    finally:
        lost.set()


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[TransportStreams]:
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


@dataclasses.dataclass(slots=True, eq=False)
class _Connection:
    ready: asyncio.Future[Client]
    lost: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    stop: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    @property
    def client(self) -> Client | None:
        if self.lost.is_set() or not self.ready.done() or self.ready.cancelled():
            return None
        if self.ready.exception() is not None:
            return None
        return self.ready.result()


class Upstream:
    """One upstream MCP server: its session, its imported tools, reconnection.

    Args:
        config: the ``[[mcp.upstreams]]`` entry.
        errlog: where a stdio server's stderr goes (default: this process's stderr).
        on_change: called (synchronously) whenever the imported tool list changed.
    """

    def __init__(
        self,
        config: McpUpstreamConfig,
        *,
        errlog: TextIO | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._config = config
        self._errlog = errlog
        self.on_change = on_change
        self._lock = asyncio.Lock()
        self._connection: _Connection | None = None
        self._tools: dict[str, UpstreamTool] = {}
        self._skipped: tuple[SkippedTool, ...] = ()
        self._last_listing_changed = False

    @property
    def name(self) -> str:
        """The configured name of the upstream."""
        return self._config.name

    @property
    def config(self) -> McpUpstreamConfig:
        """The configuration entry."""
        return self._config

    @property
    def tools(self) -> list[UpstreamTool]:
        """The tools imported by the last successful listing, in name order."""
        return [self._tools[name] for name in sorted(self._tools)]

    @property
    def skipped(self) -> tuple[SkippedTool, ...]:
        """The upstream tools the last listing could not import, and why."""
        return self._skipped

    @property
    def connected(self) -> bool:
        """Whether a live session is open."""
        connection = self._connection
        return connection is not None and connection.client is not None

    def serves(self, tool: UpstreamTool) -> bool:
        """Whether ``tool`` is still the current import of its name (not removed or changed)."""
        return self._tools.get(tool.definition().name) is tool

    async def wait_disconnected(self) -> None:
        """Return once the current session has ended (at once when there is none)."""
        connection = self._connection
        if connection is not None:
            await connection.lost.wait()

    async def refresh(self) -> bool:
        """Connect if needed and list the tools again; whether the tool list changed.

        Raises:
            UpstreamError: the upstream could not be reached or listed.
        """
        async with self._lock:
            client, fresh = await self._connect_locked()
            if fresh:
                return self._last_listing_changed
            return await self._list_locked(client)

    async def call_tool(self, tool: UpstreamTool, arguments: dict[str, Any]) -> ToolOutput:
        """Call ``tool`` upstream with ``arguments``; see :meth:`UpstreamTool.call`."""
        failure: Failure | None = None
        try:
            async with self._lock:
                client, _ = await self._connect_locked()
                connection = self._connection
        except UpstreamError as exc:
            failure = Failure(FailureKind.FAILED, _UNAVAILABLE, cause=exc)
        if failure is not None:
            raise failure
        if not self.serves(tool):
            raise Failure(
                FailureKind.FAILED,
                _GONE,
                cause=UpstreamError(
                    f"upstream {self.name!r} no longer lists tool {tool.remote_name!r} as "
                    f"{tool.definition().name!r} was imported"
                ),
            )
        try:
            result = await client.call_tool(
                tool.remote_name, arguments, read_timeout_seconds=self._config.timeout_s
            )
        except asyncio.CancelledError:
            raise
        except MCPError as exc:
            failure = self._protocol_failure(exc, connection)
        except (RuntimeError, ValueError) as exc:
            # The SDK's own checks of the result (its shape, the declared output schema).
            failure = Failure(FailureKind.FAILED, _INVALID_RESULT, cause=exc)
        except Exception as exc:  # noqa: BLE001 - any transport failure ends the session
            self._mark_lost(connection)
            failure = Failure(FailureKind.FAILED, _UNAVAILABLE, cause=exc)
        if failure is not None:
            raise failure
        try:
            output = from_result(result)
        except InvalidToolOutputError as exc:
            failure = Failure(FailureKind.FAILED, _INVALID_RESULT, cause=exc)
        if failure is not None:
            raise failure
        if result.is_error:
            public = output if output.blocks != b"[]" or output.structured else _TOOL_FAILED
            raise Failure(
                FailureKind.FAILED,
                public,
                cause=UpstreamError(
                    f"upstream {self.name!r} tool {tool.remote_name!r} returned an error result"
                ),
            )
        return output

    def _protocol_failure(self, exc: MCPError, connection: _Connection | None) -> Failure:
        # Over HTTP a new session is cheap, and the SDK's transport reports HTTP-level
        # failures (a 404 for an expired session, a 5xx) with these codes: start afresh.
        # Over stdio only a closed connection ends the session (a restart kills the server).
        if exc.code == CONNECTION_CLOSED or (
            self._config.url is not None and exc.code in _HTTP_SESSION_ERRORS
        ):
            self._mark_lost(connection)
        if exc.code == CONNECTION_CLOSED:
            return Failure(FailureKind.FAILED, _UNAVAILABLE, cause=exc)
        if exc.code == REQUEST_TIMEOUT:
            return Failure(FailureKind.FAILED, _TIMED_OUT, cause=exc)
        text = public_text(exc.message) if exc.message else _TOOL_FAILED
        return Failure(FailureKind.FAILED, text, cause=exc)

    def _mark_lost(self, connection: _Connection | None) -> None:
        if connection is not None:
            connection.lost.set()

    async def aclose(self) -> None:
        """Close the session (stopping a stdio server); the upstream can be used again."""
        async with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                await self._close(connection)

    # -- connection management (under the lock) --------------------------------------------

    async def _connect_locked(self) -> tuple[Client, bool]:
        connection = self._connection
        if connection is not None:
            client = connection.client
            if client is not None:
                return client, False
            self._connection = None
            await self._close(connection)
        connection = await self._open()
        self._connection = connection
        client = connection.client
        if client is None:  # lost between the handshake and here
            raise UpstreamError(f"upstream {self.name!r}: the session ended at once")
        self._last_listing_changed = await self._list_locked(client)
        return client, True

    def _transport(self, lost: asyncio.Event) -> Transport:
        config = self._config
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            return _watched(stdio_client(params, errlog=self._errlog or sys.stderr), lost)
        assert config.url is not None  # noqa: S101 - the config requires one of them
        return _watched(_http_transport(config.url, dict(config.headers)), lost)

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        connection = _Connection(ready=loop.create_future())
        connection.task = loop.create_task(
            self._own(connection), name=f"gateway-mcp-upstream-{self.name}"
        )
        try:
            async with asyncio.timeout(self._config.timeout_s):
                await asyncio.shield(connection.ready)
        except asyncio.CancelledError:
            await self._close(connection)
            raise
        except Exception as exc:
            await self._close(connection)
            detail = "timed out" if isinstance(exc, TimeoutError) else _describe(exc)
            raise UpstreamError(f"upstream {self.name!r}: cannot connect: {detail}") from exc
        return connection

    async def _own(self, connection: _Connection) -> None:
        # The session lives in this one task: anyio scopes must be left where they were entered.
        try:
            client = Client(
                self._transport(connection.lost),
                cache=None,
                read_timeout_seconds=self._config.timeout_s,
                client_info=types.Implementation(name="gateway", version=gateway_version()),
            )
            async with client:
                connection.ready.set_result(client)
                await connection.stop.wait()
        except Exception as exc:  # noqa: BLE001 - reported to the waiter, or logged
            if not connection.ready.done():
                connection.ready.set_exception(exc)
            else:
                _LOG.info("upstream %s: session ended: %s", self.name, _describe(exc))
        finally:
            connection.lost.set()
            if not connection.ready.done():
                connection.ready.cancel()

    async def _close(self, connection: _Connection) -> None:
        connection.stop.set()
        task = connection.task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(task, _CLOSE_TIMEOUT_S)
            except TimeoutError:
                _LOG.warning("upstream %s: the session did not close in time", self.name)
        if connection.ready.done() and not connection.ready.cancelled():
            connection.ready.exception()  # retrieved: never "exception was never retrieved"

    async def _list_locked(self, client: Client) -> bool:
        listed: list[types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                listed.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            else:
                _LOG.warning(
                    "upstream %s: tools/list did not end after %d pages", self.name, _MAX_PAGES
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._mark_lost(self._connection)
            raise UpstreamError(
                f"upstream {self.name!r}: cannot list tools: {_describe(exc)}"
            ) from exc
        return self._import(listed)

    def _import(self, listed: Iterable[types.Tool]) -> bool:
        tools: dict[str, UpstreamTool] = {}
        skipped: list[SkippedTool] = []
        prefix = self._config.prefix
        for remote in listed:
            name = prefix + remote.name
            reason = None
            definition = None
            if name in tools:
                reason = "listed more than once"
            else:
                try:
                    definition, listing = _imported(name, remote)
                    bind(UpstreamTool(self, remote.name, definition))  # the schema compiles
                except (InvalidDefinitionError, InvalidToolError) as exc:
                    reason = str(exc).removeprefix("tool: ")
            if reason is not None or definition is None:
                skipped.append(SkippedTool(self.name, name, reason or "not usable"))
                continue
            current = self._tools.get(name)
            if (
                current is not None
                and current.remote_name == remote.name
                and current.definition() == definition
                and current._listing == listing  # noqa: SLF001 - same module
            ):
                tools[name] = current
            else:
                tools[name] = UpstreamTool(self, remote.name, definition, listing)
        changed = tools != self._tools
        newly_skipped = [item for item in skipped if item not in self._skipped]
        self._tools = tools
        self._skipped = tuple(skipped)
        for item in newly_skipped:
            _LOG.warning(
                "upstream %s: tool %r is not served: %s", self.name, item.name, item.reason
            )
        if changed:
            _LOG.info("upstream %s: serving %d tool(s): %s", self.name, len(tools), sorted(tools))
            if self.on_change is not None:
                self.on_change()
        return changed

    def __repr__(self) -> str:
        return f"Upstream({self.name!r})"


_EXTRA_MEMBERS: Final = ("execution", "icons", "_meta")


def _imported(name: str, remote: types.Tool) -> tuple[ToolDefinition, bytes]:
    # The definition (what the policy sees) and the other listed members, as sent.
    listed = remote.model_dump(mode="json", by_alias=True, exclude_unset=True)
    definition = ToolDefinition(
        name,
        remote.input_schema,
        remote.description or "",
        title=remote.title,
        annotations=listed.get("annotations"),
        output_schema=remote.output_schema,
        imported=True,
    )
    extras = {key: listed[key] for key in _EXTRA_MEMBERS if listed.get(key) is not None}
    try:
        listing = json.dumps(extras, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, TypeError):
        raise InvalidDefinitionError("tool: invalid tool definition: listing is not JSON") from None
    return definition, listing


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class UpstreamSet:
    """Every configured upstream, producing the current list of their tools.

    ``tools()`` is what a gateway registry should serve now: each upstream's imported
    tools, first upstream first when prefixed names collide, never a name in ``reserved``
    (the gateway's own tools). Whenever an upstream's tool list changes (on
    :meth:`refresh`, or when a reconnection lists a different set), ``on_change`` is
    called; rebuild the gateway from ``tools()`` then. Calls to a removed or changed tool
    that a previous gateway still holds fail closed.

    Args:
        configs: the ``[[mcp.upstreams]]`` entries.
        reserved: tool names already served by the gateway.
        errlog: where stdio servers' stderr goes.
        on_change: called (synchronously) when any upstream's tool list changed.
        retry_s: the first and the longest wait between attempts to reach an upstream that
            could not be reached at start (doubling in between).
        sleep: how to wait (``asyncio.sleep``; a test passes its own).
    """

    def __init__(
        self,
        configs: Iterable[McpUpstreamConfig],
        *,
        reserved: Iterable[str] = (),
        errlog: TextIO | None = None,
        on_change: Callable[[], None] | None = None,
        retry_s: tuple[float, float] = (1.0, 30.0),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._retry_s = retry_s
        self._sleep = sleep
        self._retries: dict[str, asyncio.Task[None]] = {}
        self._reserved = frozenset(reserved)
        self.on_change = on_change
        self._upstreams = tuple(
            Upstream(config, errlog=errlog, on_change=self._changed) for config in configs
        )
        self._errors: dict[str, str] = {}
        self._reported: set[str] = set()

    @property
    def upstreams(self) -> tuple[Upstream, ...]:
        """The upstreams, in configuration order."""
        return self._upstreams

    def __getitem__(self, name: str) -> Upstream:
        for upstream in self._upstreams:
            if upstream.name == name:
                return upstream
        raise KeyError(name)

    @property
    def errors(self) -> dict[str, str]:
        """Upstreams whose last start or refresh failed, with the reason."""
        return dict(self._errors)

    def _changed(self) -> None:
        collisions = self.collisions
        for collision in collisions:
            if collision not in self._reported:
                _LOG.error("%s; the later one is not served", collision)
        self._reported = set(collisions)
        if self.on_change is not None:
            self.on_change()

    def _collect(self) -> tuple[list[UpstreamTool], list[SkippedTool], list[str]]:
        tools: list[UpstreamTool] = []
        skipped: list[SkippedTool] = []
        collisions: list[str] = []
        owners: dict[str, UpstreamTool] = {}
        for upstream in self._upstreams:
            skipped.extend(upstream.skipped)
            for tool in upstream.tools:
                name = tool.definition().name
                this = f"upstream {upstream.name!r} tool {tool.remote_name!r}"
                if name in self._reserved:
                    skipped.append(
                        SkippedTool(
                            upstream.name, name, "the gateway already serves a tool of that name"
                        )
                    )
                    collisions.append(
                        f"tool name {name!r} is served twice: by the gateway's own tool "
                        f"{name!r} (tools.modules) and by {this}; give the upstream a prefix"
                    )
                elif name in owners:
                    owner = owners[name]
                    skipped.append(
                        SkippedTool(
                            upstream.name,
                            name,
                            f"upstream {owner.upstream.name!r} already serves it",
                        )
                    )
                    collisions.append(
                        f"tool name {name!r} is served twice: by upstream "
                        f"{owner.upstream.name!r} tool {owner.remote_name!r} and by {this}; "
                        "give one of the upstreams a prefix"
                    )
                else:
                    owners[name] = tool
                    tools.append(tool)
        return tools, skipped, collisions

    def tools(self) -> list[UpstreamTool]:
        """The tools to serve now."""
        return self._collect()[0]

    @property
    def skipped(self) -> list[SkippedTool]:
        """Tools not served: unusable names or schemas, and name collisions."""
        return self._collect()[1]

    @property
    def collisions(self) -> list[str]:
        """Each tool name served twice, naming both owners (the first one keeps it)."""
        return self._collect()[2]

    async def start(self) -> None:
        """Connect to every upstream and list its tools.

        An upstream that cannot be reached is reported (a warning) and recorded in
        :attr:`errors`, and tried again with growing waits until it answers; then its tools
        are listed (``on_change``) and its return is reported. A call or :meth:`refresh`
        may reach it earlier.
        """
        await self._each()
        for upstream in self._upstreams:
            if upstream.name in self._errors and upstream.name not in self._retries:
                self._retries[upstream.name] = asyncio.get_running_loop().create_task(
                    self._retry(upstream), name=f"gateway-mcp-retry-{upstream.name}"
                )

    async def _retry(self, upstream: Upstream) -> None:
        delay, longest = self._retry_s
        try:
            while upstream.name in self._errors:
                await self._sleep(delay)
                delay = min(delay * 2, longest)
                try:
                    await upstream.refresh()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - still down: try again later
                    self._errors[upstream.name] = _describe(exc)
                    continue
                self._errors.pop(upstream.name, None)
                _LOG.warning(
                    "upstream %s is back: serving %d tool(s)", upstream.name, len(upstream.tools)
                )
        finally:
            self._retries.pop(upstream.name, None)

    async def refresh(self) -> bool:
        """List every upstream's tools again (reconnecting as needed); whether any changed."""
        return any(await self._each())

    async def _each(self) -> list[bool]:
        results = await asyncio.gather(
            *(upstream.refresh() for upstream in self._upstreams), return_exceptions=True
        )
        changed: list[bool] = []
        for upstream, result in zip(self._upstreams, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                self._errors[upstream.name] = _describe(result)
                _LOG.warning(
                    "upstream %s is down: %s; its tools are not served until it answers",
                    upstream.name,
                    _describe(result),
                )
                changed.append(False)
            else:
                self._errors.pop(upstream.name, None)
                changed.append(result)
        return changed

    async def aclose(self) -> None:
        """Stop the retries and close every session."""
        retries = list(self._retries.values())
        for task in retries:
            task.cancel()
        await asyncio.gather(*retries, return_exceptions=True)
        await asyncio.gather(*(upstream.aclose() for upstream in self._upstreams))

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()
