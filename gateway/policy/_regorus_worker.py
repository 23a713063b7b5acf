"""The process the embedded engine evaluates in: one regorus engine, one evaluation at a time.

regorus holds the GIL for a whole evaluation and cannot be interrupted, so an evaluation on
any thread of the gateway would stall its event loop, and one that runs away could never be
stopped. The embedded engine therefore evaluates in worker processes like this one: the
gateway waits on a pipe (the GIL released), and a worker past its deadline is killed.

This file imports only the standard library and regorus, so a worker starts in tens of
milliseconds; it is run as a script (``python -I <this file>``), never imported by a worker.
It reads frames (a 4-byte big-endian length, then the payload) on its standard input and
answers on its standard output:

* ``L`` + JSON ``{"modules": [[name, text], ...], "data": {...}}``: load a policy set (no
  answer; a failure is reported by the next evaluation).
* ``E`` + JSON ``{"rule": "data.a.b"}`` + newline + the input document: evaluate, answer
  JSON ``{"defined": bool, "value": ...}`` or ``{"error": kind, "detail": text}``.

It exits when its standard input closes.
"""

from __future__ import annotations

import functools
import json
import math
import os
import struct
import sys
from decimal import Decimal
from typing import Any, BinaryIO, Final

_MAX_DETAIL: Final = 500
_EXACT_INT_LIMIT: Final = 2**53
_HEADER: Final = struct.Struct(">I")
#: Error kinds a worker answers with.
INEXACT: Final = "inexact"
ENGINE: Final = "engine"
UNDEFINED_RULE: Final = "undefined_rule"


def detail(exc: BaseException) -> str:
    """The message of a regorus error, without the backtrace it appends under ``RUST_BACKTRACE``."""
    text = str(exc).split("\nStack backtrace:", 1)[0].split("\nstack backtrace:", 1)[0]
    return text[:_MAX_DETAIL]


def exact_in_binary64(number: int | Decimal) -> bool:
    """Whether regorus (binary64 numbers) compares ``number`` as OPA does.

    A number is safe when it maps to a double that no other decimal of the same or shorter
    form maps to: then rounding is injective and monotone on the values involved, so
    comparisons and equality come out as in OPA, which compares exactly. Integers must be
    exactly representable; decimals must round-trip through their shortest repr (19.99
    does; 1e400 and 0.1000000000000000001 do not).
    """
    try:
        as_float = float(number)
    except OverflowError:
        return False
    if not math.isfinite(as_float):
        return False
    if isinstance(number, int):
        return abs(number) <= _EXACT_INT_LIMIT or as_float == number
    return Decimal(repr(as_float)) == number


def _reject(name: str) -> Any:
    raise ValueError("non-finite number")


def has_inexact_number(encoded: bytes) -> bool:
    """Whether a JSON document holds a number binary64 cannot carry exactly."""
    stack: list[Any] = [json.loads(encoded, parse_float=Decimal, parse_constant=_reject)]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif (
            isinstance(node, int | Decimal)
            and not isinstance(node, bool)
            and not exact_in_binary64(node)
        ):
            return True
    return False


# Agents repeat the same small input documents: their verdicts are remembered by their bytes.
_has_inexact_cached = functools.lru_cache(maxsize=8192)(has_inexact_number)
_CACHEABLE: Final = 4096


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def plain(value: Any) -> Any:
    """A regorus value as JSON types: sets become lists sorted by their canonical JSON."""
    if isinstance(value, set | frozenset):
        return sorted((plain(item) for item in value), key=_canonical)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def _build(modules: list[list[str]], data: Any) -> Any:
    import regorus  # noqa: PLC0415 - only a worker needs it

    engine = regorus.Engine()
    for name, text in modules:
        engine.add_policy(name, text)
    engine.add_data_json(json.dumps(data))
    return engine


def _evaluate(engine: Any, rule: str, document: bytes) -> dict[str, Any]:
    cacheable = len(document) <= _CACHEABLE
    try:
        inexact = _has_inexact_cached(document) if cacheable else has_inexact_number(document)
    except (ValueError, RecursionError):
        return {"error": ENGINE, "detail": "input document is not JSON the engine can read"}
    if inexact:
        return {"error": INEXACT, "detail": "input holds a number binary64 cannot carry"}
    engine.set_input_json(document.decode("utf-8"))
    value = engine.eval_rule(rule)
    # eval_rule answers None both for undefined and for a rule whose value is null; only
    # the JSON form tells them apart (OPA reads null as a defined value).
    if value is None:
        return {"defined": engine.eval_rule_as_json(rule) == "null", "value": None}
    return {"defined": True, "value": plain(value)}


def answer(engine: Any, load_error: str | None, payload: bytes) -> bytes:
    """The answer to one ``E`` frame's payload."""
    head, _, document = payload.partition(b"\n")
    if load_error is not None:
        result: dict[str, Any] = {"error": ENGINE, "detail": load_error}
    elif engine is None:
        result = {"error": ENGINE, "detail": "no policy loaded"}
    else:
        try:
            result = _evaluate(engine, json.loads(head)["rule"], document)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            text = detail(exc)
            kind = UNDEFINED_RULE if "not a valid rule path" in text else ENGINE
            result = {"error": kind, "detail": text}
    try:
        return json.dumps(result, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        return json.dumps({"error": ENGINE, "detail": f"unencodable value: {exc}"}).encode()


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def serve(reader: BinaryIO, writer: BinaryIO) -> None:
    """Answer frames until the reader closes."""
    engine: Any = None
    load_error: str | None = None
    while True:
        header = _read_exactly(reader, _HEADER.size)
        if header is None:
            return
        payload = _read_exactly(reader, _HEADER.unpack(header)[0])
        if payload is None:
            return
        kind, body = payload[:1], payload[1:]
        if kind == b"L":
            engine = None
            try:
                loaded = json.loads(body)
                engine = _build(loaded["modules"], loaded["data"])
                load_error = None
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    raise
                load_error = "policy set failed to load: " + detail(exc)
            continue
        reply = answer(engine, load_error, body)
        writer.write(_HEADER.pack(len(reply)) + reply)
        writer.flush()


def main() -> None:
    """Serve on the standard streams (the gateway's pipes)."""
    # The streams are the protocol: nothing else may write to standard output.
    reader = os.fdopen(os.dup(0), "rb", buffering=0)
    writer = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    sys.stdin = sys.stdout = open(os.devnull, "r+")  # noqa: SIM115 - for good
    serve(reader, writer)


if __name__ == "__main__":
    main()
