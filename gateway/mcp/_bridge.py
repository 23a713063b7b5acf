"""What the MCP front offers beyond tools: notifications, logging, resources and prompts.

- ``notifications/tools/list_changed`` (``listChanged: true``): sent to every connected client
  whenever the set of served tools changes (an upstream's own list_changed, which a
  2026-07-28 upstream sends on the ``subscriptions/listen`` stream the gateway keeps open; an
  upstream coming up after a retry; a reconnection listing a different set); resources and
  prompts list changes of upstreams are passed on the same way. A 2026-07-28 client gets the
  same three list changes on the ``subscriptions/listen`` streams it opens (:class:`_Listen`),
  never unsolicited, and on them the resource updates of the URIs it named in
  ``resourceSubscriptions`` that the policy allowed (each decided like ``resources/subscribe``;
  the acknowledgement names only those).
- ``logging/setLevel``: remembered per client connection and forwarded to the upstreams that
  log (before 2026-07-28; since then the level travels with each request); upstream log
  messages reach only the client request they belong to (see :mod:`gateway.mcp._relay`).
- progress, sampling, elicitation and roots are relayed per request (:class:`Relay`). A client
  of a handshake revision is asked on its request's stream; a 2026-07-28 client is asked
  through multi round-trip requests (:class:`InputRounds`): its request is answered with an
  ``InputRequiredResult`` carrying the upstream's requests, the client retries it with the
  answers, and the upstream's call goes on.
- resources and prompts of the upstreams (:mod:`gateway.mcp._catalog`): listing passes the
  upstreams' lists through; every read, subscription and prompt is decided by the policy
  through the call pipeline, and a refused one never reaches the upstream. A refusal is a
  JSON-RPC error :data:`REFUSED` whose message is the public text and whose ``data`` carries
  ``gateway/code`` (and ``gateway/decision_id``). An upstream's ``resources/updated`` reaches
  only the connections and listen streams whose subscription to that resource the policy
  allowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import mcp_types as types
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from gateway import _json
from gateway._call import ToolCall
from gateway._ids import random_hex
from gateway.audit import AuditTrail
from gateway.mcp._catalog import COMPLETE, GET_PROMPT, READ, SUBSCRIBE, action_tools
from gateway.mcp._content import ActionOutput, public_text
from gateway.mcp._relay import DOWNSTREAM, LEVELS, InputRequest
from gateway.mcp._upstream import Notice, Upstream, UpstreamSet
from gateway.policy import CallerContext, caller_context
from gateway.service import PRINCIPAL_SCOPE_KEY, CallResult, Gateway, request_id_in

_LOG: Final = logging.getLogger("gateway.mcp")
#: The JSON-RPC error code of a resource or prompt request the gateway refused.
REFUSED: Final = -32010
_LOG_LEVEL_META: Final = "io.modelcontextprotocol/logLevel"
_NOT_FOUND_LEGACY: Final = -32002
#: The most ``subscriptions/listen`` streams open at once (further requests are refused).
MAX_LISTEN_STREAMS: Final = 256
#: The most resources one ``subscriptions/listen`` stream may subscribe to (the rest are
#: not acknowledged).
MAX_LISTEN_RESOURCES: Final = 64
#: The most ``InputRequiredResult`` rounds one request of a 2026-07-28 client gets; further
#: upstream requests of that call are refused to the upstream.
MAX_INPUT_ROUNDS: Final = 16
#: How long a call waits for its client's retry with the inputs asked, in seconds.
INPUT_ROUND_TIMEOUT_S: Final = 300.0
#: The most calls waiting for their clients' inputs at once, in all and per principal.
MAX_WAITING_CALLS: Final = 256
MAX_WAITING_PER_PRINCIPAL: Final = 16
_INVALID_STATE: Final = "Invalid or expired requestState"
_R = TypeVar("_R")
_Answer = types.CreateMessageResult | types.ElicitResult | types.ListRootsResult | types.ErrorData


#: Every revision the gateway serves, newest first: per request (2026-07-28) and through the
#: ``initialize`` handshake (2025-11-25 back to 2024-11-05).
SUPPORTED_REVISIONS: Final = tuple(
    sorted({*MODERN_PROTOCOL_VERSIONS, *HANDSHAKE_PROTOCOL_VERSIONS}, reverse=True)
)


class GatewayServer(Server[Any]):
    """The SDK's low-level server, announcing list changes (handshake revisions).

    ``server/discover`` lists every revision the gateway serves (:data:`SUPPORTED_REVISIONS`),
    the handshake ones too: a dual-era server advertises both, and a client picks the newest
    it shares (per request if modern, else through ``initialize``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_request_handler("server/discover", types.RequestParams, self._discover)

    async def _discover(
        self, ctx: ServerRequestContext[Any, Any], params: types.RequestParams | None
    ) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(SUPPORTED_REVISIONS),
            capabilities=self.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=self.instructions,
        )

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """The initialization options, with ``listChanged`` for tools, resources, prompts."""
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(
                prompts_changed=True, resources_changed=True, tools_changed=True
            ),
            experimental_capabilities,
            extensions,
        )


