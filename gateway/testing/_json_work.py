"""JsonWork: counts the JSON decoding and encoding a piece of code does, by who asked."""

from __future__ import annotations

import collections
import sys
import threading
from types import TracebackType
from typing import Final

from gateway import _json

#: The kinds counted: strict parses of untrusted input, parses of trusted JSON (engine answers,
#: the gateway's own records) and canonical encodings.
KINDS: Final = ("parse", "parse_trusted", "canonical")


class JsonWork:
    """Counts the strict JSON work done while active (``with JsonWork() as work:``).

    Every strict parse, trusted parse and canonical encoding of the gateway's strict JSON
    module is counted under the module and function that asked for it (the first caller
    outside that module).

    For tests that pin how much work one call does: ``work.count("parse")`` in all,
    ``work.count("parse", "gateway._contract")`` by one module, ``work.by_caller`` for the
    detail. One at a time per process; calls from every thread are counted.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_caller: collections.Counter[tuple[str, str]] = collections.Counter()
        self._previous: _json.Observer | None = None

    def _note(self, kind: str) -> None:
        frame = sys._getframe(2)  # noqa: SLF001 - the caller of the observed function
        while frame.f_back is not None and frame.f_globals.get("__name__") == _json.__name__:
            frame = frame.f_back
        where = f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}"
        with self._lock:
            self.by_caller[(kind, where)] += 1

    def count(self, kind: str, module: str | None = None) -> int:
        """How many of ``kind`` were done (by callers in ``module``, when given)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        with self._lock:
            return sum(
                number
                for (seen, where), number in self.by_caller.items()
                if seen == kind and (module is None or where.rsplit(".", 1)[0] == module)
            )

    def reset(self) -> None:
        """Forget what was counted so far."""
        with self._lock:
            self.by_caller.clear()

    def __enter__(self) -> JsonWork:
        self._previous = _json.observe(self._note)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _json.observe(self._previous)
