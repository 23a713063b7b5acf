"""Prometheus metrics of one service instance (its own registry, never the global one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

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
        if cache is not None:
            self.registry.register(_CacheCollector(cache))

    def observe(self, code: str, seconds: float) -> None:
        """Count one call."""
        self.calls.labels(code).inc()
        self.latency.labels(code).observe(seconds)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
