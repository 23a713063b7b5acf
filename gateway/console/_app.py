"""The operator console's ASGI app: sign-in, pending approvals, decisions, replay results.

Security model (see docs/console.md):

- Sign-in: a form POSTs the person's API key or bearer token once; it is checked by the
  gateway's own :class:`~gateway.service.Authenticator` and never stored, logged or put in a
  URL. The identity must be a configured approver or auditor (by subject or role).
- Session: a random id in an ``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` and
  ``__Host-`` prefixed unless the console is reached over plain http on loopback); idle and
  absolute expiry; sign-out ends it on the server.
- CSRF: every state-changing form carries the session's synchronizer token (sign-in: a
  token bound to a short-lived cookie), and every POST must come with an ``Origin`` equal to
  the console's own (and ``Sec-Fetch-Site`` same-origin, when the browser sends it).
- Every response: a strict Content-Security-Policy (no script at all), ``nosniff``,
  ``Referrer-Policy: no-referrer``, ``Cache-Control: no-store``, ``X-Frame-Options: DENY``.
- Roles: an auditor reads; an approver reads and decides. Deciding also needs the
  approval's own role in the caller context, as the approval API requires.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jinja2
import jwt
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from gateway._numerals import ascii_digits
from gateway.approvals import (
    PENDING,
    Approval,
    ApprovalDesk,
    ApprovalError,
    ApprovalStore,
    may_decide,
)
from gateway.console._chart import decisions_chart
from gateway.console._replay import ReplayView, read_reports, shadow_summary
from gateway.console._sessions import APPROVER, AUDITOR, Session, SessionStore
from gateway.console._trail import FilterError, Filters, TrailReader, TrailStatus
from gateway.service import Authenticator, AuthFailure

_LOG: Final = logging.getLogger("gateway.console")
_HERE: Final = Path(__file__).parent
#: Every console response carries these.
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
MAX_FORM_BYTES: Final = 16 * 1024
MAX_CREDENTIAL: Final = 8192
MAX_COMMENT: Final = 500
LOGIN_COOKIE_AGE_S: Final = 600
_PAGE: Final = 50


#: Failed sign-ins one client address may make in a window, and the window.
SIGN_IN_FAILURES: Final = 10
SIGN_IN_WINDOW_S: Final = 300.0
#: The most client addresses whose failures are remembered (the oldest is forgotten first).
SIGN_IN_ADDRESSES: Final = 4096


class SignInThrottle:
    """Failed sign-ins per client address, at most ``limit`` in any ``window_s``.

    Memory is bounded: at most ``addresses`` addresses of ``limit`` times each.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        limit: int = SIGN_IN_FAILURES,
        window_s: float = SIGN_IN_WINDOW_S,
        addresses: int = SIGN_IN_ADDRESSES,
    ) -> None:
        self._clock = clock
        self._limit = limit
        self._window = window_s
        self._addresses = addresses
        self._failures: dict[str, list[float]] = {}

    def _recent(self, address: str, now: float) -> list[float]:
        times = [t for t in self._failures.get(address, ()) if now - t < self._window]
        if times:
            self._failures[address] = times
        else:
            self._failures.pop(address, None)
        return times

    def retry_after(self, address: str) -> int | None:
        """Seconds until ``address`` may try again, or ``None`` when it may now."""
        now = self._clock()
        times = self._recent(address, now)
        if len(times) < self._limit:
            return None
        return max(1, int(times[-self._limit] + self._window - now + 0.999))

    def failed(self, address: str) -> None:
        """Count one failed sign-in of ``address``."""
        now = self._clock()
        times = self._recent(address, now)
        times.append(now)
        self._failures.pop(address, None)
        self._failures[address] = times[-self._limit :]
        while len(self._failures) > self._addresses:
            del self._failures[next(iter(self._failures))]

    def succeeded(self, address: str) -> None:
        """Forget the failures of ``address``."""
        self._failures.pop(address, None)


def _segment(value: object) -> str:
    """``value`` percent-encoded as one path segment (all but letters, digits, ``-._~``)."""
    return urllib.parse.quote(str(value), safe="")