def _connection(ctx: ServerRequestContext[Any, Any]) -> Any:
    # The per-client connection (the SDK keeps it on the per-request session proxy).
    return getattr(ctx.session, "_connection", None)


class Relay:
    """The way back to one client request (a :class:`gateway.mcp._relay.Downstream`)."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], log_level: str | None) -> None:
        self._ctx = ctx
        meta: dict[str, Any] = dict(ctx.meta or {})
        # The SDK keeps the token under its Python name (the wire's is progressToken).
        token = meta.get("progress_token", meta.get("progressToken"))
        self._progress = token is not None and not isinstance(token, bool)
        self._level: types.LoggingLevel | None = None
        for level in LEVELS:
            if level == log_level:
                self._level = level

    @property
    def log_level(self) -> types.LoggingLevel | None:
        """The least severe level the client asked for on this request."""
        return self._level

    @property
    def wants_progress(self) -> bool:
        """Whether the request carried a progress token."""
        return self._progress

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """Progress under the client's own token, on the request's stream."""
        with contextlib.suppress(Exception):
            await self._ctx.session.report_progress(progress, total, message)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        """The upstream's log message, on the request's stream."""
        with contextlib.suppress(Exception):
            await self._ctx.session.send_notification(
                types.LoggingMessageNotification(params=params),
                related_request_id=self._ctx.request_id,
            )

    async def ask(self, request: InputRequest) -> _Answer:
        """Relay the upstream's request to this client when it offered the capability."""
        session = self._ctx.session
        result_type: Any
        offered = True
        if isinstance(request, types.CreateMessageRequest):
            with_tools = bool(request.params.tools or request.params.tool_choice)
            wanted = types.ClientCapabilities(
                sampling=types.SamplingCapability(
                    tools=types.SamplingToolsCapability() if with_tools else None,
                    context=(
                        types.SamplingContextCapability()
                        if request.params.include_context in ("thisServer", "allServers")
                        else None
                    ),
                )
            )
            result_type = (
                types.CreateMessageResultWithTools if with_tools else types.CreateMessageResult
            )
        elif isinstance(request, types.ElicitRequest):
            wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
            if isinstance(request.params, types.ElicitRequestURLParams):
                have = session.client_capabilities
                offered = (
                    have is not None
                    and have.elicitation is not None
                    and (have.elicitation.url is not None)
                )
            result_type = types.ElicitResult
        else:
            wanted = types.ClientCapabilities(roots=types.RootsCapability())
            result_type = types.ListRootsResult
        if not offered or not session.check_client_capability(wanted):
            return types.ErrorData(
                code=types.METHOD_NOT_FOUND, message="the client does not offer this capability"
            )
        return await self._send(request, result_type)

    async def _send(self, request: InputRequest, result_type: Any) -> _Answer:
        session = self._ctx.session
        if not session.can_send_request:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message="the client cannot be asked on this request"
            )
        try:
            answer: Any = await session.send_request(
                request,
                result_type,
                metadata=ServerMessageMetadata(related_request_id=self._ctx.request_id),
            )
        except asyncio.CancelledError:
            raise
        except MCPError as exc:
            return types.ErrorData(code=exc.code, message=public_text(exc.message or "refused"))
        except Exception:  # noqa: BLE001 - the upstream gets an error, never our exception
            return types.ErrorData(code=types.INTERNAL_ERROR, message="the client did not answer")
        if isinstance(
            answer, types.CreateMessageResult | types.ElicitResult | types.ListRootsResult
        ):
            return answer
        return types.ErrorData(code=types.INTERNAL_ERROR, message="the client did not answer")


@dataclass(eq=False, slots=True)
class _Question:
    """One upstream request waiting for the client's answer."""

    request: InputRequest
    result_type: Any
    future: asyncio.Future[_Answer]


