"""Prometheus metrics: decision latency per engine, cache hit ratio, audit fsync and pending
records, per-code counters; and the Grafana dashboard in deploy/ queries only metrics that
exist."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Final

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import ToolCall
from gateway.audit import JsonlFileSink
from gateway.policy import (
    DEFAULT_DECISION_PATH,
    CallerContext,
    DecisionCache,
    EngineUnavailableError,
    PolicyAuthorizer,
)
from gateway.replay._metrics import ReplayCollector
from gateway.replay._shadow import ShadowEvaluator
from gateway.service import Gateway, GatewayMetrics
from gateway.service._metrics import TimedAuthorizer
from gateway.testing import GatedFsync, RecordingTool, StaticEngine

DASHBOARD: Final = (
    Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gateway-dashboard.json"
)
ALICE: Final = CallerContext(subject="alice")


def _samples(metrics: GatewayMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def _value(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    return _samples(metrics).get((name, tuple(sorted(labels.items()))), 0.0)


async def test_every_decision_is_timed_by_engine_source_and_result() -> None:
    down = {"now": False}

    def answer(document: Any) -> Any:
        if down["now"]:
            raise EngineUnavailableError("OPA is unreachable")
        allowed = document["arguments"].get("ok") is True
        return {"allow": allowed, "cache": {"ttl_s": 30}}

    metrics = GatewayMetrics()
    policy = PolicyAuthorizer(StaticEngine({DEFAULT_DECISION_PATH: answer}), cache=DecisionCache())
    gateway = Gateway(
        [RecordingTool("echo")],
        authorizer=TimedAuthorizer(policy, metrics, engine="opa"),
        metrics=metrics,
    )
    for arguments in ('{"ok": true}', '{"ok": true}', '{"ok": false}'):
        await gateway.call(ToolCall("c", "echo", arguments), caller=ALICE)
    down["now"] = True
    await gateway.call(ToolCall("c", "echo", '{"ok": 1}'), caller=ALICE)

    count = "gateway_decision_seconds_count"
    assert _value(metrics, count, engine="opa", source="engine", result="allow") == 1
    assert _value(metrics, count, engine="opa", source="cache", result="allow") == 1
    assert _value(metrics, count, engine="opa", source="engine", result="deny") == 1
    assert _value(metrics, count, engine="opa", source="engine", result="engine_unavailable") == 1
    assert _value(metrics, "gateway_calls_total", code="ok") == 2
    assert _value(metrics, "gateway_calls_total", code="denied") == 1
    assert _value(metrics, "gateway_calls_total", code="engine_unavailable") == 1


async def test_the_cache_hit_ratio_is_hits_of_all_decisions_asked() -> None:
    cache = DecisionCache()
    metrics = GatewayMetrics(cache)
    assert _value(metrics, "gateway_decision_cache_hit_ratio") == 0.0
    engine = StaticEngine({DEFAULT_DECISION_PATH: {"allow": True, "cache": {"ttl_s": 30}}})
    gateway = Gateway([RecordingTool("echo")], authorizer=PolicyAuthorizer(engine, cache=cache))
    for _ in range(4):
        await gateway.call(ToolCall("c", "echo", "{}"), caller=ALICE)
    assert _value(metrics, "gateway_decision_cache_hit_ratio") == 0.75
    assert _value(metrics, "gateway_decision_cache_hits_total") == 3


def test_every_fsync_of_the_trail_is_timed_and_records_waiting_for_it_are_counted(
    tmp_path: Path,
) -> None:
    metrics = GatewayMetrics()
    gate = GatedFsync()
    sink = JsonlFileSink(tmp_path / "audit.jsonl", sync_file=metrics.timed_fsync(gate))
    metrics.watch_audit(sink)
    try:
        gate.hold()
        writes = [
            threading.Thread(target=lambda: sink.submit({"n": 1}).result(10)) for _ in range(1)
        ]
        for write in writes:
            write.start()
        gate.wait_entered()
        sink.submit({"n": 2})  # waits for the next fsync, behind the one held
        assert _value(metrics, "gateway_audit_pending_records") == 1
        gate.release()
        for write in writes:
            write.join(10)
    finally:
        sink.close()
    assert _value(metrics, "gateway_audit_pending_records") == 0
    assert _value(metrics, "gateway_audit_fsync_seconds_count") >= 2
    assert gate.calls >= 2


def test_a_real_fsync_is_timed(tmp_path: Path) -> None:
    metrics = GatewayMetrics()
    sink = JsonlFileSink(tmp_path / "audit.jsonl", sync_file=metrics.timed_fsync(os.fsync))
    try:
        sink.submit({"n": 1}).result(10)
    finally:
        sink.close()
    assert _value(metrics, "gateway_audit_fsync_seconds_count") >= 1


# -- the Grafana dashboard ---------------------------------------------------------------------

_NAME = re.compile(r"\b(gateway_[a-z0-9_]+)\b")


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


@pytest.fixture
def every_metric(tmp_path: Path) -> set[str]:
    """Every sample name a fully configured service exposes once each metric has a sample."""
    cache = DecisionCache()
    metrics = GatewayMetrics(cache)
    sink = JsonlFileSink(tmp_path / "audit.jsonl", sync_file=metrics.timed_fsync(os.fsync))
    metrics.watch_audit(sink)
    shadow = ShadowEvaluator(StaticEngine({DEFAULT_DECISION_PATH: {"allow": True}}))
    metrics.registry.register(ReplayCollector(shadow=shadow))
    try:
        sink.submit({"n": 1}).result(10)
        metrics.observe("ok", 0.001)
        metrics.decision_latency.labels("embedded", "engine", "allow").observe(0.001)
        metrics.requests.labels("calls", "200").inc()
        names = {name for name, _ in _samples(metrics)}
    finally:
        sink.close()

    return names


def test_every_metric_the_dashboard_queries_exists(every_metric: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queried = {name for expr in _exprs(dashboard) for name in _NAME.findall(expr)}
    assert queried
    assert sorted(queried - every_metric) == []


def test_the_dashboard_is_a_grafana_dashboard_on_a_chosen_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"]
    assert [v["type"] for v in dashboard["templating"]["list"]] == ["datasource"]
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")")
