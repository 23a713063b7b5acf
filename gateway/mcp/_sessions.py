"""MCP HTTP sessions bound to the principal that opened them, capped per principal, audited.

A streamable HTTP session (``Mcp-Session-Id``) belongs to the principal whose credentials
opened it (:attr:`~gateway.service.Identity.principal`: which API key, or which token issuer
and subject). A request naming a session that another principal opened gets exactly the
answer an unknown session gets (404, "Session not found"), whether it posts, listens or
deletes; the owner's session is untouched. Each principal may hold at most
``max_per_caller`` open sessions. A principal at its limit that opens one more gets it: its
session that has been idle longest (no request in flight) is ended first, in the SDK too,
and answers 404 from then on, as the specification lets a server end a session at any time
(a client that never sends ``DELETE`` cannot lock its principal out). Only when every one
of its sessions has a request in flight (a stream open, a call running) is the request
answered 429 with a JSON-RPC error, and nothing is created. So the sessions held stay
bounded by ``max_per_caller`` per principal. A slot also frees when its session is
deleted, when it has had no request in flight for ``idle_timeout`` seconds (the SDK is
given the same timeout and ends it too), or when the SDK no longer knows it.

Opening a session is audit-or-deny: the ``session`` record (``event: opened``) must be
durable before the client learns the session id, or the answer is 503 and the session is
never usable. Closing (``closed``: deleted, expired, evicted, ended) and refusals (``refused``:
``session_limit``, ``not_owner``) are recorded as they happen. Records name the session by
a digest of its id, never the id itself.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.audit import AuditTrail
from gateway.mcp._wire import MESSAGE_SCOPE_KEY, WireError, public_errors, read_jsonrpc
from gateway.policy import CallerContext
from gateway.service import PRINCIPAL_SCOPE_KEY, request_id_in

_LOG: Final = logging.getLogger("gateway.mcp")

#: Default bound on the sessions one principal may hold open at once.
DEFAULT_MAX_SESSIONS_PER_CALLER: Final = 8
#: Default idle period after which a session ends (the SDK's default, 30 minutes).
DEFAULT_SESSION_IDLE_TIMEOUT_S: Final = 30 * 60.0
_SESSION_HEADER: Final = "mcp-session-id"
_TOO_MANY: Final = -32000
_CALLER_KEY: Final = "gateway.mcp.session_caller"


def _utc(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(timespec="microseconds")


def session_digest(session_id: str) -> str:
    """How audit records name a session: a digest of its id, never the id itself."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _rpc_error(
    message: str, status: int, *, code: int = INVALID_REQUEST, request_id: int | str | None = None
) -> Response:
    # The same body and headers the SDK sends for an unknown session, so that a session of
    # another principal cannot be told from one that does not exist.
    body = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status,
        media_type="application/json",
    )


def not_found() -> Response:
    """The answer for a session that does not exist (or is not the caller's)."""
    return _rpc_error("Session not found", 404)


@dataclass(frozen=True, slots=True)
class _Caller:
    principal: str
    subject: str | None
    request_id: str | None


@dataclass(slots=True)
class _Session:
    principal: str
    subject: str | None
    idle_since: float
    in_flight: int = 1


@dataclass(slots=True)
class _Principal:
    sessions: set[str] = field(default_factory=set)
    pending: int = 0