@dataclass(eq=False, slots=True)
class _WaitingCall:
    """A request of a 2026-07-28 client whose upstream call waits for the client's inputs.

    :meth:`binding` is what a retry must match: the method, the principal (and the
    transport's session), the target (tool, resource or prompt) and a digest of the
    arguments; worked out only when the call first waits (most calls never do).
    """

    make_binding: Callable[[], tuple[str, str, str, str]]
    relay: _RoundRelay
    task: asyncio.Task[Any] | None = None
    questions: dict[str, _Question] = field(default_factory=dict)
    #: Whether questions arrived (or stayed unanswered) since the last round was answered.
    pending: bool = False
    #: Resolved when the call completes or a question arrives (while a round is served).
    wake: asyncio.Future[None] | None = None
    bound: tuple[str, str, str, str] | None = None
    rounds: int = 0
    serial: int = 0
    expires: float = 0.0
    expiry: asyncio.TimerHandle | None = None

    async def ask(self, request: InputRequest, result_type: Any) -> _Answer:
        """Hold the upstream's request until the client's retry answers it."""
        self.serial += 1
        key = f"{request.method.replace('/', '-')}-{self.serial}"
        question = _Question(request, result_type, asyncio.get_running_loop().create_future())
        self.questions[key] = question
        self.pending = True
        self.signal()
        try:
            return await question.future
        finally:
            self.questions.pop(key, None)

    def binding(self) -> tuple[str, str, str, str]:
        """What a retry must match (see the class)."""
        if self.bound is None:
            self.bound = self.make_binding()
        return self.bound

    def signal(self, _: object = None) -> None:
        """Wake the round being served (the call completed, or asks)."""
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)

    def refuse_all(self, message: str) -> None:
        """Answer every open question with an error (the upstream is refused)."""
        for question in self.questions.values():
            if not question.future.done():
                question.future.set_result(
                    types.ErrorData(code=types.INVALID_REQUEST, message=message)
                )


