"""ToolCall: an untrusted tool-call proposal, exactly as a model or caller sent it."""

from __future__ import annotations

from dataclasses import dataclass

from gateway._errors import InvalidInvocationError


@dataclass(frozen=True, slots=True)
class ToolCall:
    """An untrusted proposal to call a tool; nothing in it has been checked.

    Construction never fails, so a malformed proposal can still be refused (and audited) by
    :meth:`gateway.Contract.prepare`. ``arguments`` is raw JSON text or bytes; blank means
    ``{}``.
    """

    id: str
    name: str
    arguments: str | bytes = ""

    def validate(self) -> None:
        """Check the fields that the call itself owns: a non-empty id, then a non-empty name.

        Raises:
            InvalidInvocationError: the id (checked first) or the name is empty or not text.
        """
        if not isinstance(self.id, str) or not self.id:
            raise InvalidInvocationError("tool: invalid tool call: ID must not be empty")
        if not _is_text(self.id):
            raise InvalidInvocationError("tool: invalid tool call: ID is not valid UTF-8 text")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInvocationError("tool: invalid tool call: name must not be empty")
        if not _is_text(self.name):
            raise InvalidInvocationError("tool: invalid tool call: name is not valid UTF-8 text")
        if not isinstance(self.arguments, str | bytes | bytearray):
            raise InvalidInvocationError("tool: invalid tool call: arguments must be JSON text")


def _is_text(value: str) -> bool:
    # A lone surrogate cannot be encoded, audited or sent anywhere as UTF-8.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
