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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Final, Self, TextIO, TypeVar, cast

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client._transport import Transport, TransportStreams
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.message import SessionMessage
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

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
from gateway.mcp._relay import DOWNSTREAM, Downstream, InputRequest, at_least
from gateway.service import (
    McpUpstreamConfig,
    StateLog,
    active_tracer,
    loop_context,
    mcp_client_span,
)

_LOG: Final = logging.getLogger("gateway.mcp")
_MAX_PAGES: Final = 100
_CLOSE_TIMEOUT_S: Final = 10.0
_UNAVAILABLE: Final = "the upstream MCP server is unavailable; the call was not completed"
_TIMED_OUT: Final = "the upstream MCP server did not answer in time"
_INVALID_RESULT: Final = "the upstream MCP server returned an invalid result"
_GONE: Final = "this tool is no longer available from its upstream MCP server; list the tools again"
_TOOL_FAILED: Final = "the upstream tool failed"
_HTTP_SESSION_ERRORS: Final = frozenset({REQUEST_TIMEOUT, INTERNAL_ERROR, INVALID_REQUEST})
#: Reserved for the gateway's resource and prompt actions (see gateway.mcp._catalog).
ACTION_TOOL_NAMES: Final = frozenset(
    {"mcp.resources.read", "mcp.resources.subscribe", "mcp.prompts.get", "mcp.completion.complete"}
)
_NO_REQUEST: Final = "no client request of this upstream is in flight to answer this"
_LOG_LEVEL_META: Final = "io.modelcontextprotocol/logLevel"
_T = TypeVar("_T")
#: Upstream notifications passed on to the front (the tool list is handled here).
Notice = (
    types.ResourceListChangedNotification
    | types.PromptListChangedNotification
    | types.ResourceUpdatedNotification
)