class SessionTable:
    """Which principal owns which open session, and how many each holds.

    Not thread-safe; used from one event loop.

    Args:
        max_per_caller: the most sessions one principal may hold open (and be opening).
        idle_timeout: seconds without a request in flight after which a session is gone
            (``None``: only deletion ends a session).
        clock: a monotonic clock.
    """

    def __init__(
        self,
        *,
        max_per_caller: int = DEFAULT_MAX_SESSIONS_PER_CALLER,
        idle_timeout: float | None = DEFAULT_SESSION_IDLE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_per_caller < 1:
            raise ValueError("max_per_caller must be at least 1")
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError("idle_timeout must be positive")
        self.max_per_caller = max_per_caller
        self.idle_timeout = idle_timeout
        self._clock = clock
        self._sessions: dict[str, _Session] = {}
        self._principals: dict[str, _Principal] = {}
        #: Sessions that ended by expiry since the last call to :meth:`take_expired`.
        self._expired: list[tuple[str, _Session]] = []

    def _expire(self, session_id: str, session: _Session) -> bool:
        if (
            self.idle_timeout is None
            or session.in_flight > 0
            or self._clock() - session.idle_since < self.idle_timeout
        ):
            return False
        self._drop(session_id)
        self._expired.append((session_id, session))
        return True

    def _drop(self, session_id: str) -> _Session | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            holder = self._principals.get(session.principal)
            if holder is not None:
                holder.sessions.discard(session_id)
                if not holder.sessions and not holder.pending:
                    del self._principals[session.principal]
        return session

    def take_expired(self) -> list[tuple[str, str, str | None]]:
        """(session id, principal, subject) of every session found expired since last asked."""
        expired, self._expired = self._expired, []
        return [(sid, session.principal, session.subject) for sid, session in expired]

    def owner(self, session_id: str) -> str | None:
        """The principal owning this live session (``None``: unknown, deleted or expired)."""
        session = self._sessions.get(session_id)
        if session is None or self._expire(session_id, session):
            return None
        return session.principal

    def count(self, principal: str) -> int:
        """How many sessions this principal holds open or is opening now."""
        holder = self._principals.get(principal)
        if holder is None:
            return 0
        for session_id in list(holder.sessions):
            self._expire(session_id, self._sessions[session_id])
        holder = self._principals.get(principal)
        return 0 if holder is None else len(holder.sessions) + holder.pending

    def oldest_idle(self, principal: str) -> str | None:
        """This principal's session idle the longest (no request in flight), if any."""
        holder = self._principals.get(principal)
        idle = [
            (self._sessions[session_id].idle_since, session_id)
            for session_id in (holder.sessions if holder is not None else ())
            if self._sessions[session_id].in_flight == 0
        ]
        return min(idle)[1] if idle else None

    def reserve(self, principal: str) -> bool:
        """Hold a slot for a session about to be opened; whether one was free."""
        if self.count(principal) >= self.max_per_caller:
            return False
        self._principals.setdefault(principal, _Principal()).pending += 1
        return True

    def unreserve(self, principal: str) -> None:
        """Give back a slot held by :meth:`reserve`."""
        holder = self._principals.get(principal)
        if holder is not None and holder.pending > 0:
            holder.pending -= 1
            if not holder.sessions and not holder.pending:
                del self._principals[principal]

    def open(self, session_id: str, principal: str, subject: str | None) -> None:
        """Record a session just opened (with its opening request in flight)."""
        self._sessions[session_id] = _Session(principal, subject, self._clock())
        self._principals.setdefault(principal, _Principal()).sessions.add(session_id)

    def close(self, session_id: str) -> bool:
        """Forget a session (deleted, or no longer known to the SDK); whether it was open."""
        return self._drop(session_id) is not None

    def enter(self, session_id: str) -> None:
        """A request for this session started."""
        session = self._sessions.get(session_id)
        if session is not None:
            session.in_flight += 1

    def leave(self, session_id: str) -> None:
        """A request for this session ended: its idle period starts when none is left."""
        session = self._sessions.get(session_id)
        if session is not None:
            session.in_flight = max(0, session.in_flight - 1)
            if session.in_flight == 0:
                session.idle_since = self._clock()


class _BodyTooLargeError(Exception):
    pass


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, list[Message]]:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), [message]
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _BodyTooLargeError
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), []