@dataclass(frozen=True, slots=True)
class ConsoleRoles:
    """Who may use the console: approvers and auditors, by subject or by role."""

    approvers: frozenset[str] = frozenset()
    approver_roles: frozenset[str] = frozenset()
    auditors: frozenset[str] = frozenset()
    auditor_roles: frozenset[str] = frozenset()

    def role_of(self, context: Any) -> str | None:
        """``approver``, ``auditor`` or ``None`` (not a console user) for a caller context."""
        subject = context.get("subject")
        if not isinstance(subject, str) or not subject:
            return None
        raw = context.get("roles")
        roles = {r for r in raw if isinstance(r, str)} if isinstance(raw, list) else set()
        if subject in self.approvers or roles & self.approver_roles:
            return APPROVER
        if subject in self.auditors or roles & self.auditor_roles:
            return AUDITOR
        return None


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class _FormTooLargeError(Exception):
    pass


async def _form(request: Request) -> FormData:
    declared = request.headers.get("content-length")
    if declared is not None and (not ascii_digits(declared) or int(declared) > MAX_FORM_BYTES):
        raise _FormTooLargeError
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise _FormTooLargeError
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise _FormTooLargeError
    try:
        pairs: list[tuple[str, str | Any]] = list(
            urllib.parse.parse_qsl(body.decode("utf-8", "replace"), max_num_fields=20)
        )
    except ValueError:  # more fields than any console form has
        raise _FormTooLargeError from None
    return FormData(pairs)


