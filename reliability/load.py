"""Sustained concurrent traffic through the real HTTP service, with latency and memory figures.

The service is built from a configuration exactly as ``gateway serve`` builds it and served
by uvicorn (uvloop, httptools) on 127.0.0.1 in this process; the load generator is ``wrk``
(:mod:`reliability.wrk_mix`), a native process of its own, so that the callers cost the
service neither its interpreter nor much of the machine. It sends a fixed mix for a bounded
time, after a warm-up run: allowed calls (cached and uncached decisions), denied calls,
calls refused at admission, unknown tools and unauthenticated requests. Every answer must
be the one its kind expects; this process's resident memory (the service) is sampled
throughout; afterwards every answered call is found in the audit trail, and the executions
the tools counted match the ``ok`` answers (plus the calls still in flight when wrk stopped,
which the trail records as executed).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from gateway.audit import head_path, trail_files, verify
from gateway.testing import LiveServer
from reliability import tools, wrk_mix
from reliability.client import KINDS
from reliability.service import build

_MIB: Final = 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class LoadConfig:
    """How long and how hard.

    Attributes:
        callers: concurrent async callers.
        duration: seconds of measured traffic (after the warm-up).
        warmup: seconds of traffic before latency and memory are measured.
        sample_every: seconds between two memory samples.
        growth_limit_mib: memory growth after warm-up that is flagged (at least this).
        growth_limit_ratio: the same, as a share of the post-warm-up size.
    """

    callers: int = 32
    duration: float = 20.0
    warmup: float = 2.0
    sample_every: float = 0.25
    growth_limit_mib: float = 24.0
    growth_limit_ratio: float = 0.15


@dataclasses.dataclass(slots=True)
class LoadResult:
    """The figures of one load run (latencies in ms, memory in MiB)."""

    engine: str
    callers: int
    duration_s: float = 0.0
    requests: int = 0
    throughput_rps: float = 0.0
    by_kind: dict[str, int] = dataclasses.field(default_factory=dict)
    unexpected: int = 0
    unexpected_examples: list[str] = dataclasses.field(default_factory=list)
    transport_errors: int = 0
    server_errors: int = 0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    p50_ms_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    p99_ms_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0
    rss_max_mib: float = 0.0
    rss_growth_mib: float = 0.0
    rss_samples: int = 0
    memory_flagged: bool = False
    executions: int = 0
    ok_responses: int = 0
    #: Calls sent but not answered when wrk stopped (recorded in the trail all the same).
    in_flight: int = 0
    #: Of those, the ones whose tool ran (the trail's outcome says ``executed``).
    in_flight_executed: int = 0
    generator: str = "wrk"
    audit_records: int = 0
    audit_lost: int = 0
    audit_extra: int = 0
    trail_verified: bool = False
    trail_error: str | None = None

    @property
    def passed(self) -> bool:
        """No unexpected answer, no 5xx, memory not flagged, every call audited."""
        return (
            self.requests > 0
            and self.unexpected == 0
            and self.transport_errors == 0
            and self.server_errors == 0
            and not self.memory_flagged
            and self.executions == self.ok_responses + self.in_flight_executed
            and self.in_flight <= 2 * self.callers
            and self.audit_lost == 0
            and self.audit_extra == 0
            and self.trail_verified
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, with ``passed``."""
        return {**dataclasses.asdict(self), "passed": self.passed}


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """One request as the caller saw it (``started`` relative to the run's start)."""

    call_id: str
    kind: str
    started: float
    latency: float
    status: int
    code: str
    measured: bool


def rss_bytes() -> int:
    """This process's resident set size (``/proc/self/statm``), or 0 when unknown."""
    try:
        fields = Path("/proc/self/statm").read_text(encoding="ascii").split()
        return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile of ``values`` (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


async def _sample_memory(stop: asyncio.Event, every: float) -> list[tuple[float, int]]:
    samples = [(time.perf_counter(), rss_bytes())]
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every)
        samples.append((time.perf_counter(), rss_bytes()))
    return samples


