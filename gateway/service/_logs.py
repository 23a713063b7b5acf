"""Operator logs: what failed, what recovered, what is served; text or JSON lines.

Every line here is one an operator can act on, and none ever quotes a value a caller sent:

- the engine: one line when it stops answering (with the result code only: an engine's own
  text can repeat the input document), one when it answers again;
- the audit sink: one line when a record cannot be written (the gateway's own message: a
  path, an error name), one when records are written again;
- upstream MCP servers: one line per connection state change (they call :class:`StateLog`);
- the start-up line: what is served, on which surface, by which engine and policy revision.

A component flapping between states cannot flood the log: :class:`StateLog` writes at most
one line per ``interval`` seconds for one component, and the next line it writes says how
many changes it did not. The state it reports is always the current one, so the last line
written is never stale once the interval has passed and the component is used again.

:func:`configure_logging` sets the process's logging from ``[log]``: the level, the line
format (``text`` or ``json``, one object a line), and below ``WARNING`` writes only the
gateway's own lines (:class:`OwnLinesOnly`): a library's debug line (the MCP SDK's, an HTTP
client's) can quote a message, and a message holds argument values. :class:`AccessLog` is
the optional access
log (``[log] access``): method, path without its query, status, duration, request id.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.service._config_models import LogTable

_LOG: Final = logging.getLogger("gateway.service")
ACCESS_LOG: Final = logging.getLogger("gateway.access")
#: The start-up line's logger: written whatever ``[log] level`` says (set by configure_logging).
STARTUP_LOG: Final = logging.getLogger("gateway.startup")

#: Log formats (``[log] format``).
LOG_FORMATS: Final = ("text", "json")
#: Log levels (``[log] level``).
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
#: Libraries whose lines may quote a message (a tool call's arguments among them): held at
#: WARNING whatever the gateway's own level (their lines are not even formatted; any other
#: library's are dropped by :class:`OwnLinesOnly`).
QUIET_LIBRARIES: Final = (
    "mcp",
    "httpx",
    "httpcore",
    "httpx2",
    "httpcore2",
    "sse_starlette",
    "aiohttp",
    "urllib3",
    "requests",
    "opentelemetry",
    "uvicorn.access",
)
#: Engine result codes that mean the engine could not answer (the call was refused).
ENGINE_DOWN_CODES: Final = frozenset({"engine_unavailable", "engine_timeout", "engine_error"})
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

Clock = Callable[[], float]


class StateLog:
    """One line per state change of one component, at most one line per ``interval`` s.

    Args:
        logger: where the lines go.
        component: how the lines name the component (``engine opa:http://...``).
        interval: the fewest seconds between two lines (0: every change is written).
        clock: a monotonic clock (injectable).
        initial: the state assumed before the first report (not written).
    """

    def __init__(
        self,
        logger: logging.Logger,
        component: str,
        *,
        interval: float = 10.0,
        clock: Clock = time.monotonic,
        initial: str = "up",
    ) -> None:
        self._logger = logger
        self._component = component
        self._interval = interval
        self._clock = clock
        self._logged = initial
        self._current = initial
        self._since = clock()
        self._last_line: float | None = None
        self._changes = 0

    @property
    def state(self) -> str:
        """The state last reported."""
        return self._current

    def report(self, state: str, *, level: int, text: str) -> bool:
        """Report the component's state now; whether a line was written.

        ``text`` says what the state means (``"is not answering (engine_timeout)"``); it is
        written only when ``state`` differs from the last state written and ``interval``
        seconds have passed since the last line.
        """
        if state != self._current:
            self._current = state
            self._changes += 1
        if state == self._logged:
            return False
        now = self._clock()
        if self._last_line is not None and now - self._last_line < self._interval:
            return False
        held = self._changes - 1
        since = now - self._since
        self._logged = state
        self._last_line = now
        self._since = now
        self._changes = 0
        extra = f"; {held} more change(s) in between not logged" if held > 0 else ""
        self._logger.log(
            level,
            "%s %s (%.1f s after the last change logged%s)",
            self._component,
            text,
            since,
            extra,
        )
        return True


def public_url(url: str) -> str:
    """``scheme://host:port`` of ``url``: never a user, password, path or query."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<unparsable url>"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}"


def engine_name(identity: str) -> str:
    """An engine identity as a log line shows it (a server URL without credentials)."""
    if identity.startswith("opa:"):
        return "opa:" + public_url(identity[len("opa:") :])
    return identity.split("@", 1)[0] if "://" in identity else identity


class ServiceLog:
    """The state lines of one service: its engine and its audit sink.

    The pipeline reports every engine answer and failure, and every audit write and
    failure; only the changes are written (rate-limited by :class:`StateLog`).
    """

    def __init__(
        self,
        engine: str,
        *,
        interval: float = 10.0,
        clock: Clock = time.monotonic,
        logger: logging.Logger = _LOG,
    ) -> None:
        self.engine = StateLog(
            logger, f"engine {engine_name(engine)}", interval=interval, clock=clock
        )
        self.audit = StateLog(logger, "audit trail", interval=interval, clock=clock)
        self._refused = 0

    def engine_failed(self, code: str) -> None:
        """The engine could not answer one call (``code``: its result code)."""
        self._refused += 1
        self.engine.report(
            code,
            level=logging.ERROR,
            text=f"is not answering ({code}): calls are refused until it answers again",
        )

    def engine_probed(self, healthy: bool) -> None:
        """The engine was asked whether it is ready (at start, or by a readiness probe)."""
        if healthy:
            if self.engine.state != "up":
                self.engine_answered()
            return
        self.engine.report(
            "engine_unavailable",
            level=logging.ERROR,
            text="is not ready (engine_unavailable): calls are refused until it answers",
        )

    def engine_answered(self) -> None:
        """The engine answered one call."""
        if self.engine.state == "up" and self._refused == 0:
            return
        refused, self._refused = self._refused, 0
        if not self.engine.report(
            "up", level=logging.WARNING, text=f"answers again ({refused} call(s) refused)"
        ):
            self._refused = refused

    def audit_failed(self, message: str) -> None:
        """A record could not be written (``message``: the sink's own, never a value)."""
        self.audit.report(
            "failing",
            level=logging.ERROR,
            text=f"cannot be written ({message}): calls are refused until it can",
        )

    def audit_written(self) -> None:
        """A record was written."""
        if self.audit.state != "up":
            self.audit.report("up", level=logging.WARNING, text="is written again")


@dataclass(frozen=True, slots=True)
class Startup:
    """What the start-up line says."""

    surface: str
    tools: tuple[str, ...]
    engine: str
    revision: str
    decision_path: str
    audit: str | None
    listening: str | None = None


def startup_line(startup: Startup) -> str:
    """The one start-up line: surface, where, the tools, engine, decision path, revision."""
    shown = ", ".join(startup.tools[:20]) + (" ..." if len(startup.tools) > 20 else "")
    where = f" on {startup.listening}" if startup.listening else ""
    audit = startup.audit if startup.audit is not None else "off"
    return (
        f"gateway {startup.surface}: serving {len(startup.tools)} tools{where} [{shown}]; "
        f"engine {engine_name(startup.engine)}, decision {startup.decision_path}, "
        f"policy revision {startup.revision}; audit {audit}"
    )


def log_startup(startup: Startup, logger: logging.Logger = STARTUP_LOG) -> None:
    """Write the start-up line."""
    logger.info("%s", startup_line(startup))


# -- formats -----------------------------------------------------------------------------------

_RESERVED: Final = frozenset(
    set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time``, ``level``, ``logger``, ``message`` and extras."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _RESERVED and not name.startswith("_"):
                line[name] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


JsonFormatter.converter = time.gmtime


def formatter(format_name: str) -> logging.Formatter:
    """The formatter of a ``[log] format``."""
    if format_name == "json":
        return JsonFormatter()
    text = logging.Formatter(TEXT_FORMAT)
    text.converter = time.gmtime
    return text


def quiet_libraries(names: Iterable[str] = QUIET_LIBRARIES) -> None:
    """Hold these libraries' loggers at WARNING at most (their debug lines quote messages)."""
    for name in names:
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)


#: Loggers whose lines below WARNING are written: the gateway's own, and uvicorn's server
#: lifecycle lines (never its access lines).
OWN_LOGGERS: Final = ("gateway", "uvicorn.error")


class OwnLinesOnly(logging.Filter):
    """Below WARNING, only the gateway's own lines pass; any library's are dropped.

    A library's debug and info lines can quote what it carries (an MCP message, an HTTP
    request), and that holds argument values; the gateway's own lines never do. Warnings
    and errors of every logger pass.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether the record is written."""
        if record.levelno >= logging.WARNING:
            return True
        name = record.name
        return any(name == own or name.startswith(own + ".") for own in OWN_LOGGERS)


def configure_logging(table: LogTable, *, stream: TextIO | None = None) -> logging.Handler:
    """Set the root logger from ``[log]``: one handler on ``stream`` (stderr), level, format."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(table.format))
    handler.addFilter(OwnLinesOnly())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(getattr(logging, table.level.upper()))
    STARTUP_LOG.setLevel(logging.INFO)  # one line an operator always wants
    if table.access:
        ACCESS_LOG.setLevel(logging.INFO)  # asked for: written whatever the level
    quiet_libraries()
    return handler


def check_log_table(table: LogTable) -> None:
    """Refuse a ``[log]`` value no logger takes (named by key, never quoting the value)."""
    from gateway.service._config_models import ConfigError  # noqa: PLC0415 - one-way import

    if table.format not in LOG_FORMATS:
        raise ConfigError(f"log.format: must be one of {', '.join(LOG_FORMATS)}")
    if table.level not in LOG_LEVELS:
        raise ConfigError(f"log.level: must be one of {', '.join(LOG_LEVELS)}")
    if table.state_interval_s < 0:
        raise ConfigError("log.state_interval_s: must be >= 0")


# -- the access log ----------------------------------------------------------------------------


class AccessLog:
    """ASGI middleware: one ``gateway.access`` line per HTTP request, after it is answered.

    The line has the method, the path without its query string (a query may carry values),
    the status, the duration and the request id; never a header or a body.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        clock: Clock = time.perf_counter,
        logger: logging.Logger = ACCESS_LOG,
        request_id_key: str = "gateway.request_id",
    ) -> None:
        self._app = app
        self._clock = clock
        self._logger = logger
        self._key = request_id_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = self._clock()
        status = 0
        request_id = "-"

        async def sending(message: Message) -> None:
            nonlocal status, request_id
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for name, value in message.get("headers", ()):
                    if name.lower() == b"x-request-id":
                        request_id = value.decode("latin-1")
            await send(message)

        try:
            await self._app(scope, receive, sending)
        finally:
            path = str(scope.get("path", ""))
            self._logger.info(
                "%s %s %d %.1f ms request %s",
                scope.get("method", "-"),
                path,
                status,
                (self._clock() - started) * 1000,
                request_id,
                extra={"method": scope.get("method", "-"), "path": path, "status": status},
            )