def _utc(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _comment_problem(comment: str) -> str | None:
    if not comment:
        return "a comment is required"
    if len(comment) > MAX_COMMENT:
        return f"the comment is longer than {MAX_COMMENT} characters"
    if not all(ch.isprintable() or ch in "\n\t" for ch in comment):
        return "the comment holds control characters"
    return None


class ConsoleApp:
    """The console, served at ``prefix`` by the HTTP service.

    Args:
        authenticator: the gateway's authenticator (the sign-in credential is checked by it).
        roles: who is an approver, who an auditor.
        sessions: the session store.
        prefix: the console's path (``/console``).
        desk: the approvers' desk (``None``: approvals are off; the view says so).
        store: the approval store the desk decides in (auditors list it read-only).
        trail: the audit trail reader (``None``: no trail configured).
        replay_reports: a folder of ``gateway replay --json`` reports.
        wall: seconds since the epoch (approval ages and expiry).
    """

    def __init__(
        self,
        *,
        authenticator: Authenticator,
        roles: ConsoleRoles,
        sessions: SessionStore,
        prefix: str = "/console",
        desk: ApprovalDesk | None = None,
        store: ApprovalStore | None = None,
        trail: TrailReader | None = None,
        replay_reports: Path | None = None,
        wall: Callable[[], float] = time.time,
        login_secret: bytes | None = None,
    ) -> None:
        self._auth = authenticator
        self._roles = roles
        self._sessions = sessions
        self.prefix = prefix.rstrip("/")
        self._desk = desk
        self._store = store
        self._trail = trail
        self._reports = replay_reports
        self._wall = wall
        self._login_secret = login_secret or secrets.token_bytes(32)
        self._throttle = SignInThrottle(wall)
        self._templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        # A value put into a link's path is one segment, whatever it holds (a report file's
        # decision id could carry "../", "?" or "#" and point the link elsewhere).
        self._templates.filters["segment"] = _segment
        self._css = (_HERE / "static" / "console.css").read_bytes()
        self._icon = (_HERE / "static" / "favicon.svg").read_bytes()
        p = self.prefix
        self._app = Starlette(
            routes=[
                Route(p, self.home, methods=["GET"]),
                Route(p + "/", self.home, methods=["GET"]),
                Route(p + "/static/console.css", self.css, methods=["GET"]),
                Route(p + "/static/favicon.svg", self.icon, methods=["GET"]),
                Route(p + "/login", self.login_form, methods=["GET"]),
                Route(p + "/login", self.login, methods=["POST"]),
                Route(p + "/logout", self.logout, methods=["POST"]),
                Route(p + "/approvals", self.approvals, methods=["GET"]),
                Route(p + "/approvals/{approval_id}", self.approval, methods=["GET"]),
                Route(p + "/approvals/{approval_id}", self.decide, methods=["POST"]),
                Route(p + "/decisions", self.decisions, methods=["GET"]),
                Route(p + "/decisions/{decision_id}", self.decision, methods=["GET"]),
                Route(p + "/replay", self.replay, methods=["GET"]),
            ],
            exception_handlers={
                404: self._not_found,
                405: self._not_allowed,
                Exception: self._failed,
            },
        )

    def handles(self, path: object) -> bool:
        """Whether a request path belongs to the console."""
        return isinstance(path, str) and (path == self.prefix or path.startswith(self.prefix + "/"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        started = False

        async def secured(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode("latin-1").lower() not in _LOWER_SECURITY
                ]
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self._app(scope, receive, secured)
        except Exception:  # noqa: BLE001 - sealed: nothing of the fault reaches the page
            # Starlette answers through _failed, then raises again: one answer per request.
            if not started:
                _LOG.exception("console: a request failed")
                await self._failed_page()(scope, receive, secured)

    async def _failed(self, request: Request, exc: Exception) -> Response:
        del request
        _LOG.error("console: a request failed", exc_info=exc)
        return self._failed_page()

    def _failed_page(self) -> HTMLResponse:
        return self._plain(503, "The console cannot answer now.")

    # -- plumbing -------------------------------------------------------------------------

    def _secure(self, request: Request) -> bool:
        # Secure cookies unless this is plain http on loopback (where a browser may drop a
        # Secure cookie set over http: Chromium keeps them for localhost only).
        if request.url.scheme == "https":
            return True
        client = request.client.host if request.client else None
        host = _host_name(request.headers.get("host", ""))
        return not (_loopback(client) and _loopback(host))

    def _cookie(self, request: Request) -> str:
        return "__Host-gateway-console" if self._secure(request) else "gateway-console"

    def _login_cookie(self, request: Request) -> str:
        return "__Host-gateway-login" if self._secure(request) else "gateway-login"

    def _session(self, request: Request) -> Session | None:
        return self._sessions.get(request.cookies.get(self._cookie(request)))

    def _render(
        self,
        request: Request,
        template: str,
        session: Session | None,
        code: int = 200,
        **values: Any,
    ) -> HTMLResponse:
        active = template.split(".", 1)[0].rstrip("s").replace("approval", "approvals")
        active = {"decision": "decisions"}.get(active, active)
        page = self._templates.get_template(template).render(
            prefix=self.prefix, session=session, active=active, **values
        )
        return HTMLResponse(page, status_code=code)

    def _plain(self, status: int, text: str) -> HTMLResponse:
        page = self._templates.get_template("message.html").render(
            prefix=self.prefix, session=None, title=text, text=text
        )
        return HTMLResponse(page, status_code=status)

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return self._plain(404, "No such page.")

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        return self._plain(405, "That method is not allowed here.")

    def _to_login(self) -> Response:
        return RedirectResponse(self.prefix + "/login", status_code=303)

    def _same_origin(self, request: Request) -> bool:
        # Every POST must name this console's own origin: browsers send Origin on every
        # form POST; a request without one is not taken. Under `Referrer-Policy:
        # no-referrer` Chromium sends `Origin: null` even for its own form: then the
        # browser's own Sec-Fetch-Site (a header no page can set) must say same-origin.
        origin = request.headers.get("origin")
        host = request.headers.get("host")
        site = request.headers.get("sec-fetch-site")
        if not origin or not host:
            return False
        if origin == "null":
            return site == "same-origin"
        if origin != f"{request.url.scheme}://{host}":
            return False
        return site is None or site == "same-origin"

    def _login_token(self, nonce: str) -> str:
        return hmac.new(self._login_secret, b"login\0" + nonce.encode(), hashlib.sha256).hexdigest()

    # -- sign-in --------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        """The console's root: the approvals (approver) or the decisions (auditor)."""
        session = self._session(request)
        if session is None:
            return self._to_login()
        target = "/approvals" if session.may_decide else "/decisions"
        return RedirectResponse(self.prefix + target, status_code=303)

    async def css(self, request: Request) -> Response:
        """The one stylesheet."""
        return Response(self._css, media_type="text/css")

    async def icon(self, request: Request) -> Response:
        """The page icon (so that the browser asks for no /favicon.ico)."""
        return Response(self._icon, media_type="image/svg+xml")

    def _login_page(self, request: Request, *, error: str | None, status: int = 200) -> Response:
        nonce = secrets.token_urlsafe(24)
        response = self._render(
            request, "login.html", None, status, error=error, token=self._login_token(nonce)
        )
        response.set_cookie(
            self._login_cookie(request),
            nonce,
            max_age=LOGIN_COOKIE_AGE_S,
            path="/",
            secure=self._secure(request),
            httponly=True,
            samesite="strict",
        )
        return response

    async def login_form(self, request: Request) -> Response:
        """``GET /login``: the sign-in form."""
        if self._session(request) is not None:
            return RedirectResponse(self.prefix + "/", status_code=303)
        return self._login_page(request, error=None)

    async def login(self, request: Request) -> Response:
        """``POST /login``: check the credential once, and start a session.

        A client address with :data:`SIGN_IN_FAILURES` failed sign-ins in the last
        :data:`SIGN_IN_WINDOW_S` seconds is refused (429, ``Retry-After``) without a look at
        its credential.
        """
        if not self._same_origin(request):
            return self._plain(403, "The form was not sent from this console.")
        address = request.client.host if request.client is not None else ""
        wait = self._throttle.retry_after(address)
        if wait is not None:
            _LOG.info("console sign-in refused: too many failed sign-ins from one address")
            refused = self._login_page(
                request, error="Too many failed sign-ins; try again later.", status=429
            )
            refused.headers["retry-after"] = str(wait)
            return refused
        response = await self._login(request)
        if response.status_code in (401, 403):
            self._throttle.failed(address)
        elif response.status_code == 303:
            self._throttle.succeeded(address)
        return response

    async def _login(self, request: Request) -> Response:
        try:
            form = await _form(request)
        except _FormTooLargeError:
            return self._plain(400, "The form could not be read.")
        nonce = request.cookies.get(self._login_cookie(request), "")
        token = form.get("csrf")
        expected = self._login_token(nonce) if nonce else ""
        if not expected or not isinstance(token, str) or not hmac.compare_digest(token, expected):
            return self._login_page(request, error="The form expired; sign in again.", status=403)
        credential = form.get("credential")
        if not isinstance(credential, str):
            credential = ""
        credential = credential.strip()
        failed = "Sign-in failed: the credential is not valid for this console."
        if not credential or len(credential) > MAX_CREDENTIAL:
            return self._login_page(request, error=failed, status=401)
        bearer = credential.count(".") == 2 and " " not in credential
        headers = {"authorization": "Bearer " + credential} if bearer else {"x-api-key": credential}
        try:
            identity = await self._auth.identify_async(headers)
        except AuthFailure as failure:
            _LOG.info("console sign-in refused: %s", failure.detail)
            return self._login_page(request, error=failed, status=401)
        role = self._roles.role_of(identity.context)
        if role is None:
            _LOG.info("console sign-in refused: the identity is neither approver nor auditor")
            return self._login_page(request, error=failed, status=403)
        expires_in = _token_lifetime(credential, self._wall()) if bearer else None
        session_id, session = self._sessions.create(
            identity.context, identity.principal, role, expires_in_s=expires_in
        )
        _LOG.info("console sign-in: %s as %s", session.subject, role)
        response = RedirectResponse(self.prefix + "/", status_code=303)
        response.set_cookie(
            self._cookie(request),
            session_id,
            path="/",
            secure=self._secure(request),
            httponly=True,
            samesite="strict",
        )
        response.delete_cookie(self._login_cookie(request), path="/")
        return response

    async def _checked(self, request: Request) -> tuple[Session, FormData] | Response:
        # A state-changing request: same origin, a live session, its synchronizer token.
        if not self._same_origin(request):
            return self._plain(403, "The form was not sent from this console.")
        session = self._session(request)
        if session is None:
            return self._to_login()
        try:
            form = await _form(request)
        except _FormTooLargeError:
            return self._plain(400, "The form could not be read.")
        if not session.csrf_ok(form.get("csrf")):
            return self._plain(403, "The form expired; open the page again.")
        return session, form

    async def logout(self, request: Request) -> Response:
        """``POST /logout``: end the session."""
        checked = await self._checked(request)
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        self._sessions.end(session)
        response = self._to_login()
        response.delete_cookie(self._cookie(request), path="/")
        return response

    # -- approvals ------------------------------------------------------------------------

    async def _pending(self) -> list[Approval]:
        if self._store is None:
            return []
        now = self._wall()
        every = await asyncio.to_thread(self._store.all)
        return [a for a in every if a.state(now) == PENDING]

    def _records(self) -> list[dict[str, Any]]:
        return [] if self._trail is None else self._trail.recent()[0]

    @staticmethod
    def _requested(
        approval_id: str, records: list[dict[str, Any]]
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        # The audit records of an approval's request and of the decision that asked for it.
        request = next(
            (
                r
                for r in records
                if r.get("type") == "approval"
                and r.get("approval_id") == approval_id
                and r.get("event") == "requested"
            ),
            None,
        )
        if request is None or not isinstance(request.get("decision_id"), str):
            return request, None
        decision = next(
            (
                r
                for r in records
                if r.get("type") == "decision" and r.get("decision_id") == request["decision_id"]
            ),
            None,
        )
        return request, decision

    def _approval_row(
        self, approval: Approval, now: float, records: list[dict[str, Any]]
    ) -> dict[str, Any]:
        request, decision = self._requested(approval.id, records)
        return {
            "id": approval.id,
            "tool": approval.key.tool,
            "subject": approval.subject or "(unknown)",
            "role": approval.role,
            "message": approval.message or "",
            "revision": approval.revision or "",
            "created": _utc(approval.created_at),
            "age": _duration(now - approval.created_at),
            "expires": _utc(approval.expires_at),
            "expires_in": _duration(approval.expires_at - now),
            "arguments_digest": approval.key.arguments_digest,
            "arguments": None if decision is None else _pretty(decision.get("arguments")),
            "reasons": [] if decision is None else [str(r) for r in decision.get("reasons", [])],
            "decision_id": None if request is None else request.get("decision_id"),
        }

    async def approvals(self, request: Request) -> Response:
        """``GET /approvals``: the pending approvals."""
        session = self._session(request)
        if session is None:
            return self._to_login()
        now = self._wall()
        try:
            pending = await self._pending()
            records = await asyncio.to_thread(self._records) if pending else []
            rows = [self._approval_row(a, now, records) for a in pending]
        except Exception:  # noqa: BLE001 - sealed
            _LOG.exception("console: approvals cannot be read")
            return self._render(
                request,
                "approvals.html",
                session,
                503,
                rows=[],
                enabled=True,
                unavailable=True,
                done=None,
            )
        done = request.query_params.get("done")
        return self._render(
            request,
            "approvals.html",
            session,
            rows=rows,
            enabled=self._store is not None,
            unavailable=False,
            done=done if done in ("approved", "rejected") else None,
        )

    async def approval(self, request: Request, *, error: str | None = None) -> Response:
        """``GET /approvals/{id}``: one approval, with the decision form for approvers."""
        session = self._session(request)
        if session is None:
            return self._to_login()
        if self._store is None:
            return self._plain(404, "No such approval.")
        approval = await asyncio.to_thread(self._store.get, request.path_params["approval_id"])
        if approval is None:
            return self._plain(404, "No such approval.")
        now = self._wall()
        state = approval.state(now)
        may_decide = session.may_decide and state == PENDING and self._holds(session, approval)
        return self._render(
            request,
            "approval.html",
            session,
            400 if error else 200,
            row=self._approval_row(approval, now, await asyncio.to_thread(self._records)),
            state=state,
            decided_by=approval.decided_by,
            may_decide=may_decide,
            error=error,
        )

    @staticmethod
    def _holds(session: Session, approval: Approval) -> bool:
        return may_decide(approval, session.context)

    async def decide(self, request: Request) -> Response:  # noqa: PLR0911 - one return per refusal
        """``POST /approvals/{id}``: approve or reject, with the approver's comment."""
        checked = await self._checked(request)
        if isinstance(checked, Response):
            return checked
        session, form = checked
        if not session.may_decide or self._desk is None:
            return self._plain(403, "Only an approver may approve or reject.")
        action = form.get("action")
        if action not in ("approve", "reject"):
            return self._plain(400, "Choose approve or reject.")
        raw = form.get("comment")
        comment = raw.strip() if isinstance(raw, str) else ""
        problem = _comment_problem(comment)
        if problem is not None:
            return await self.approval(request, error=problem.capitalize() + ".")
        approval_id = request.path_params["approval_id"]
        try:
            await self._desk.decide(
                approval_id, session.context, approve=action == "approve", comment=comment
            )
        except ApprovalError as error:
            status = {"approval_not_found": 404, "approver_not_allowed": 403}.get(error.code, 409)
            return self._plain(status, _APPROVAL_REFUSALS.get(error.code, "Not decided."))
        except Exception:  # noqa: BLE001 - sealed: nothing was decided
            _LOG.exception("console: the approval could not be decided")
            return self._plain(503, "Approvals cannot be decided now; nothing was decided.")
        _LOG.info("console: %s %s %s", session.subject, action, approval_id)
        done = "approved" if action == "approve" else "rejected"
        return RedirectResponse(f"{self.prefix}/approvals?done={done}", status_code=303)

    # -- decisions ------------------------------------------------------------------------

    def _status(self) -> TrailStatus | None:
        return None if self._trail is None else self._trail.status()

    async def decisions(self, request: Request) -> Response:
        """``GET /decisions``: the filterable table of recent decisions."""
        session = self._session(request)
        if session is None:
            return self._to_login()
        error = None
        try:
            filters = Filters.parse(request.query_params)
        except FilterError as exc:
            filters, error = Filters(), str(exc)
        page_text = request.query_params.get("page", "1")
        page = int(page_text) if ascii_digits(page_text) and 0 < len(page_text) < 7 else 1
        page = max(page, 1)
        if self._trail is None:
            rows, unreadable, status, chart = [], 0, None, ""
        else:
            found, unreadable = await asyncio.to_thread(self._trail.decisions, filters)
            status = await asyncio.to_thread(self._trail.status)
            chart = decisions_chart(found)
            rows = [] if error else found
        start = (page - 1) * _PAGE
        shown = rows[start : start + _PAGE]
        query = filters.query()
        return self._render(
            request,
            "decisions.html",
            session,
            400 if error else 200,
            rows=shown,
            total=len(rows),
            page=page,
            pages=max(1, -(-len(rows) // _PAGE)),
            filters=filters,
            query=query,
            error=error,
            status=status,
            unreadable=unreadable,
            chart=chart if not error else "",
            enabled=self._trail is not None,
            urlencode=urllib.parse.urlencode,
        )

    async def decision(self, request: Request) -> Response:
        """``GET /decisions/{id}``: every record of one decision."""
        session = self._session(request)
        if session is None:
            return self._to_login()
        decision_id = request.path_params["decision_id"]
        if self._trail is None or len(decision_id) > 200:
            return self._plain(404, "No such decision.")
        records = await asyncio.to_thread(self._trail.about, decision_id)
        if not records:
            return self._plain(404, "No such decision among the recent records.")
        shown = [
            {"type": r.get("type"), "time": r.get("time"), "text": _pretty(r)} for r in records
        ]
        return self._render(
            request,
            "decision.html",
            session,
            decision_id=decision_id,
            records=shown,
            status=await asyncio.to_thread(self._trail.status),
        )

    # -- replay ---------------------------------------------------------------------------

    async def replay(self, request: Request) -> Response:
        """``GET /replay``: shadow disagreements from the trail, and replay reports."""
        session = self._session(request)
        if session is None:
            return self._to_login()
        shadow = ReplayView.empty()
        if self._trail is not None:
            records, _ = await asyncio.to_thread(self._trail.recent)
            shadow = shadow_summary(records)
        reports = (
            [] if self._reports is None else await asyncio.to_thread(read_reports, self._reports)
        )
        return self._render(
            request,
            "replay.html",
            session,
            shadow=shadow,
            reports=reports,
            reports_folder=self._reports is not None,
        )


_LOWER_SECURITY: Final = frozenset(name.lower() for name in SECURITY_HEADERS)
_APPROVAL_REFUSALS: Final = {
    "approval_not_found": "No such approval.",
    "approver_not_allowed": "You may not decide this approval (its role, or it is your own call).",
    "approval_expired": "The approval has expired; nothing was decided.",
    "approval_decided": "The approval was already decided.",
}


def _token_lifetime(token: str, now: float) -> float | None:
    # Read only after the Authenticator verified the token: its exp bounds the session.
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return 0.0
    exp = claims.get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        return float(exp) - now
    return 0.0


def console_roles(
    approvers: Iterable[str] = (),
    approver_roles: Iterable[str] = (),
    auditors: Iterable[str] = (),
    auditor_roles: Iterable[str] = (),
) -> ConsoleRoles:
    """The console's roles from plain lists."""
    return ConsoleRoles(
        frozenset(approvers),
        frozenset(approver_roles),
        frozenset(auditors),
        frozenset(auditor_roles),
    )