def _replay(body: bytes, trailing: list[Message], receive: Receive) -> Receive:
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    pending.extend(trailing)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def _with_length(scope: Scope, body: bytes) -> Scope:
    headers = [(name, value) for name, value in scope["headers"] if name != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    return {**scope, "headers": headers}


class SessionGuard:
    """ASGI layer between authentication and the SDK's streamable HTTP app.

    It reads every POST body with :func:`~gateway.mcp._wire.read_jsonrpc` (a message that
    is not strict JSON, or not a JSON-RPC message, is answered 400 here, quoting nothing)
    and puts the message in the scope under
    :data:`MESSAGE_SCOPE_KEY`; it enforces session ownership, the per-principal cap and
    the session audit records. It expects :data:`PRINCIPAL_SCOPE_KEY` and the caller
    context in the scope (set by the authenticating layer in front of it).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        table: SessionTable,
        audit: AuditTrail | None,
        max_body_bytes: int,
        caller_key: str,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._app = app
        self._table = table
        self._audit = audit
        self._limit = max_body_bytes
        self._caller_key = caller_key
        self._wall = wall_clock

    @property
    def table(self) -> SessionTable:
        """The sessions open now."""
        return self._table

    def _record(
        self, event: str, session_id: str | None, caller: _Caller, reason: str | None = None
    ) -> asyncio.Future[dict[str, Any]] | None:
        if self._audit is None:
            return None
        record = {
            "type": "session",
            "time": _utc(self._wall()),
            "event": event,
            "session": session_digest(session_id) if session_id is not None else None,
            "principal": caller.principal,
            "subject": caller.subject,
            "reason": reason,
            "request_id": caller.request_id,
        }
        return asyncio.wrap_future(self._audit.sink.submit(record))

    def _note(self, future: asyncio.Future[dict[str, Any]] | None) -> None:
        # Closing and refusal records: the action happens either way; a failed write is logged.
        if future is not None:
            future.add_done_callback(_log_failed_record)

    def _flush_expired(self) -> None:
        for session_id, principal, subject in self._table.take_expired():
            _LOG.info("MCP session %s expired", session_digest(session_id))
            caller = _Caller(principal, subject, None)
            self._note(self._record("closed", session_id, caller, "expired"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        # The transport boundary: whatever answers (the SDK, a handler, this layer), no
        # protocol error in a JSON or SSE body quotes what the client sent.
        send = _PublicErrors(send)
        principal = scope.get(PRINCIPAL_SCOPE_KEY)
        context = scope.get(self._caller_key)
        if not isinstance(principal, str) or not isinstance(context, CallerContext):
            # Only reachable without the authenticating layer: never serve such a request.
            await _rpc_error("authentication required", 401)(scope, receive, send)
            return
        subject = context.get("subject")
        request_id = request_id_in(scope)
        caller = _Caller(
            principal,
            subject if isinstance(subject, str) else None,
            request_id if isinstance(request_id, str) else None,
        )
        scope = {**scope, _CALLER_KEY: caller}
        session_id = Headers(scope=scope).get(_SESSION_HEADER)
        try:
            if session_id is not None:
                await self._existing(scope, receive, send, session_id)
            else:
                await self._new(scope, receive, send)
        finally:
            self._flush_expired()

    async def _read(
        self, scope: Scope, receive: Receive, send: Send
    ) -> tuple[Scope, Receive] | None:
        """The scope and receive for the inner app after reading a POST (None: answered)."""
        if scope["method"] != "POST":
            return scope, receive
        try:
            body, trailing = await _read_body(receive, self._limit)
        except _BodyTooLargeError:
            await Response("Request body too large", status_code=413)(scope, receive, send)
            return None
        try:
            message, _ = read_jsonrpc(body)
        except WireError as error:
            response = _rpc_error(error.message, 400, code=error.code, request_id=error.request_id)
            await response(scope, receive, send)
            return None
        inner = _with_length(scope, message.body)
        inner[MESSAGE_SCOPE_KEY] = message
        return inner, _replay(message.body, trailing, receive)

    async def _existing(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session_id: str,
    ) -> None:
        caller: _Caller = scope[_CALLER_KEY]
        owner = self._table.owner(session_id)
        if owner != caller.principal:
            if owner is not None:
                _LOG.warning(
                    "MCP request %s named session %s of another principal",
                    caller.request_id,
                    session_digest(session_id),
                )
                self._note(self._record("refused", session_id, caller, "not_owner"))
            await not_found()(scope, receive, send)
            return
        read = await self._read(scope, receive, send)
        if read is None:
            return
        inner_scope, inner_receive = read
        status: list[int] = []
        left = False

        def leave() -> None:
            nonlocal left
            if not left:
                left = True
                self._table.leave(session_id)

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                leave()  # the request is over for the client once its last byte is sent
            await send(message)

        self._table.enter(session_id)
        try:
            await self._app(inner_scope, inner_receive, watch)
        finally:
            leave()
        code = status[0] if status else None
        if scope["method"] == "DELETE" and code is not None and 200 <= code < 300:
            if self._table.close(session_id):
                self._note(self._record("closed", session_id, caller, "deleted"))
        elif code == 404 and self._table.close(session_id):
            # The SDK no longer knows it (it ended on its own): free the slot.
            self._note(self._record("closed", session_id, caller, "ended"))

    async def _new(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller: _Caller = scope[_CALLER_KEY]
        read = await self._read(scope, receive, send)
        if read is None:
            return
        inner_scope, inner_receive = read
        message = inner_scope.get(MESSAGE_SCOPE_KEY)
        opening = message is not None and message.method == "initialize"
        if (
            opening
            and not self._table.reserve(caller.principal)
            and not await self._evict(inner_scope, caller)
        ):
            _LOG.warning("MCP request %s: the caller holds too many sessions", caller.request_id)
            self._note(self._record("refused", None, caller, "session_limit"))
            response = _rpc_error(
                f"Too many open sessions for this caller (at most {self._table.max_per_caller})",
                429,
                code=_TOO_MANY,
                request_id=message.request_id if message is not None else None,
            )
            await response(scope, receive, send)
            return
        opened: list[str] = []
        reserved = opening
        refused = False

        async def watch(event: Message) -> None:
            nonlocal refused, reserved
            if refused:
                return
            if event["type"] == "http.response.start" and event["status"] < 400:
                created = Headers(raw=event.get("headers", [])).get(_SESSION_HEADER)
                if created is not None:
                    admitted = await self._admit(created, caller, reserved=reserved)
                    if reserved:
                        # The reservation becomes the session (or is given back) now, not
                        # when the SDK's handling of this request finally returns.
                        self._table.unreserve(caller.principal)
                        reserved = False
                    if not admitted:
                        refused = True
                        response = _rpc_error("The session could not be opened", 503)
                        await response(scope, receive, send)
                        return
                    opened.append(created)
            elif event["type"] == "http.response.body" and not event.get("more_body"):
                while opened:
                    self._table.leave(opened.pop())
            await send(event)

        try:
            await self._app(inner_scope, inner_receive, watch)
        finally:
            if reserved:
                self._table.unreserve(caller.principal)
            while opened:
                self._table.leave(opened.pop())

    async def _evict(self, scope: Scope, caller: _Caller) -> bool:
        """End the caller's longest idle session to make room; whether a slot was reserved."""
        victim = self._table.oldest_idle(caller.principal)
        if victim is None:
            return False
        self._table.close(victim)
        _LOG.info("MCP session %s ended to open a newer one", session_digest(victim))
        self._note(self._record("closed", victim, caller, "evicted"))
        await self._terminate(scope, victim)
        return self._table.reserve(caller.principal)

    async def _terminate(self, scope: Scope, session_id: str) -> None:
        """End ``session_id`` in the SDK as its client's ``DELETE`` would (nothing is sent)."""
        headers = [
            (name, value)
            for name, value in scope.get("headers", [])
            if name not in (b"mcp-session-id", b"content-length", b"content-type", b"accept")
        ]
        headers.append((b"mcp-session-id", session_id.encode("latin-1")))
        inner = {**scope, "method": "DELETE", "headers": headers}
        inner.pop(MESSAGE_SCOPE_KEY, None)

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message: Message) -> None:
            return None

        try:
            await self._app(inner, receive, discard)
        except Exception:  # noqa: BLE001 - the slot is freed either way; the SDK expires it
            _LOG.warning("could not end MCP session %s in the SDK", session_digest(session_id))

    async def _admit(self, session_id: str, caller: _Caller, *, reserved: bool) -> bool:
        """Record a session the SDK just opened; whether its id may be handed out."""
        if not reserved and self._table.count(caller.principal) >= self._table.max_per_caller:
            self._note(self._record("refused", session_id, caller, "session_limit"))
            return False
        future = self._record("opened", session_id, caller)
        if future is not None:
            try:
                await future
            except Exception:  # noqa: BLE001 - audit-or-deny: an unrecorded session is not handed out
                _LOG.exception("could not record an MCP session; it is not opened")
                return False
        self._table.open(session_id, caller.principal, caller.subject)
        _LOG.info("MCP session %s opened", session_digest(session_id))
        return True


