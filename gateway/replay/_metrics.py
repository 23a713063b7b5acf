"""Prometheus metrics of shadow evaluation and the replay capture, read when scraped."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gateway.replay._capture import ReplayCapture
from gateway.replay._observe import DecisionTap
from gateway.replay._outcome import CHANGES
from gateway.replay._shadow import ShadowEvaluator


class ReplayCollector(Collector):
    """Counters of a :class:`ShadowEvaluator`, a :class:`ReplayCapture` and their tap.

    ``gateway_shadow_disagreements_total{change=...}`` counts every disagreement (one label
    value per change, zeros included); the others count evaluations, drops, budget
    overruns, failures, and capture records written and not written.
    """

    def __init__(
        self,
        *,
        shadow: ShadowEvaluator | None = None,
        capture: ReplayCapture | None = None,
        tap: DecisionTap | None = None,
    ) -> None:
        self._shadow = shadow
        self._capture = capture
        self._tap = tap

    def collect(self) -> Iterator[CounterMetricFamily]:
        """The current counts."""
        if self._shadow is not None:
            stats = self._shadow.stats()
            for name, value, text in (
                ("submitted", stats.submitted, "Calls handed to shadow evaluation."),
                ("dropped", stats.dropped, "Shadow evaluations dropped (queue full)."),
                ("evaluated", stats.evaluated, "Shadow evaluations finished."),
                ("agreed", stats.agreed, "Shadow evaluations that agreed."),
                ("timed_out", stats.timed_out, "Shadow evaluations past their budget."),
                ("failed", stats.failed, "Shadow evaluations or records that failed."),
            ):
                yield CounterMetricFamily(f"gateway_shadow_{name}", text, value=value)
            disagreements = CounterMetricFamily(
                "gateway_shadow_disagreements",
                "Shadow disagreements with the enforced decision, by change.",
                labels=["change"],
            )
            for change in CHANGES:
                disagreements.add_metric([change], stats.disagreed.get(change, 0))
            yield disagreements
        if self._capture is not None:
            yield CounterMetricFamily(
                "gateway_replay_captured",
                "Decisions captured for replay.",
                value=self._capture.written,
            )
            yield CounterMetricFamily(
                "gateway_replay_capture_failed",
                "Decisions that could not be captured for replay.",
                value=self._capture.failed,
            )
        if self._tap is not None:
            yield CounterMetricFamily(
                "gateway_replay_unobserved",
                "Decision records without the input their policy saw (not captured or shadowed).",
                value=self._tap.unobserved + self._tap.failed,
            )