async def run_load(engine: str, config: Mapping[str, Any], load: LoadConfig) -> LoadResult:
    """Serve the configured service and drive the mix through it for a bounded time."""
    tools.reset()
    audit_path = Path(config["audit"]["path"])
    service = await asyncio.to_thread(build, config)
    server = await asyncio.to_thread(LiveServer(service.app).start)
    stop = asyncio.Event()
    sampler = asyncio.get_running_loop().create_task(_sample_memory(stop, load.sample_every))
    try:
        with tempfile.TemporaryDirectory(prefix="reliability-load-") as name:
            folder = Path(name)
            warm = await asyncio.to_thread(
                wrk_mix.run,
                server.url,
                prefix=f"{engine}w",
                connections=load.callers,
                seconds=load.warmup,
                folder=folder,
            )
            measured_from = time.perf_counter()
            main = await asyncio.to_thread(
                wrk_mix.run,
                server.url,
                prefix=engine,
                connections=load.callers,
                seconds=load.duration,
                folder=folder,
            )
    finally:
        stop.set()
        memory = await sampler
        await asyncio.to_thread(server.stop)
    rows = wrk_mix.as_samples(warm, measured=False) + wrk_mix.as_samples(main, measured=True)
    samples = [Sample(*row) for row in rows]
    result = LoadResult(engine, load.callers)
    for run in (warm, main):
        if run.socket_errors is not None:
            result.transport_errors += 1
            result.unexpected_examples.append(f"wrk socket errors: {run.socket_errors}")
    _figures(result, samples, main.seconds)
    result.p50_ms, result.p90_ms, result.p99_ms = (
        main.percentiles_ms["50"],
        main.percentiles_ms["90"],
        main.percentiles_ms["99"],
    )
    result.max_ms = 0.0
    result.p50_ms_by_kind, result.p99_ms_by_kind = {}, {}
    _memory(result, [(at, value) for at, value in memory if at >= measured_from], load)
    result.executions = sum(tools.executions().values())
    _audit(result, samples, audit_path, prefixes=(f"{engine}w-", f"{engine}-"))
    return result


def _figures(result: LoadResult, samples: list[Sample], measured_s: float) -> None:
    measured = [sample for sample in samples if sample.measured]
    result.duration_s = measured_s
    result.requests = len(samples)
    result.throughput_rps = len(measured) / measured_s if measured_s > 0 else 0.0
    result.by_kind = dict(collections.Counter(sample.kind for sample in samples))
    for sample in samples:
        kind = KINDS[sample.kind]
        if sample.status >= 500:
            result.server_errors += 1
        if (sample.status, sample.code) != (kind.status, kind.code):
            result.unexpected += 1
            if len(result.unexpected_examples) < 5:
                result.unexpected_examples.append(
                    f"{sample.call_id} ({sample.kind}): {sample.status} {sample.code}"
                )
    latencies = [sample.latency * 1000 for sample in measured]
    result.p50_ms = percentile(latencies, 0.50)
    result.p90_ms = percentile(latencies, 0.90)
    result.p99_ms = percentile(latencies, 0.99)
    result.max_ms = max(latencies, default=0.0)
    per_kind: dict[str, list[float]] = collections.defaultdict(list)
    for sample in measured:
        per_kind[sample.kind].append(sample.latency * 1000)
    result.p50_ms_by_kind = {name: percentile(v, 0.5) for name, v in sorted(per_kind.items())}
    result.p99_ms_by_kind = {name: percentile(v, 0.99) for name, v in sorted(per_kind.items())}
    result.ok_responses = sum(1 for sample in samples if sample.status == 200)


def _memory(result: LoadResult, rss: list[tuple[float, int]], load: LoadConfig) -> None:
    values = [value for _, value in rss if value > 0]
    if not values:
        return
    result.rss_start_mib = values[0] / _MIB
    result.rss_end_mib = values[-1] / _MIB
    result.rss_max_mib = max(values) / _MIB
    result.rss_growth_mib = result.rss_end_mib - result.rss_start_mib
    result.rss_samples = len(values)
    limit = max(load.growth_limit_mib, load.growth_limit_ratio * result.rss_start_mib)
    result.memory_flagged = result.rss_growth_mib > limit


def _audit(
    result: LoadResult, samples: list[Sample], audit_path: Path, *, prefixes: tuple[str, ...]
) -> None:
    decisions: collections.Counter[str] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    known = {sample.call_id for sample in samples}
    in_flight: set[str] = set()
    for file in trail_files(audit_path):
        with file.open("rb") as handle:
            for line in handle:
                record = json.loads(line)
                result.audit_records += 1
                call_id = record.get("call_id")
                if (
                    call_id not in known
                    and isinstance(call_id, str)
                    and call_id.startswith(prefixes)
                ):
                    # Sent by wrk, not answered before it stopped.
                    in_flight.add(call_id)
                    if record.get("outcome") == "executed":
                        result.in_flight_executed += 1
                elif call_id not in known:
                    result.audit_extra += 1
                elif record.get("type") == "decision":
                    decisions[call_id] += 1
                else:
                    outcomes[call_id] += 1
    for sample in samples:
        kind = KINDS[sample.kind]
        want_decisions = 1 if kind.reaches_policy else 0
        want_outcomes = 1 if kind.audited else 0
        got_decisions, got_outcomes = decisions[sample.call_id], outcomes[sample.call_id]
        if got_decisions < want_decisions or got_outcomes < want_outcomes:
            result.audit_lost += 1
        elif got_decisions > want_decisions or got_outcomes > want_outcomes:
            result.audit_extra += 1
    result.in_flight = len(in_flight)
    verdict = verify(trail_files(audit_path), head=head_path(audit_path))
    result.trail_verified = verdict.ok
    result.trail_error = verdict.error