_EVENT_END: Final = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_DATA_LINE: Final = re.compile(rb"^(data:[ ]?)(.*?)(\r\n|\n|\r|$)", re.MULTILINE)


def _public_event(event: bytes) -> bytes:
    if b'"error"' not in event:
        return event
    return _DATA_LINE.sub(
        lambda line: line[1] + public_errors(line[2]) + line[3],
        event,
    )


class _PublicErrors:
    """An ASGI ``send`` that makes every JSON-RPC error of a JSON or SSE body public.

    See :func:`~gateway.mcp._wire.public_errors`. A JSON body is held until it is whole
    (its length may change; the start is sent with it). An event stream is passed on
    event by event, each once it is whole.
    """

    __slots__ = ("_buffer", "_kind", "_send", "_start")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._kind: str | None = None
        self._start: Message | None = None
        self._buffer = bytearray()

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            media = Headers(raw=message.get("headers", [])).get("content-type", "")
            if media.startswith("application/json"):
                self._kind, self._start = "json", message
                return
            self._kind = "sse" if media.startswith("text/event-stream") else None
            await self._send(message)
            return
        if kind != "http.response.body" or self._kind is None:
            await self._send(message)
            return
        more = bool(message.get("more_body", False))
        self._buffer += message.get("body", b"")
        if self._kind == "json":
            if not more:
                await self._json()
            return
        await self._events(more=more)

    async def _json(self) -> None:
        body = public_errors(bytes(self._buffer))
        self._buffer.clear()
        start, self._start = self._start, None
        assert start is not None  # noqa: S101 - a body follows its start
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self._send({**start, "headers": headers})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    async def _events(self, *, more: bool) -> None:
        buffer = self._buffer
        out = bytearray()
        position = 0
        for end in _EVENT_END.finditer(buffer):
            out += _public_event(bytes(buffer[position : end.start()])) + end[0]
            position = end.end()
        rest = bytes(buffer[position:])
        buffer.clear()
        if more:
            buffer += rest
        else:
            out += _public_event(rest)
        if out or not more:
            await self._send({"type": "http.response.body", "body": bytes(out), "more_body": more})


def _log_failed_record(future: asyncio.Future[dict[str, Any]]) -> None:
    if not future.cancelled() and future.exception() is not None:
        _LOG.error("could not write an MCP session audit record: %s", type(future.exception()))
