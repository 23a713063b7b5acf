"""ToolCall: an untrusted tool-call proposal, exactly as a model or caller sent it."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway._errors import InvalidToolCallError
from gateway._json import Decoded, Parsed


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
    # Set only by admitted_call (the strict decoding a surface already made of ``arguments``,
    # their canonical bytes) or decoded_call (the decoding another contract's admission
    # made of these very bytes), which admission then does not repeat. Not a field of the
    # call: not compared, not shown, not kept by dataclasses.replace.
    _parsed: Parsed | Decoded | None = field(default=None, init=False, repr=False, compare=False)

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


def admitted_call(call_id: str, name: str, arguments: Parsed) -> ToolCall:
    """A ToolCall whose arguments a surface decoded strictly: their canonical bytes.

    Admission (``Contract.prepare``) checks the decoded value (depth, schema, validator)
    instead of decoding the same bytes again; everything else about the call is untrusted
    as ever.
    """
    call = ToolCall(call_id, name, arguments.canonical)
    object.__setattr__(call, "_parsed", arguments)
    return call


def decoded_call(call_id: str, name: str, arguments: Decoded) -> ToolCall:
    """A ToolCall of arguments another contract admitted, with that admission's decoding.

    For a tool that hands an admitted call on to an inner contract (a registry's binding):
    the inner admission checks the same decoded value (depth, schema, validator) instead of
    decoding the same bytes again.
    """
    call = ToolCall(call_id, name, arguments.source)
    object.__setattr__(call, "_parsed", arguments)
    return call


def parsed_arguments(call: ToolCall) -> Parsed | None:
    """The strict decoding of ``call.arguments`` made by its surface, if any (see above)."""
    parsed = call._parsed  # noqa: SLF001 - the module's own private slot
    return parsed if isinstance(parsed, Parsed) and parsed.canonical is call.arguments else None


def decoded_arguments(call: ToolCall) -> Decoded | None:
    """The decoding of ``call.arguments`` another admission made, if any (see above)."""
    found = call._parsed  # noqa: SLF001 - the module's own private slot
    return found if isinstance(found, Decoded) and found.source is call.arguments else None
