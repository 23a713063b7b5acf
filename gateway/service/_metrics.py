"""Prometheus metrics of one service instance (its own registry, never the global one).

- ``gateway_calls_total{code}`` and ``gateway_call_seconds{code}``: every call by its result
  code (the one code table), and how long admission, decision and run took;
- ``gateway_decision_seconds{engine, source, result}``: how long the policy took to decide
  (``engine``: ``embedded`` or ``opa``; ``source``: ``engine`` or ``cache``; ``result``:
  ``allow``, ``deny`` or the no-decision code), the audit record excluded;
- ``gateway_decision_cache_*``: hits, misses, coalesced misses, evictions, entries, and the
  hit ratio since start;
- ``gateway_audit_pending_records``: records written and waiting for their fsync;
  ``gateway_audit_fsync_seconds``: how long each fsync of the trail took;
- ``gateway_http_requests_total{route, status}``;
- with ``[shadow]``: ``gateway_shadow_disagreements_total{change}`` and its siblings
  (:mod:`gateway.replay`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway._authorization import Authorization, Authorizer, Decision
from gateway.policy import DecisionCache

_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


class _CacheCollector(Collector):
    def __init__(self, cache: DecisionCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        stats = self._cache.stats()
        for name, value in (
            ("hits", stats.hits),
            ("misses", stats.misses),
            ("coalesced", stats.coalesced),
            ("evictions", stats.evictions),
        ):
            yield CounterMetricFamily(
                f"gateway_decision_cache_{name}", f"Decision cache {name}.", value=value
            )
        yield GaugeMetricFamily(
            "gateway_decision_cache_entries", "Decision cache entries.", value=stats.size
        )
        asked = stats.hits + stats.misses
        yield GaugeMetricFamily(
            "gateway_decision_cache_hit_ratio",
            "Decisions answered from the cache, of all asked, since start (0 before any).",
            value=stats.hits / asked if asked else 0.0,
        )


class _AuditCollector(Collector):
    def __init__(self, sink: Any) -> None:
        self._sink = sink

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # The file sink's records waiting for their fsync (read without its lock: a length).
        waiting = getattr(self._sink, "_waiters", ())
        yield GaugeMetricFamily(
            "gateway_audit_pending_records",
            "Audit records written and waiting for their fsync.",
            value=len(waiting),
        )


class GatewayMetrics:
    """Calls by result code, call latency, HTTP requests, and the decision cache."""

    def __init__(self, cache: DecisionCache | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter(
            "gateway_calls", "Tool calls by result code.", ["code"], registry=self.registry
        )
        self.latency = Histogram(
            "gateway_call_seconds",
            "Time to admit, authorize and run one call.",
            ["code"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "gateway_http_requests",
            "HTTP requests by route and status.",
            ["route", "status"],
            registry=self.registry,
        )
        self.decision_latency = Histogram(
            "gateway_decision_seconds",
            "Time the policy took to decide one call (the audit record excluded).",
            ["engine", "source", "result"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.fsync_latency = Histogram(
            "gateway_audit_fsync_seconds",
            "Time one fsync of the audit trail took.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        if cache is not None:
            self.registry.register(_CacheCollector(cache))
        self._by_code: dict[str, tuple[Any, Any]] = {}

    def watch_audit(self, sink: Any) -> None:
        """Export the audit sink's pending records (``gateway_audit_pending_records``)."""
        self.registry.register(_AuditCollector(sink))

    def timed_fsync(self, sync: Callable[[int], None]) -> Callable[[int], None]:
        """``sync`` (``os.fsync``), each call observed in ``gateway_audit_fsync_seconds``."""
        histogram = self.fsync_latency

        def timed(fd: int) -> None:
            started = time.perf_counter()
            try:
                sync(fd)
            finally:
                histogram.observe(time.perf_counter() - started)

        return timed

    def observe(self, code: str, seconds: float) -> None:
        """Count one call."""
        # The children of each code, bound once: no label lookup (and its lock) per call.
        children = self._by_code.get(code)
        if children is None:
            children = self._by_code[code] = (self.calls.labels(code), self.latency.labels(code))
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)


class TimedAuthorizer:
    """An authorizer whose every decision is timed in ``gateway_decision_seconds``.

    Args:
        inner: the policy's authorizer (with its cache).
        metrics: where the time goes.
        engine: the engine's kind (``embedded``, ``opa``): the ``engine`` label.
    """

    def __init__(self, inner: Authorizer, metrics: GatewayMetrics, *, engine: str) -> None:
        self._inner = inner
        self._histogram = metrics.decision_latency
        self._engine = engine
        # The histogram's child per (source, result), bound once.
        self._children: dict[tuple[str, str], Any] = {}

    @property
    def inner(self) -> Authorizer:
        """The timed authorizer."""
        return self._inner

    async def authorize(self, authorization: Authorization) -> bool | Decision:
        """The inner authorizer's answer, timed."""
        started = time.perf_counter()
        try:
            answer = await self._inner.authorize(authorization)
        except Exception as exc:
            code = getattr(exc, "code", None)
            self._observe("engine", code if isinstance(code, str) else "no_decision", started)
            raise
        if isinstance(answer, Decision):
            result = "allow" if answer.allowed is True else "deny"
            self._observe("cache" if answer.cached else "engine", result, started)
        else:
            self._observe("engine", "allow" if answer is True else "deny", started)
        return answer

    def _observe(self, source: str, result: str, started: float) -> None:
        child = self._children.get((source, result))
        if child is None:
            child = self._children[source, result] = self._histogram.labels(
                self._engine, source, result
            )
        child.observe(time.perf_counter() - started)