class _RoundRelay(Relay):
    """The way back to a 2026-07-28 client request, across its rounds.

    An upstream's request is put in the next ``InputRequiredResult`` (after the same
    capability check as on a handshake revision, against the capabilities of the round
    being served); progress and log messages go to the round being served, and are dropped
    while the call waits for the client's retry.
    """

    def __init__(self, ctx: ServerRequestContext[Any, Any], log_level: str | None) -> None:
        super().__init__(ctx, log_level)
        self.call: _WaitingCall | None = None
        self.serving = True

    def serve(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Serve this round (a retry of the original request) from now on."""
        self._ctx = ctx
        self.serving = True

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self.serving:
            await super().progress(progress, total, message)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if self.serving:
            await super().log(params)

    async def _send(self, request: InputRequest, result_type: Any) -> _Answer:
        if self.call is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message="the client cannot be asked on this request"
            )
        return await self.call.ask(request, result_type)


class InputRounds:
    """Multi round-trip requests (2026-07-28) bridging an upstream's requests to its client.

    While a 2026-07-28 client's ``tools/call``, ``resources/read`` or ``prompts/get`` is
    forwarded, an upstream's ``sampling/createMessage``, ``elicitation/create`` or
    ``roots/list`` (a request on a handshake revision, or an ``InputRequiredResult`` of a
    2026-07-28 upstream, which the SDK's client turns into the same callbacks) becomes an
    entry of an ``InputRequiredResult`` answered to the client, with a ``requestState`` naming
    the waiting call. The client's retry (the same request, ``inputResponses`` keyed like
    ``inputRequests``, the ``requestState`` echoed) answers the upstream, and the upstream's
    call goes on: to its result, or to another round.

    The call was admitted, decided and audited once, when it arrived; a retry is that call's
    continuation, never a new decision. So a ``requestState`` is honoured only for the
    request it was issued for: it is a random handle to state the gateway keeps (nothing the
    client holds is trusted), used once (every round issues a new one), valid for
    :data:`INPUT_ROUND_TIMEOUT_S`, and only on a retry by the same principal (and transport
    session) of the same method, target and arguments. Anything else is refused with
    -32602 "Invalid or expired requestState", the waiting call untouched. A call not retried
    in time is cancelled (the upstream is told). The rounds of one request are bounded
    (:data:`MAX_INPUT_ROUNDS`), as are the calls waiting at once (:data:`MAX_WAITING_CALLS`,
    :data:`MAX_WAITING_PER_PRINCIPAL`): past a bound, the upstream's request is refused
    to the upstream (-32600) and its call goes on without the answer. An answer that is not
    the requested result's shape is refused (-32602) and the state stays valid; an answer
    missing is asked again in the next round.

    Args:
        clock: a monotonic clock (expiry).
        timeout_s: how long a call waits for its client's retry.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = INPUT_ROUND_TIMEOUT_S,
    ) -> None:
        self._clock = clock
        self._timeout_s = timeout_s
        self._waiting: dict[str, _WaitingCall] = {}

    @property
    def waiting(self) -> int:
        """How many calls wait for their clients' inputs now."""
        return len(self._waiting)

    @staticmethod
    def binding(
        ctx: ServerRequestContext[Any, Any], target: str, arguments: bytes
    ) -> tuple[str, str, str, str]:
        """What a retry must match: method, principal and session, target, arguments."""
        request = ctx.request
        if request is None:
            principal = "pipe"  # the one client of a stdio or in-process front
        else:
            scope = getattr(request, "scope", None)
            found = scope.get(PRINCIPAL_SCOPE_KEY) if isinstance(scope, Mapping) else None
            headers = getattr(request, "headers", None)
            session = headers.get("mcp-session-id") if headers is not None else None
            # No principal (not reachable behind the authenticating layer): a key no retry
            # can present, so nothing carries over.
            principal = (
                json.dumps([found, session]) if isinstance(found, str) else secrets.token_hex(16)
            )
        # Decoded strictly, numbers exact: a retry matches only arguments equal to the
        # original's as admission reads them (1.0 is not 1.00; duplicate names never match
        # anything but the same bytes).
        try:
            canonical = _json.canonical(_json.parse(arguments, max_depth=10_000))
        except _json.StrictJSONError:
            canonical = arguments
        digest = hashlib.sha256(canonical).hexdigest()
        return (ctx.method, principal, target, digest)

    async def run(
        self,
        ctx: ServerRequestContext[Any, Any],
        relay: _RoundRelay,
        start: Callable[[], Coroutine[Any, Any, _R]],
        binding: Callable[[], tuple[str, str, str, str]],
    ) -> _R | types.InputRequiredResult:
        """Serve the first round of a request: start its call and answer a result or a round."""
        call = _WaitingCall(binding, relay)
        relay.call = call
        token = DOWNSTREAM.set(relay)
        try:
            call.task = asyncio.get_running_loop().create_task(start())
        finally:
            DOWNSTREAM.reset(token)
        call.task.add_done_callback(call.signal)
        result: _R | types.InputRequiredResult = await self._step(call)
        return result

    async def resume(
        self,
        ctx: ServerRequestContext[Any, Any],
        binding: tuple[str, str, str, str],
        state: str,
        responses: Mapping[str, Any] | None,
    ) -> Any:
        """Serve a retry: answer the waiting call's questions and go on with it.

        Raises:
            MCPError: -32602 for a state that is unknown, expired, not this request's, or
                answers that are not the requested results' shape.
        """
        call = self._waiting.get(state)
        if call is not None and self._clock() >= call.expires:
            self._expire(state)
            call = None
        if call is None or not secrets.compare_digest(
            json.dumps(call.binding()), json.dumps(binding)
        ):
            _LOG.warning(
                "MCP %s: a requestState was refused (unknown, expired or not its request)",
                ctx.method,
            )
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=_INVALID_STATE,
                data={"reason": "invalid_request_state"},
            )
        answers: dict[str, _Answer] = {}
        for key, question in call.questions.items():
            if question.future.done() or responses is None or key not in responses:
                continue
            answer = responses[key]
            dumped = (
                answer.model_dump(mode="json", by_alias=True, exclude_unset=True)
                if hasattr(answer, "model_dump")
                else answer
            )
            try:
                answers[key] = question.result_type.model_validate(dumped, by_name=False)
            except ValidationError:
                raise MCPError(
                    code=types.INVALID_PARAMS, message="inputResponses: an answer is not valid"
                ) from None
        del self._waiting[state]
        if call.expiry is not None:
            call.expiry.cancel()
            call.expiry = None
        for key, answer in answers.items():
            call.questions[key].future.set_result(answer)
        if any(not question.future.done() for question in call.questions.values()):
            call.pending = True  # what was not answered is asked again
        call.relay.serve(ctx)
        return await self._step(call)

    async def _step(self, call: _WaitingCall) -> Any:
        task = call.task
        assert task is not None  # noqa: S101 - started by run
        loop = asyncio.get_running_loop()
        try:
            while True:
                if task.done():
                    return task.result()
                if not call.pending:
                    call.wake = loop.create_future()
                    try:
                        await call.wake
                    finally:
                        call.wake = None
                    continue
                call.pending = False
                open_questions = {
                    key: question
                    for key, question in call.questions.items()
                    if not question.future.done()
                }
                if not open_questions:
                    continue
                refusal = self._refusal(call)
                if refusal is not None:
                    _LOG.info(
                        "MCP %s: an upstream request was refused: %s", call.binding()[0], refusal
                    )
                    call.refuse_all(refusal)
                    continue
                return self._park(call, open_questions)
        except asyncio.CancelledError:
            # The client gave up on this round (cancelled, disconnected): so does the call.
            if call.task is not None and not self._is_waiting(call):
                call.task.cancel()
            raise

    def _is_waiting(self, call: _WaitingCall) -> bool:
        return any(waiting is call for waiting in self._waiting.values())

    def _refusal(self, call: _WaitingCall) -> str | None:
        if call.rounds >= MAX_INPUT_ROUNDS:
            return "too many rounds of input for one request"
        if len(self._waiting) >= MAX_WAITING_CALLS:
            return "too many requests wait for their clients' input"
        principal = call.binding()[1]
        held = sum(1 for waiting in self._waiting.values() if waiting.binding()[1] == principal)
        if held >= MAX_WAITING_PER_PRINCIPAL:
            return "too many requests of this caller wait for its input"
        return None

    def _park(
        self, call: _WaitingCall, questions: dict[str, _Question]
    ) -> types.InputRequiredResult:
        state = secrets.token_urlsafe(32)
        call.rounds += 1
        call.expires = self._clock() + self._timeout_s
        call.relay.serving = False
        self._waiting[state] = call
        call.expiry = asyncio.get_running_loop().call_later(self._timeout_s, self._expire, state)
        return types.InputRequiredResult(
            input_requests={key: question.request for key, question in questions.items()},
            request_state=state,
        )

    def _expire(self, state: str) -> None:
        call = self._waiting.pop(state, None)
        if call is None:
            return
        if call.expiry is not None:
            call.expiry.cancel()
        _LOG.info(
            "MCP %s: a call waiting for its client's input expired; cancelled", call.binding()[0]
        )
        call.refuse_all("the client did not answer in time")
        if call.task is not None:
            call.task.cancel()

    def close(self) -> None:
        """Cancel every waiting call."""
        for state in list(self._waiting):
            self._expire(state)