class UpstreamRequestError(GatewayError):
    """A forwarded request failed: the JSON-RPC ``code`` and public ``message`` to answer."""

    code = "upstream_request_failed"

    def __init__(self, rpc_code: int, message: str) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code
        self.message = message


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
        # The client requests being served through this upstream now (see gateway.mcp._relay).
        self._in_flight: dict[object, Downstream] = {}
        self._background: set[asyncio.Task[None]] = set()
        # The subscriptions/listen streams holding resource subscriptions (2026-07-28).
        self._resource_streams: dict[str, asyncio.Task[None]] = {}
        # One line per connection state change (connected, lost, unreachable), rate-limited.
        self._state = StateLog(_LOG, f"upstream {config.name}", initial="new")
        #: Called with the upstream's resource and prompt notifications.
        self.on_notice: Callable[[Upstream, Notice], None] | None = None
        self.resource_uris: frozenset[str] = frozenset()
        self.resource_templates: tuple[UriTemplate, ...] = ()
        self.prompt_names: frozenset[str] | None = None

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
        downstream = DOWNSTREAM.get()
        transport = "pipe" if self._config.command is not None else "tcp"
        try:
            with (
                self._serving(downstream),
                # A client span whose W3C trace context travels in _meta (when tracing).
                mcp_client_span(
                    active_tracer(), tool=tool.remote_name, upstream=self.name, transport=transport
                ) as trace_meta,
            ):
                meta = _request_meta(client, downstream)
                if trace_meta:
                    meta = {**(meta or {}), **trace_meta}
                result = await client.call_tool(
                    tool.remote_name,
                    arguments,
                    read_timeout_seconds=self._config.timeout_s,
                    progress_callback=_progress_callback(downstream),
                    meta=cast(Any, meta),
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
            self._state.report(
                "lost", level=logging.WARNING, text="connection lost: reconnecting on next use"
            )

    # -- what the upstream sends about the client requests it serves -----------------------

    @contextlib.contextmanager
    def _serving(self, downstream: Downstream | None) -> Iterator[None]:
        if downstream is None:
            yield
            return
        key = object()
        self._in_flight[key] = downstream
        try:
            yield
        finally:
            del self._in_flight[key]

    def _target(self) -> Downstream | None:
        # The client request a message of this upstream belongs to, or None (see _relay).
        current = DOWNSTREAM.get()
        if current is not None:
            # In the request's own task (a multi round-trip request of 2026-07-28).
            return current if any(item is current for item in self._in_flight.values()) else None
        if len(self._in_flight) == 1:
            return next(iter(self._in_flight.values()))
        return None

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        target = self._target()
        if target is None or not at_least(params.level, target.log_level):
            _LOG.debug("upstream %s: a log message was not relayed to any client", self.name)
            return
        await target.log(params)

    async def _on_input(self, request: InputRequest) -> Any:
        target = self._target()
        if target is None:
            _LOG.info("upstream %s: refused a %s with no client to ask", self.name, request.method)
            return types.ErrorData(code=INVALID_REQUEST, message=_NO_REQUEST)
        return await target.ask(request)

    async def _on_sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        answer = await self._on_input(types.CreateMessageRequest(params=params))
        if isinstance(
            answer, types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData
        ):
            return answer
        return types.ErrorData(code=INTERNAL_ERROR, message="the client's answer was not usable")

    async def _on_elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        answer = await self._on_input(types.ElicitRequest(params=params))
        if isinstance(answer, types.ElicitResult | types.ErrorData):
            return answer
        return types.ErrorData(code=INTERNAL_ERROR, message="the client's answer was not usable")

    async def _on_roots(
        self, context: ClientRequestContext
    ) -> types.ListRootsResult | types.ErrorData:
        answer = await self._on_input(types.ListRootsRequest())
        if isinstance(answer, types.ListRootsResult | types.ErrorData):
            return answer
        return types.ErrorData(code=INTERNAL_ERROR, message="the client's answer was not usable")

    async def _on_message(self, message: types.ServerNotification | Exception) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            # Not here: this runs on the session's receive path, which the listing needs.
            self._spawn(self._relist())
        elif isinstance(
            message,
            types.ResourceListChangedNotification
            | types.PromptListChangedNotification
            | types.ResourceUpdatedNotification,
        ):
            if isinstance(message, types.PromptListChangedNotification):
                self.prompt_names = None
            if self.on_notice is not None:
                self.on_notice(self, message)

    async def _listen(self, client: Client) -> None:
        # Since 2026-07-28 list changes come only on a subscriptions/listen stream; each
        # event on it also reaches _on_message as the notification it stands for.
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return
        capabilities = client.server_capabilities
        tools = bool(capabilities.tools and capabilities.tools.list_changed)
        prompts = bool(capabilities.prompts and capabilities.prompts.list_changed)
        resources = bool(capabilities.resources and capabilities.resources.list_changed)
        if not (tools or prompts or resources):
            return
        try:
            async with client.listen(
                tools_list_changed=tools,
                prompts_list_changed=prompts,
                resources_list_changed=resources,
            ) as subscription:
                async for _ in subscription:
                    pass
        except Exception as exc:  # noqa: BLE001 - the session goes on without change notices
            _LOG.info("upstream %s: subscriptions/listen ended: %s", self.name, _describe(exc))

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            await work

        task = asyncio.get_running_loop().create_task(run(), context=loop_context())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _relist(self) -> None:
        try:
            await self.refresh()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the next call or refresh lists again
            _LOG.warning(
                "upstream %s: cannot list its tools after it announced a change: %s",
                self.name,
                _describe(exc),
            )

    # -- requests other than tool calls ---------------------------------------------------

    def offers(self, capability: str) -> bool:
        """Whether the live session's server declared ``capability`` (``resources``, ...)."""
        connection = self._connection
        client = connection.client if connection is not None else None
        if client is None:
            return False
        return getattr(client.server_capabilities, capability, None) is not None

    @property
    def legacy(self) -> bool:
        """Whether the live session speaks a protocol revision with the initialize handshake."""
        connection = self._connection
        client = connection.client if connection is not None else None
        return client is not None and client.protocol_version not in MODERN_PROTOCOL_VERSIONS

    async def request(self, send: Callable[[Client], Awaitable[_T]]) -> _T:
        """Run ``send`` on the session (connecting if needed) for the current client request.

        Raises:
            UpstreamRequestError: the upstream answered an error, or could not be reached.
        """
        connection: _Connection | None = None
        failure: UpstreamRequestError | None = None
        try:
            async with self._lock:
                client, _ = await self._connect_locked()
                connection = self._connection
        except UpstreamError:
            failure = UpstreamRequestError(INTERNAL_ERROR, _UNAVAILABLE)
        if failure is not None:
            raise failure
        try:
            with self._serving(DOWNSTREAM.get()):
                return await send(client)
        except asyncio.CancelledError:
            raise
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or (
                self._config.url is not None and exc.code in _HTTP_SESSION_ERRORS
            ):
                self._mark_lost(connection)
            if exc.code == CONNECTION_CLOSED:
                failure = UpstreamRequestError(INTERNAL_ERROR, _UNAVAILABLE)
            elif exc.code == REQUEST_TIMEOUT:
                failure = UpstreamRequestError(INTERNAL_ERROR, _TIMED_OUT)
            else:
                failure = UpstreamRequestError(
                    exc.code, public_text(exc.message) if exc.message else _TOOL_FAILED
                )
        except (RuntimeError, ValueError):
            failure = UpstreamRequestError(INTERNAL_ERROR, _INVALID_RESULT)
        except Exception:  # noqa: BLE001 - any transport failure ends the session
            self._mark_lost(connection)
            failure = UpstreamRequestError(INTERNAL_ERROR, _UNAVAILABLE)
        raise failure

    async def _pages(
        self, capability: str, fetch: Callable[[Client, str | None], Awaitable[Any]], member: str
    ) -> list[Any]:
        async def walk(client: Client) -> list[Any]:
            if getattr(client.server_capabilities, capability, None) is None:
                return []
            items: list[Any] = []
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                page = await fetch(client, cursor)
                items.extend(getattr(page, member))
                cursor = page.next_cursor
                if cursor is None:
                    break
            return items

        return await self.request(walk)

    async def list_resources(self) -> list[types.Resource]:
        """Every resource the upstream lists (all pages); remembered for routing reads."""
        resources: list[types.Resource] = await self._pages(
            "resources",
            lambda client, cursor: client.list_resources(cursor=cursor, cache_mode="bypass"),
            "resources",
        )
        self.resource_uris = frozenset(resource.uri for resource in resources)
        return resources

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        """Every resource template the upstream lists; remembered for routing reads."""
        templates: list[types.ResourceTemplate] = await self._pages(
            "resources",
            lambda client, cursor: client.list_resource_templates(
                cursor=cursor, cache_mode="bypass"
            ),
            "resource_templates",
        )
        parsed: list[UriTemplate] = []
        for template in templates:
            try:
                parsed.append(UriTemplate.parse(template.uri_template))
            except (InvalidUriTemplate, ValueError):
                continue
        self.resource_templates = tuple(parsed)
        return templates

    async def list_prompts(self) -> list[types.Prompt]:
        """Every prompt the upstream lists (names as the upstream has them)."""
        prompts: list[types.Prompt] = await self._pages(
            "prompts",
            lambda client, cursor: client.list_prompts(cursor=cursor, cache_mode="bypass"),
            "prompts",
        )
        self.prompt_names = frozenset(prompt.name for prompt in prompts)
        return prompts

    def matches(self, uri: str) -> bool:
        """Whether the upstream's last listings name ``uri`` or a template of it."""
        if uri in self.resource_uris:
            return True
        for template in self.resource_templates:
            try:
                if template.match(uri) is not None:
                    return True
            except ValueError:
                continue
        return False

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """``resources/read`` upstream (see :meth:`request`)."""
        return await self.request(lambda client: client.read_resource(uri, cache_mode="bypass"))

    async def get_prompt(
        self, remote_name: str, arguments: dict[str, str] | None
    ) -> types.GetPromptResult:
        """``prompts/get`` upstream (see :meth:`request`)."""
        return await self.request(lambda client: client.get_prompt(remote_name, arguments))

    async def complete(
        self,
        ref: types.PromptReference | types.ResourceTemplateReference,
        argument: dict[str, str],
        context: dict[str, str] | None,
    ) -> types.CompleteResult:
        """``completion/complete`` upstream (see :meth:`request`)."""
        return await self.request(lambda client: client.complete(ref, argument, context))

    async def subscribe(self, uri: str, *, on: bool) -> None:
        """``resources/subscribe`` (``on``) or ``resources/unsubscribe`` upstream."""
        request: types.SubscribeRequest | types.UnsubscribeRequest = (
            types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
            if on
            else types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
        )

        async def send(client: Client) -> None:
            resources = client.server_capabilities.resources
            if resources is None or not resources.subscribe:
                raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found")
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                await self._listen_resource(client, uri, on=on)
                return
            await client.session.send_request(request, types.EmptyResult)

        await self.request(send)

    async def _listen_resource(self, client: Client, uri: str, *, on: bool) -> None:
        # Since 2026-07-28 a resource is subscribed to on a subscriptions/listen stream: one
        # per URI, held while subscribed; its updates reach _on_message as notifications.
        held = self._resource_streams.pop(uri, None)
        if not on:
            if held is not None:
                held.cancel()
            return
        if held is not None and not held.done():
            self._resource_streams[uri] = held
            return
        acknowledged: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        async def hold() -> None:
            try:
                async with client.listen(resource_subscriptions=[uri]) as subscription:
                    honored = uri in (subscription.honored.resource_subscriptions or ())
                    acknowledged.set_result(honored)
                    if honored:
                        async for _ in subscription:
                            pass
            except Exception as exc:  # noqa: BLE001 - the subscription ends; the caller is told
                _LOG.info(
                    "upstream %s: a resource subscription ended: %s", self.name, _describe(exc)
                )
                if not acknowledged.done():
                    acknowledged.set_result(False)
            finally:
                if self._resource_streams.get(uri) is task:
                    del self._resource_streams[uri]

        task = asyncio.get_running_loop().create_task(hold(), context=loop_context())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        self._resource_streams[uri] = task
        if not await acknowledged:
            raise MCPError(
                code=types.INVALID_PARAMS, message="the upstream does not offer this subscription"
            )

    async def set_log_level(self, level: types.LoggingLevel) -> None:
        """``logging/setLevel`` upstream, when it speaks a handshake revision and logs."""
        if not self.legacy or not self.offers("logging"):
            return
        await self.request(
            lambda client: client.session.send_request(
                types.SetLevelRequest(params=types.SetLevelRequestParams(level=level)),
                types.EmptyResult,
            )
        )

    async def roots_changed(self) -> None:
        """Tell a handshake-revision upstream that a client's roots changed."""
        connection = self._connection
        client = connection.client if connection is not None else None
        if client is not None and self.legacy:
            await client.session.send_notification(types.RootsListChangedNotification())

    async def aclose(self) -> None:
        """Close the session (stopping a stdio server); the upstream can be used again."""
        background = list(self._background)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
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
        self._state.report("up", level=logging.INFO, text=f"connected ({len(self._tools)} tools)")
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
        # A fresh context: the session's callbacks must never see the caller's client request.
        connection.task = loop.create_task(
            self._own(connection),
            name=f"gateway-mcp-upstream-{self.name}",
            context=loop_context(),
        )
        try:
            async with asyncio.timeout(self._config.timeout_s):
                await asyncio.shield(connection.ready)
        except asyncio.CancelledError:
            await self._close(connection)
            raise
        except Exception as exc:
            await self._close(connection)
            timed_out = isinstance(exc, TimeoutError)
            detail = "timed out" if timed_out else _describe(exc)
            # The error's type only: an upstream's own text is not the gateway's to repeat.
            why = "timed out" if timed_out else type(exc).__name__
            self._state.report(
                "unreachable",
                level=logging.ERROR,
                text=f"cannot connect ({why}): its tools fail until it can",
            )
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
                message_handler=self._on_message,
                logging_callback=self._on_log,
                sampling_callback=self._on_sampling,
                elicitation_callback=self._on_elicitation,
                list_roots_callback=self._on_roots,
            )
            async with client:
                connection.ready.set_result(client)
                async with anyio.create_task_group() as group:
                    group.start_soon(self._listen, client)
                    await connection.stop.wait()
                    group.cancel_scope.cancel()
        except Exception as exc:  # noqa: BLE001 - reported to the waiter, or logged
            if not connection.ready.done():
                connection.ready.set_exception(exc)
            else:
                _LOG.info("upstream %s: session ended: %s", self.name, type(exc).__name__)
        finally:
            ready = connection.ready
            served = ready.done() and not ready.cancelled() and ready.exception() is None
            if served and not connection.stop.is_set():
                self._mark_lost(connection)
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


