"""Relaying what an upstream sends about one client request back to that request's client.

While a client's request (a tool call, a resource read, a prompt) is forwarded to an upstream,
the front sets :data:`DOWNSTREAM` to a :class:`Downstream`: the way back to that request of that
client. The upstream side uses it for:

- progress: the upstream request carries the gateway's own progress token (unique on the
  upstream connection) exactly when the client's request carried one; each upstream progress
  notification for it is sent to the client under the client's token;
- log messages (``notifications/message``): sent only to a request whose client asked for
  them (``logging/setLevel`` before 2026-07-28, the request's ``_meta`` log level since), at or
  above the level it asked for;
- the upstream's requests to its client (``sampling/createMessage``, ``elicitation/create``,
  ``roots/list``), as server-to-client requests on that client request's stream (a client of
  a handshake revision) or as the request's ``InputRequiredResult`` (a 2026-07-28 client, see
  :class:`gateway.mcp._bridge.InputRounds`), with the client's answer relayed back; refused
  when the client did not offer the capability.

Attribution never guesses: an upstream message reaches a client only when it belongs to that
client's request in flight: by its progress token, by arriving in the request's own task (the
multi round-trip requests of 2026-07-28), or, for a message that names no request (a log
message; a server-to-client request before 2026-07-28), by being the only client request in
flight on that upstream connection. Anything else is dropped (a request is answered with an
error), so one client's messages never reach another client.
"""

from __future__ import annotations

import contextvars
from typing import Final, Protocol

import mcp_types as types

#: Syslog severities in increasing order (RFC 5424, as MCP names them).
LEVELS: Final[tuple[types.LoggingLevel, ...]] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)

#: A server-to-client request an upstream may send about a client's request.
InputRequest = types.CreateMessageRequest | types.ElicitRequest | types.ListRootsRequest


def at_least(level: str, threshold: str | None) -> bool:
    """Whether a message at ``level`` passes a client's ``threshold`` (``None``: none asked)."""
    if threshold is None or level not in LEVELS or threshold not in LEVELS:
        return False
    return LEVELS.index(level) >= LEVELS.index(threshold)


class Downstream(Protocol):
    """The way back to one client request."""

    @property
    def log_level(self) -> types.LoggingLevel | None:
        """The least severe level the client wants log messages at (``None``: none)."""
        ...

    @property
    def wants_progress(self) -> bool:
        """Whether the client's request carried a progress token."""
        ...

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """Send a progress notification for the request under the client's own token."""
        ...

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        """Send an upstream's log message (already checked against :attr:`log_level`)."""
        ...

    async def ask(
        self, request: InputRequest
    ) -> types.CreateMessageResult | types.ElicitResult | types.ListRootsResult | types.ErrorData:
        """Relay a server-to-client request to the client; its answer or an error."""
        ...


#: The client request being served in this task, if any.
DOWNSTREAM: contextvars.ContextVar[Downstream | None] = contextvars.ContextVar(
    "gateway_mcp_downstream", default=None
)