class _Tracker:
    """Server middleware: remembers every client connection that made a request."""

    def __init__(self, connections: weakref.WeakSet[Any]) -> None:
        self._connections = connections

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        connection = _connection(ctx)
        if (
            connection is not None
            and ctx.method != "initialize"
            and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        ):
            # A 2026-07-28 client gets its notifications on its subscriptions/listen streams.
            self._connections.add(connection)
        return await call_next(ctx)


class _Listen:
    """``subscriptions/listen`` for 2026-07-28 clients: list changes and resource updates.

    The SDK's :class:`ListenHandler` serves each stream (the acknowledgement first, then the
    matching events stamped with the stream's subscription id, bounded per stream and in
    number of streams). Each URI of ``resourceSubscriptions`` is a subscription decided by
    the policy exactly like ``resources/subscribe`` (the action ``mcp.resources.subscribe``,
    one decision per URI, audited); the acknowledgement names only the URIs allowed (at most
    :data:`MAX_LISTEN_RESOURCES`), and the stream gets ``notifications/resources/updated``
    for those only.
    """

    def __init__(self, handler: ListenHandler, bridge: Bridge) -> None:
        self._handler = handler
        self._bridge = bridge

    async def __call__(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: types.SubscriptionsListenRequestParams,
    ) -> types.SubscriptionsListenResult:
        requested = params.notifications.resource_subscriptions or []
        allowed = await self._bridge.listen_to(ctx, requested[:MAX_LISTEN_RESOURCES])
        honored = params.notifications.model_copy(
            update={"resource_subscriptions": [uri for _, uri in allowed] or None}
        )
        try:
            return await self._handler(ctx, params.model_copy(update={"notifications": honored}))
        finally:
            await self._bridge.stop_listening(allowed)