def _progress_callback(downstream: Downstream | None) -> ProgressFnT | None:
    if downstream is None or not downstream.wants_progress:
        return None
    return downstream.progress


def _request_meta(client: Client, downstream: Downstream | None) -> dict[str, Any] | None:
    # Since 2026-07-28 a request asks for log messages in its own _meta.
    if downstream is None or downstream.log_level is None:
        return None
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return None
    return {_LOG_LEVEL_META: downstream.log_level}


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
                if name in ACTION_TOOL_NAMES:
                    skipped.append(
                        SkippedTool(
                            upstream.name,
                            name,
                            "the name is reserved for the gateway's resource and prompt actions",
                        )
                    )
                elif name in self._reserved:
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

    # -- resources and prompts -------------------------------------------------------------

    def _offering(self, capability: str) -> list[Upstream]:
        return [upstream for upstream in self._upstreams if upstream.offers(capability)]

    async def _gather(self, fetch: Callable[[Upstream], Awaitable[list[_T]]]) -> list[_T]:
        # Every upstream's items, in configuration order; one that fails is left out.
        results = await asyncio.gather(
            *(fetch(upstream) for upstream in self._upstreams), return_exceptions=True
        )
        items: list[_T] = []
        for upstream, result in zip(self._upstreams, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                _LOG.warning("upstream %s: listing failed: %s", upstream.name, _describe(result))
                continue
            items.extend(result)
        return items

    async def list_resources(self) -> list[types.Resource]:
        """Every upstream's resources (URIs are the upstreams' own)."""
        return await self._gather(lambda upstream: upstream.list_resources())

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        """Every upstream's resource templates."""
        return await self._gather(lambda upstream: upstream.list_resource_templates())

    async def list_prompts(self) -> list[types.Prompt]:
        """Every upstream's prompts, named with the upstream's prefix; the first name wins."""

        async def prefixed(upstream: Upstream) -> list[tuple[Upstream, types.Prompt]]:
            return [(upstream, prompt) for prompt in await upstream.list_prompts()]

        served: dict[str, types.Prompt] = {}
        for upstream, prompt in await self._gather(prefixed):
            name = upstream.config.prefix + prompt.name
            if name in served:
                _LOG.warning("prompt name %r is served twice; the later one is not", name)
                continue
            served[name] = prompt.model_copy(update={"name": name})
        return list(served.values())

    def resource_owner(self, uri: str) -> Upstream | None:
        """The upstream a URI is read from.

        The first whose listings name it (or a template of it), else the only upstream
        offering resources; ``None`` when there is no such one.
        """
        for upstream in self._upstreams:
            if upstream.matches(uri):
                return upstream
        offering = self._offering("resources")
        return offering[0] if len(offering) == 1 else None

    async def prompt_owner(self, name: str) -> tuple[Upstream, str] | None:
        """The upstream serving a prompt name, and the prompt's name there."""
        for upstream in self._upstreams:
            prefix = upstream.config.prefix
            if not name.startswith(prefix):
                continue
            if upstream.prompt_names is None:
                with contextlib.suppress(UpstreamRequestError):
                    await upstream.list_prompts()
            names = upstream.prompt_names or frozenset()
            if name[len(prefix) :] in names:
                return upstream, name[len(prefix) :]
        return None

    async def set_log_level(self, level: types.LoggingLevel) -> None:
        """Ask every upstream that logs (before 2026-07-28) for messages at ``level``."""
        results = await asyncio.gather(
            *(upstream.set_log_level(level) for upstream in self._upstreams),
            return_exceptions=True,
        )
        for upstream, result in zip(self._upstreams, results, strict=True):
            if isinstance(result, Exception):
                _LOG.info("upstream %s: logging/setLevel failed: %s", upstream.name, result)

    async def roots_changed(self) -> None:
        """Tell every upstream that a client's roots changed."""
        await asyncio.gather(
            *(upstream.roots_changed() for upstream in self._upstreams), return_exceptions=True
        )

    def on_notice(self, handler: Callable[[Upstream, Notice], None] | None) -> None:
        """Call ``handler`` with every upstream's resource and prompt notifications."""
        for upstream in self._upstreams:
            upstream.on_notice = handler

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
