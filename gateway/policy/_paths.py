"""Resolved-path facts: where a path argument really leads, for a gateway that sees the files.

A policy that checks a path *string* cannot see symbolic links: with one filesystem tool
serving several tenants, ``/srv/tenants/acme/link`` may point into another tenant's folder
and the tool follows it. Where the gateway sees the same filesystem as the tool (the same
host or volume, possibly mounted elsewhere), a :class:`PathView` resolves each configured
path argument with the operating system (:func:`os.path.realpath`, every symbolic link
followed) and hands the policy the result in ``input.facts``, beside the SQL facts:

.. code-block:: json

    {"/path": {"path": {"resolved": "/srv/tenants/globex/pay.csv", "exists": true}}}

or ``{"resolved": null, "error": "<category>"}`` when the path cannot be resolved (not
absolute, not text the filesystem can hold, outside the view, a symbolic link loop).
Resolution runs on every call and is never remembered: the filesystem changes under it.
A link changed between the decision and the tool's own open is not seen; one tool server
per tenant, confined to that tenant's folder, closes that window (``policies/README.md``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping
from typing import Any, Final

from gateway import _json
from gateway._numerals import array_index

#: The JSON pointer of an argument, e.g. ``/path`` (RFC 6901).
Pointer = str

_MAX_PATH_BYTES: Final = 4096


def _split_pointer(pointer: str) -> tuple[str, ...]:
    if not pointer.startswith("/"):
        raise ValueError(f"argument pointer must start with '/': {pointer!r}")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


class PathView:
    """Which path arguments of which tools to resolve, and where the gateway sees them.

    Args:
        tools: tool name (as the policy sees it) to the JSON pointers of its path arguments.
        mounts: a tool-side folder to the folder where this process sees it (e.g.
            ``{"/srv": "/mnt/srv"}``); paths under no mount are resolved as they are.
            Resolved paths are reported in the tool's namespace; one that leaves every
            mount has no tool-side name and is reported as ``outside_view``.

    Raises:
        ValueError: a pointer or a mount that is not absolute.
    """

    __slots__ = ("_mounts", "_tools")

    def __init__(
        self,
        tools: Mapping[str, Iterable[Pointer]],
        *,
        mounts: Mapping[str, str] | None = None,
    ) -> None:
        self._tools: dict[str, tuple[tuple[Pointer, tuple[str, ...]], ...]] = {
            name: tuple((p, _split_pointer(p)) for p in sorted(set(pointers)))
            for name, pointers in tools.items()
        }
        cleaned: list[tuple[str, str]] = []
        for outer, inner in (mounts or {}).items():
            if not (outer.startswith("/") and inner.startswith("/")):
                raise ValueError("mount folders must be absolute")
            # The local side as the OS names it, so resolved paths are found below it.
            local = os.path.realpath(inner)
            cleaned.append((outer.rstrip("/") or "/", local))
        # Longest tool-side folder first, so nested mounts win over their parents.
        self._mounts = tuple(sorted(cleaned, key=lambda m: -len(m[0])))

    def covers(self, tool: str) -> bool:
        """Whether this view resolves arguments of ``tool``."""
        return tool in self._tools

    def facts(self, tool: str, arguments: Any) -> dict[Pointer, dict[str, Any]]:
        """The path facts of one call, by argument pointer (absent arguments are skipped)."""
        found: dict[Pointer, dict[str, Any]] = {}
        for pointer, tokens in self._tools.get(tool, ()):
            value = _lookup(arguments, tokens)
            if value is not _ABSENT:
                found[pointer] = {"path": self.resolve(value)}
        return found

    def resolve(self, value: Any) -> dict[str, Any]:
        """The facts for one argument value (never raises)."""
        if not isinstance(value, str) or not value.startswith("/"):
            return _unresolved("not_absolute")
        if "\0" in value or len(value.encode("utf-8", "surrogatepass")) > _MAX_PATH_BYTES:
            return _unresolved("invalid")
        local = self._to_local(value)
        real = _realpath(local) if local is not None else "outside_view"
        if isinstance(real, str):
            return _unresolved(real)
        found, exists = real
        outer = self._to_tool(found)
        if outer is None:
            return _unresolved("outside_view")
        return {"resolved": outer, "exists": exists}

    def _to_local(self, path: str) -> str | None:
        for outer, inner in self._mounts:
            rest = _below(path, outer)
            if rest is not None:
                return inner + rest if inner != "/" else (rest or "/")
        return None if self._mounts else path

    def _to_tool(self, path: str) -> str | None:
        if not self._mounts:
            return path
        for outer, inner in sorted(self._mounts, key=lambda m: -len(m[1])):
            rest = _below(path, inner)
            if rest is not None:
                return outer + rest if outer != "/" else (rest or "/")
        return None


_ABSENT: Final = object()


def _lookup(value: Any, tokens: tuple[str, ...]) -> Any:
    for token in tokens:
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and (index := array_index(token)) is not None:
            if index >= len(value):
                return _ABSENT
            value = value[index]
        else:
            return _ABSENT
    return value


def _below(path: str, folder: str) -> str | None:
    # The remainder of path below folder ("" for the folder itself), or None.
    if folder == "/":
        return path
    if path == folder:
        return ""
    if path.startswith(folder + "/"):
        return path[len(folder) :]
    return None


def _realpath(path: str) -> tuple[str, bool] | str:
    # Every symbolic link followed; a missing tail is resolved lexically (it may be
    # created by the call). An error category instead of a path when there is none.
    try:
        return os.path.realpath(path, strict=True), True
    except FileNotFoundError:
        pass
    except OSError as exc:
        return "loop" if exc.errno == errno.ELOOP else "unreadable"
    except ValueError:
        return "invalid"
    try:
        return os.path.realpath(path), False
    except (OSError, ValueError):
        return "unreadable"


def _unresolved(category: str) -> dict[str, Any]:
    return {"resolved": None, "error": category}


def merge_path_facts(facts_json: bytes, path_facts: Mapping[Pointer, Mapping[str, Any]]) -> bytes:
    """The ``facts`` member with path facts added to each argument's entry (canonical JSON)."""
    if not path_facts:
        return facts_json
    facts: dict[str, Any] = _json.parse(facts_json, max_depth=10_000)
    arguments: dict[str, Any] = facts["arguments"]
    for pointer, entry in path_facts.items():
        arguments.setdefault(pointer, {}).update(entry)
    return _json.canonical(facts)
