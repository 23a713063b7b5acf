"""ToolCall: an untrusted tool-call proposal, exactly as a model or caller sent it."""

from __future__ import annotations

from dataclasses import dataclass

from gateway._errors import InvalidToolCallError


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
            InvalidToolCallError: the id (checked first) or the name is empty or not text
                (an :class:`InvalidInvocationError`).
        """
        if not isinstance(self.id, str) or not self.id:
            raise InvalidToolCallError.because("ID must not be empty")
        if not _is_text(self.id):
            raise InvalidToolCallError.because("ID is not valid UTF-8 text")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidToolCallError.because("name must not be empty")
        if not _is_text(self.name):
            raise InvalidToolCallError.because("name is not valid UTF-8 text")
        if not isinstance(self.arguments, str | bytes | bytearray):
            raise InvalidToolCallError.because("arguments must be JSON text")


def _is_text(value: str) -> bool:
    # A lone surrogate cannot be encoded, audited or sent anywhere as UTF-8.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
