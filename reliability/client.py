"""The load generator: concurrent httpx callers sending the request mix to one service.

It runs as its own process (``python -m reliability.client URL OUT --callers N --duration
S --warmup W --prefix P``) so that the callers and the service under test do not share one
interpreter lock; it writes one JSON document with every request's kind, start, latency,
status and code to ``OUT``. Only loopback URLs are accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import httpx


@dataclasses.dataclass(frozen=True, slots=True)
class RequestKind:
    """One kind of request in the mix, and the answer it must get.

    Attributes:
        name: the kind's name.
        api_key: the credentials sent (an unknown key for ``unauthenticated``).
        tool: the tool named in the call.
        status: the HTTP status it must get.
        code: the ``status`` (200) or ``code`` (errors) member it must get.
        arguments: the call's arguments, from the caller's request number.
        reaches_policy: whether the call is decided by the policy (one decision record).
        audited: whether the call gets an outcome or refusal record.
    """

    name: str
    api_key: str
    tool: str
    status: int
    code: str
    arguments: Callable[[int], Mapping[str, Any]]
    reaches_policy: bool
    audited: bool


KINDS: Final = {
    kind.name: kind
    for kind in (
        RequestKind(
            "allowed_cached",
            "reliability-key-alice",
            "add",
            200,
            "ok",
            lambda n: {"a": n % 50, "b": 2},
            reaches_policy=True,
            audited=True,
        ),
        RequestKind(
            "allowed_uncached",
            "reliability-key-carol",
            "pay",
            200,
            "ok",
            lambda n: {
                "from_account": "acct-acme-001",
                "to_account": "acct-acme-002",
                "amount": 1 + n % 9,
            },
            reaches_policy=True,
            audited=True,
        ),
        RequestKind(
            "denied",
            "reliability-key-bob",
            "add",
            403,
            "denied",
            lambda n: {"a": n % 50, "b": 3},
            reaches_policy=True,
            audited=True,
        ),
        RequestKind(
            "invalid_arguments",
            "reliability-key-alice",
            "add",
            400,
            "invalid_arguments",
            lambda n: {"a": "x", "b": n},
            reaches_policy=False,
            audited=True,
        ),
        RequestKind(
            "unknown_tool",
            "reliability-key-alice",
            "no_such_tool",
            404,
            "unknown_tool",
            lambda n: {},
            reaches_policy=False,
            audited=True,
        ),
        RequestKind(
            "unauthenticated",
            "reliability-key-mallory",
            "add",
            401,
            "unauthenticated",
            lambda n: {"a": 1, "b": 2},
            reaches_policy=False,
            audited=False,
        ),
    )
}
#: One cycle of the mix (16 requests): half allowed and cached, the rest spread out.
MIX: Final = (
    ["allowed_cached"] * 8
    + ["allowed_uncached"] * 3
    + ["denied"] * 2
    + ["invalid_arguments", "unknown_tool", "unauthenticated"]
)


class _Callers:
    # Each caller has its own client and connection, as independent agents would: one
    # shared httpx pool serving dozens of concurrent requests costs the caller more CPU
    # than the service spends answering them.
    def __init__(self, url: str, prefix: str) -> None:
        self._url = url
        self._prefix = prefix
        self.samples: list[list[Any]] = []
        self.transport_errors: list[str] = []

    async def worker(self, index: int, start: float, measured_from: float, until: float) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=self._url, timeout=30.0, limits=limits) as client:
            number = 0
            while time.perf_counter() < until:
                kind = KINDS[MIX[(index + number) % len(MIX)]]
                call_id = f"{self._prefix}-{index}-{number}"
                number += 1
                body = {"id": call_id, "name": kind.tool, "arguments": kind.arguments(number)}
                started = time.perf_counter()
                try:
                    response = await client.post(
                        "/v1/calls", json=body, headers={"X-API-Key": kind.api_key}
                    )
                except httpx.HTTPError as exc:
                    self.transport_errors.append(f"{call_id}: {type(exc).__name__}")
                    continue
                latency = time.perf_counter() - started
                try:
                    document = response.json()
                    member = "status" if response.status_code == 200 else "code"
                    code = str(document.get(member))
                except (ValueError, AttributeError):
                    code = "<not json>"
                self.samples.append(
                    [
                        call_id,
                        kind.name,
                        started - start,
                        latency,
                        response.status_code,
                        code,
                        started >= measured_from,
                    ]
                )


async def drive(
    url: str, *, callers: int, duration: float, warmup: float, prefix: str
) -> dict[str, Any]:
    """Send the mix with ``callers`` concurrent callers for ``warmup + duration`` seconds."""
    run = _Callers(url, prefix)
    start = time.perf_counter()
    measured_from = start + warmup
    until = measured_from + duration
    await asyncio.gather(
        *(run.worker(index, start, measured_from, until) for index in range(callers))
    )
    ended = time.perf_counter()
    return {
        "warmup_s": warmup,
        "elapsed_s": ended - start,
        "measured_s": ended - measured_from,
        "samples": run.samples,
        "transport_errors": run.transport_errors,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, drive the load, write the samples."""
    parser = argparse.ArgumentParser(prog="python -m reliability.client")
    parser.add_argument("url")
    parser.add_argument("out", type=Path)
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--prefix", default="load")
    args = parser.parse_args(argv)
    if urllib.parse.urlsplit(args.url).hostname != "127.0.0.1":
        parser.error("only http://127.0.0.1 URLs are driven")
    report = asyncio.run(
        drive(
            args.url,
            callers=args.callers,
            duration=args.duration,
            warmup=args.warmup,
            prefix=args.prefix,
        )
    )
    args.out.write_text(json.dumps(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