class Bridge:
    """Notifications, logging, relaying, resources and prompts for one :class:`McpFront`.

    Args:
        gateway: the gateway served now (its authorizer decides the actions).
        caller: the caller context of a request.
        audit: the trail the actions are recorded in (the gateway's own).
        upstreams: the upstream servers (``None``: no resources, prompts or logging).
    """

    def __init__(
        self,
        gateway: Callable[[], Gateway],
        caller: Callable[[ServerRequestContext[Any, Any]], CallerContext],
        *,
        audit: AuditTrail | None,
        upstreams: UpstreamSet | None,
        rounds: InputRounds | None = None,
    ) -> None:
        self._gateway = gateway
        self._caller = caller
        self._audit = audit
        self._upstreams = upstreams
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._levels: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._subscribers: dict[tuple[str, str], weakref.WeakSet[Any]] = {}
        # How many listen streams hold an allowed subscription to (upstream, uri).
        self._listening: dict[tuple[str, str], int] = {}
        self._actions: tuple[Gateway, Gateway] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # The 2026-07-28 clients' listen streams (every list change is published here too).
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus, max_subscriptions=MAX_LISTEN_STREAMS)
        #: The calls of 2026-07-28 clients waiting for their clients' inputs.
        self.rounds = rounds if rounds is not None else InputRounds()
        if upstreams is not None:
            upstreams.on_notice(self._on_notice)

    def install(self, server: Server[Any]) -> None:
        """Register the handlers and the connection tracker on ``server``."""
        server.middleware.append(_Tracker(self._connections))
        server.add_request_handler(
            "subscriptions/listen",
            types.SubscriptionsListenRequestParams,
            _Listen(self._listen, self),
        )
        server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self._set_level)
        server.add_notification_handler(
            "notifications/roots/list_changed", types.NotificationParams, self._roots_changed
        )
        if self._upstreams is None:
            return
        server.add_request_handler(
            "resources/list", types.PaginatedRequestParams, self._list_resources
        )
        server.add_request_handler(
            "resources/templates/list", types.PaginatedRequestParams, self._list_templates
        )
        server.add_request_handler("resources/read", types.ReadResourceRequestParams, self._read)
        server.add_request_handler(
            "resources/subscribe", types.SubscribeRequestParams, self._subscribe
        )
        server.add_request_handler(
            "resources/unsubscribe", types.UnsubscribeRequestParams, self._unsubscribe
        )
        server.add_request_handler("prompts/list", types.PaginatedRequestParams, self._list_prompts)
        server.add_request_handler("prompts/get", types.GetPromptRequestParams, self._get_prompt)
        server.add_request_handler(
            "completion/complete", types.CompleteRequestParams, self._complete
        )

    # -- per-request relaying ------------------------------------------------------------

    def _level_for(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            level = (ctx.meta or {}).get(_LOG_LEVEL_META)
            return level if isinstance(level, str) else None
        connection = _connection(ctx)
        return self._levels.get(connection) if connection is not None else None

    @contextlib.contextmanager
    def relay(self, ctx: ServerRequestContext[Any, Any]) -> Iterator[None]:
        """Make this request the destination of what upstreams send about it."""
        token = DOWNSTREAM.set(Relay(ctx, self._level_for(ctx)))
        try:
            yield
        finally:
            DOWNSTREAM.reset(token)

    async def serve(
        self,
        ctx: ServerRequestContext[Any, Any],
        start: Callable[[], Coroutine[Any, Any, _R]],
        *,
        target: str,
        arguments: bytes,
        params: types.InputResponseRequestParams,
    ) -> _R | types.InputRequiredResult:
        """Serve a request that upstreams may ask the client about (see :class:`InputRounds`).

        ``start`` runs the request (its call through the gateway); on a handshake revision it
        runs with this request as the way back. A 2026-07-28 request starts it (or, carrying a
        ``requestState``, goes on with the call it names) and gets its result or an
        ``InputRequiredResult``.
        """
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS or (
            self._upstreams is None and params.request_state is None
        ):
            # A handshake client is asked on its request's stream; without upstreams nothing
            # can ask (a request state is still refused below, as no call waits).
            with self.relay(ctx):
                return await start()
        if params.request_state is not None:
            binding = InputRounds.binding(ctx, target, arguments)
            resumed: _R | types.InputRequiredResult = await self.rounds.resume(
                ctx, binding, params.request_state, params.input_responses
            )
            return resumed
        relay = _RoundRelay(ctx, self._level_for(ctx))
        return await self.rounds.run(
            ctx, relay, start, lambda: InputRounds.binding(ctx, target, arguments)
        )

    async def _set_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        connection = _connection(ctx)
        if connection is not None:
            self._levels[connection] = params.level
        if self._upstreams is not None:
            # The upstream connection is shared: ask for the most verbose level any client
            # wants; each client request still gets only what its client asked for.
            wanted = [level for level in self._levels.values() if level in LEVELS]
            most = min(wanted, key=LEVELS.index) if wanted else params.level
            await self._upstreams.set_log_level(LEVELS[LEVELS.index(most)])
        return types.EmptyResult()

    async def _roots_changed(
        self, ctx: ServerRequestContext[Any, Any], params: types.NotificationParams
    ) -> None:
        if self._upstreams is not None:
            await self._upstreams.roots_changed()

    # -- notifications to every client --------------------------------------------------

    def _spawn(self, work: Any) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _broadcast(
        self, method: str, params: dict[str, Any] | None, targets: list[Any]
    ) -> None:
        for connection in targets:
            try:
                await connection.outbound.notify(method, params)
            except Exception:  # noqa: BLE001 - a closed connection just misses it
                _LOG.debug("could not send %s to a client", method)

    def tools_changed(self) -> None:
        """Tell every connected client that the tool list changed."""
        self._spawn(
            self._broadcast("notifications/tools/list_changed", None, list(self._connections))
        )
        self._publish(ToolsListChanged())

    def _publish(self, event: ServerEvent) -> None:
        self._spawn(self._bus.publish(event))

    def _on_notice(self, upstream: Upstream, notice: Notice) -> None:
        if isinstance(notice, types.ResourceUpdatedNotification):
            uri = notice.params.uri
            targets = list(self._subscribers.get((upstream.name, uri), ()))
            params = {"uri": uri}
            self._spawn(self._broadcast("notifications/resources/updated", params, targets))
            if self._listening.get((upstream.name, uri)):
                # Only streams whose subscription to this URI was allowed match it.
                self._publish(ResourceUpdated(uri=uri))
            return
        resources = isinstance(notice, types.ResourceListChangedNotification)
        method = (
            "notifications/resources/list_changed"
            if resources
            else "notifications/prompts/list_changed"
        )
        self._spawn(self._broadcast(method, None, list(self._connections)))
        self._publish(ResourcesListChanged() if resources else PromptsListChanged())

    # -- resources and prompts ------------------------------------------------------------

    def _upstream_set(self) -> UpstreamSet:
        assert self._upstreams is not None  # noqa: S101 - handlers are installed with one
        return self._upstreams

    def _action_gateway(self) -> Gateway:
        gateway = self._gateway()
        if self._actions is None or self._actions[0] is not gateway:
            actions = Gateway(
                action_tools(self._upstream_set()),
                authorizer=gateway.authorizer,
                audit=self._audit,
            )
            self._actions = (gateway, actions)
        return self._actions[1]

    async def _act(
        self,
        ctx: ServerRequestContext[Any, Any],
        name: str,
        arguments: dict[str, Any],
        params: types.InputResponseRequestParams,
    ) -> bytes | types.InputRequiredResult:
        """Decide and forward an action; the upstream's result (JSON) or a round of input."""
        raw = _action_bytes(arguments)

        async def start() -> bytes:
            return await self._decide(ctx, name, raw)

        target = str(arguments.get("uri", arguments.get("prompt", "")))
        return await self.serve(ctx, start, target=target, arguments=raw, params=params)

    async def _decide(self, ctx: ServerRequestContext[Any, Any], name: str, raw: bytes) -> bytes:
        call = ToolCall(f"mcp-{random_hex()}", name, raw)
        scope = getattr(ctx.request, "scope", None)
        request_id = request_id_in(scope) if isinstance(scope, dict) else None
        with caller_context(self._caller(ctx)):
            result = await self._action_gateway().call(call, request_id=request_id)
        output = result.output
        if result.ok and isinstance(output, ActionOutput) and output.result is not None:
            return output.result
        if isinstance(output, ActionOutput) and output.rpc_code is not None:
            raise MCPError(
                code=output.rpc_code,
                message=result.message or "the upstream request failed",
                data=_data(result),
            )
        raise MCPError(code=REFUSED, message=result.message or result.code, data=_data(result))

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await self._upstream_set().list_resources())

    async def _list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> types.ListResourceTemplatesResult:
        templates = await self._upstream_set().list_resource_templates()
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=await self._upstream_set().list_prompts())

    def _owner(self, ctx: ServerRequestContext[Any, Any], uri: str) -> Upstream:
        owner = self._upstream_set().resource_owner(uri)
        if owner is None:
            code = (
                types.INVALID_PARAMS
                if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
                else _NOT_FOUND_LEGACY
            )
            raise MCPError(code=code, message="Resource not found")
        return owner

    async def _read(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        owner = self._owner(ctx, params.uri)
        arguments = {
            "action": "resources/read",
            "version": 1,
            "server": owner.name,
            "uri": params.uri,
        }
        output = await self._act(ctx, READ, arguments, params)
        if isinstance(output, types.InputRequiredResult):
            return output
        return types.ReadResourceResult.model_validate_json(output, by_name=False)

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        owner = self._owner(ctx, params.uri)
        arguments = {
            "action": "resources/subscribe",
            "version": 1,
            "server": owner.name,
            "uri": params.uri,
        }
        with self.relay(ctx):
            await self._decide(ctx, SUBSCRIBE, _action_bytes(arguments))
        connection = _connection(ctx)
        if connection is not None:
            self._subscribers.setdefault((owner.name, params.uri), weakref.WeakSet()).add(
                connection
            )
        return types.EmptyResult()

    async def listen_to(
        self, ctx: ServerRequestContext[Any, Any], uris: list[str]
    ) -> list[tuple[str, str]]:
        """Decide a listen stream's resource subscriptions: the (upstream, uri) allowed."""
        allowed: list[tuple[str, str]] = []
        if self._upstreams is None:
            return allowed
        for uri in dict.fromkeys(uris):
            owner = self._upstreams.resource_owner(uri)
            if owner is None:
                continue
            arguments = {
                "action": "resources/subscribe",
                "version": 1,
                "server": owner.name,
                "uri": uri,
            }
            try:
                with self.relay(ctx):
                    await self._decide(ctx, SUBSCRIBE, _action_bytes(arguments))
            except MCPError:
                continue  # refused (or the upstream failed): not acknowledged
            key = (owner.name, uri)
            self._listening[key] = self._listening.get(key, 0) + 1
            allowed.append(key)
        return allowed

    async def stop_listening(self, allowed: list[tuple[str, str]]) -> None:
        """A listen stream ended: release its subscriptions (upstream too, if the last)."""
        for key in allowed:
            left = self._listening.get(key, 0) - 1
            if left > 0:
                self._listening[key] = left
                continue
            self._listening.pop(key, None)
            if not self._subscribers.get(key) and self._upstreams is not None:
                with contextlib.suppress(Exception):
                    await self._upstreams[key[0]].subscribe(key[1], on=False)

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        connection = _connection(ctx)
        for key, subscribers in list(self._subscribers.items()):
            if key[1] != params.uri or connection not in subscribers:
                continue
            subscribers.discard(connection)
            if not subscribers:
                del self._subscribers[key]
                if self._listening.get(key):
                    continue  # a listen stream still holds it
                with contextlib.suppress(Exception):
                    await self._upstream_set()[key[0]].subscribe(params.uri, on=False)
        return types.EmptyResult()

    async def _complete(
        self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        # Routed like the prompt or resource it completes; decided by the policy as the
        # action mcp.completion.complete. No upstream offering completions for it: none.
        upstreams = self._upstream_set()
        ref = params.ref
        owner: Upstream | None
        if isinstance(ref, types.PromptReference):
            found = await upstreams.prompt_owner(ref.name)
            owner = found[0] if found is not None else None
            target: dict[str, Any] = {"type": "ref/prompt", "name": ref.name}
        else:
            owner = next(
                (
                    upstream
                    for upstream in upstreams.upstreams
                    if any(t.template == ref.uri for t in upstream.resource_templates)
                ),
                None,
            ) or upstreams.resource_owner(ref.uri)
            target = {"type": "ref/resource", "uri": ref.uri}
        if owner is None or not owner.offers("completions"):
            return _NO_COMPLETION
        context = params.context.arguments if params.context is not None else None
        arguments = {
            "action": "completion/complete",
            "version": 1,
            "server": owner.name,
            "ref": target,
            "argument": {"name": params.argument.name, "value": params.argument.value},
            "context": dict(context or {}),
        }
        with self.relay(ctx):
            result = await self._decide(ctx, COMPLETE, _action_bytes(arguments))
        return types.CompleteResult.model_validate_json(result, by_name=False)

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        found = await self._upstream_set().prompt_owner(params.name)
        if found is None:
            raise MCPError(code=types.INVALID_PARAMS, message="Prompt not found")
        upstream, _ = found
        arguments = {
            "action": "prompts/get",
            "version": 1,
            "server": upstream.name,
            "prompt": params.name,
            "arguments": dict(params.arguments or {}),
        }
        output = await self._act(ctx, GET_PROMPT, arguments, params)
        if isinstance(output, types.InputRequiredResult):
            return output
        return types.GetPromptResult.model_validate_json(output, by_name=False)


_NO_COMPLETION: Final = types.CompleteResult(completion=types.Completion(values=[]))


def _action_bytes(arguments: dict[str, Any]) -> bytes:
    try:
        return _json.canonical(arguments)
    except (_json.StrictJSONError, UnicodeError, RecursionError):
        return json.dumps(arguments, ensure_ascii=True, default=repr).encode()


def _data(result: CallResult) -> dict[str, Any]:
    data: dict[str, Any] = {"gateway/code": result.code}
    if result.decision_id is not None:
        data["gateway/decision_id"] = result.decision_id
    return data
