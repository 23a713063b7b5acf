"""Carrying out the argument and output obligations.

Neither function ever quotes an argument or output value in what it raises.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final

from gateway import _json
from gateway._numerals import array_index
from gateway._output import Content, MediaContent, TextContent, ToolOutput
from gateway.obligations._model import (
    OutputWithheldError,
    RedactOutput,
    RewriteArguments,
    RewriteOperation,
    UnfulfilledObligationError,
    compiled,
)

#: The most output text (UTF-8 bytes, text items and strings together) a redaction scans.
MAX_REDACTED_BYTES: Final = 4 << 20
#: Pattern rounds before a redaction gives up (a replacement can join text into a match).
_ROUNDS: Final = 4
_DEPTH: Final = 10_000


def _unfulfilled(what: str) -> UnfulfilledObligationError:
    return UnfulfilledObligationError(f"rewrite_arguments: {what}")


def _child(container: Any, key: str) -> tuple[bool, Any]:
    if isinstance(container, dict):
        return (key in container, container.get(key))
    index = array_index(key) if isinstance(container, list) else None
    if index is not None and index < len(container):
        return True, container[index]
    return False, None


def _parent(document: Any, path: tuple[str, ...]) -> Any:
    node = document
    for token in path[:-1]:
        found, node = _child(node, token)
        if not found:
            return None
    return node if isinstance(node, dict | list) else None


def _clamped(current: Any, op: RewriteOperation) -> Any:
    if isinstance(current, bool) or not isinstance(current, int | Decimal):
        raise _unfulfilled("a clamped argument is not a number")
    value = Decimal(current)
    if op.minimum is not None and value < op.minimum:
        value = op.minimum
    if op.maximum is not None and value > op.maximum:
        value = op.maximum
    if value == current:
        return current
    if isinstance(current, int) and value == value.to_integral_value():
        return int(value)
    return value


def _apply(document: Any, op: RewriteOperation) -> None:
    parent = _parent(document, op.path)
    last = op.path[-1]
    if op.op == "remove":
        found, _ = _child(parent, last) if parent is not None else (False, None)
        if found:
            if isinstance(parent, dict):
                del parent[last]
            else:
                del parent[int(last)]
        return
    if parent is None:
        raise _unfulfilled("an operation's path has no parent in the arguments")
    found, current = _child(parent, last)
    if op.op == "clamp":
        if not found:
            raise _unfulfilled("a clamped argument is missing")
        new: Any = _clamped(current, op)
    else:
        assert op.value is not None  # noqa: S101 - a set operation always has its value
        new = _json.parse(op.value, max_depth=_DEPTH)
    if isinstance(parent, dict):
        parent[last] = new
    elif found:
        parent[int(last)] = new
    else:
        raise _unfulfilled("an operation's path has no element in the arguments")


def rewrite_arguments(arguments: bytes, obligations: tuple[RewriteArguments, ...]) -> bytes:
    """The argument document after every rewrite, as canonical JSON.

    The result still has to be admitted against the tool's schema.

    Raises:
        UnfulfilledObligationError: an operation cannot be carried out (a clamp of a
            missing or non-number value, a path without its parent).
    """
    try:
        document = _json.parse(arguments, max_depth=_DEPTH)
    except _json.StrictJSONError:
        raise _unfulfilled("the arguments are not a JSON document") from None
    for obligation in obligations:
        for op in obligation.operations:
            _apply(document, op)
    if not isinstance(document, dict):
        raise _unfulfilled("the rewritten arguments are not an object")
    return _json.canonical(document)


class _Budget:
    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_REDACTED_BYTES

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise OutputWithheldError("redact_output: the output is too large to redact")


def _redact_text(text: str, patterns: tuple[str, ...], replacement: str, budget: _Budget) -> str:
    if not patterns:
        return text
    for _ in range(_ROUNDS):
        changed = False
        for pattern in patterns:
            try:
                raw = text.encode("utf-8")
            except UnicodeEncodeError:
                raise OutputWithheldError("redact_output: the output is not valid text") from None
            budget.spend(len(raw))
            matches = compiled(pattern).finditer(text)
            spans = [m.span() for m in matches if m.end() > m.start()]
            if not spans:
                continue
            changed = True
            out: list[str] = []
            at = 0
            for start, end in spans:
                out += [text[at:start], replacement]
                at = end
            out.append(text[at:])
            text = "".join(out)
        if not changed:
            return text
    raise OutputWithheldError("redact_output: the patterns do not settle on this output")


def _redact_pointer(node: Any, tokens: tuple[str, ...], replacement: str) -> Any:
    if not tokens:
        return replacement
    head, rest = tokens[0], tokens[1:]
    if head == "*":
        if isinstance(node, dict):
            for key in node:
                node[key] = _redact_pointer(node[key], rest, replacement)
        elif isinstance(node, list):
            for index, item in enumerate(node):
                node[index] = _redact_pointer(item, rest, replacement)
        return node
    found, child = _child(node, head)
    if found:
        if isinstance(node, dict):
            node[head] = _redact_pointer(child, rest, replacement)
        else:
            node[int(head)] = _redact_pointer(child, rest, replacement)
    return node


def _redact_strings(node: Any, ob: RedactOutput, budget: _Budget) -> Any:
    if isinstance(node, str):
        return _redact_text(node, ob.patterns, ob.replacement, budget)
    if isinstance(node, list):
        return [_redact_strings(item, ob, budget) for item in node]
    if isinstance(node, dict):
        out = {}
        for key, item in node.items():
            if _redact_text(key, ob.patterns, ob.replacement, budget) != key:
                # A member name cannot be replaced without changing the document's shape.
                raise OutputWithheldError("redact_output: a member name matches a pattern")
            out[key] = _redact_strings(item, ob, budget)
        return out
    return node


def _redact_document(document: Any, ob: RedactOutput, budget: _Budget) -> Any:
    for pointer in ob.pointers:
        document = _redact_pointer(document, pointer, ob.replacement)
    return _redact_strings(document, ob, budget)


def _redact_item(item: Content, ob: RedactOutput, budget: _Budget) -> Content:
    if isinstance(item, MediaContent):
        raise OutputWithheldError("redact_output: media output cannot be redacted")
    text = item.text
    if ob.pointers:
        # Structured content is often repeated as text: such an item is redacted as the
        # document it is; any other text cannot be addressed by pointer and is withheld.
        budget.spend(len(text))
        try:
            document = _json.parse(text.encode("utf-8"), max_depth=_DEPTH)
        except (_json.StrictJSONError, UnicodeEncodeError):
            raise OutputWithheldError("redact_output: text output is not structured") from None
        redacted = _redact_document(document, ob, budget)
        return TextContent(_json.canonical(redacted).decode("utf-8"), item.citations)
    new = _redact_text(text, ob.patterns, ob.replacement, budget)
    return TextContent(new, item.citations) if new else TextContent(ob.replacement)


def redact_output(output: ToolOutput, obligations: tuple[RedactOutput, ...]) -> ToolOutput:
    """The output with every redaction carried out.

    Raises:
        OutputWithheldError: an obligation cannot be carried out on this output (media
            items, text that pointers cannot address, a member name matching a pattern,
            more than :data:`MAX_REDACTED_BYTES` to scan): no output may be returned.
    """
    if not obligations:
        return output
    budget = _Budget()
    content = output.content
    details = output.details
    for ob in obligations:
        content = tuple(_redact_item(item, ob, budget) for item in content)
        if details is not None:
            budget.spend(len(details))
            # Checked strictly when the output was made (ToolOutput): read as trusted.
            document = _json.parse_trusted(details)
            details = _json.canonical(_redact_document(document, ob, budget))
    return ToolOutput(content=content, details=details)
