"""The fault matrix: faults of a real OPA (and of a server standing in for it) under load.

For each fault, concurrent async callers drive calls through a :class:`gateway.server.Gateway`
(audit trail on a hash-chained JSON Lines file, a tool that counts its executions, no
decision cache so that every call asks the engine) while the fault is injected, held and
cleared. Afterwards every call is accounted for:

- **executions**: every execution the tool counted has an *allow* decision record with the
  same call id in the audit trail and was answered ``ok``; no call of a caller the policy
  denies, and no call refused at admission, ever ran;
- **codes**: every call made while the fault was in force got the fault's code; calls that
  straddle the fault's start or end got either the healthy answer or the fault's code;
- **recovery**: the time from the end of the fault (OPA back, policy restored, server
  healthy again) to the first successful allowed call, with no failures after it;
- **audit**: one decision record per call that reached the policy (or one refusal record
  per call refused at admission) and exactly one outcome record per call, codes matching
  what the caller got, and a trail that verifies.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from gateway import Invocation, ToolCall, ToolDefinition, ToolOutput
from gateway.audit import AuditTrail, JsonlFileSink, head_path, trail_files, verify
from gateway.policy import DecisionCache, OpaRestEngine, PolicyAuthorizer, caller_context
from gateway.server import Gateway
from gateway.testing import OpaServer
from reliability.front import FaultyFront, FrontMode
from reliability.opa import (
    CONFLICTING_POLICY,
    DENY_ALL_POLICY,
    NON_BOOLEAN_POLICY,
    UNDEFINED_POLICY,
    main_module,
)

#: The callers of the matrix, by kind: the shipped policy allows ``allowed`` to call ``add``
#: and denies ``denied``; ``invalid`` calls are refused at admission (never reach a policy).
CALLERS: Final[Mapping[str, Mapping[str, Any]]] = {
    "allowed": {"subject": "alice", "roles": ["reader"], "tenant": "acme"},
    "denied": {"subject": "bob", "roles": ["clerk"], "tenant": "globex"},
    "invalid": {"subject": "alice", "roles": ["reader"], "tenant": "acme"},
}
#: What each kind of call gets while the engine is healthy.
HEALTHY: Final[Mapping[str, str]] = {
    "allowed": "ok",
    "denied": "denied",
    "invalid": "invalid_arguments",
}
#: What a call may also get while a fault is injected or cleared (a transition): an engine
#: that is reloading or restarting may stall past the deadline, and that fails closed.
AT_A_TRANSITION: Final = frozenset({"engine_timeout"})
#: How long replacing OPA's main module may take: OPA recompiles every module while it
#: answers the callers, which takes seconds on a loaded machine.
_PUT_POLICY_TIMEOUT_S: Final = 60.0
#: Every code a call may get at all (README, "The service and the CLI").
DOCUMENTED_CODES: Final = frozenset(
    {
        "ok",
        "tool_failed",
        "tool_rejected",
        "malformed_request",
        "invalid_arguments",
        "unauthenticated",
        "token_expired",
        "denied",
        "unknown_tool",
        "body_too_large",
        "tool_error",
        "engine_unavailable",
        "engine_timeout",
        "undefined_decision",
        "malformed_decision",
        "engine_error",
        "no_decision",
        "audit_failed",
    }
)
#: The codes of "no decision": the tool did not run.
NO_DECISION_CODES: Final = frozenset(
    {
        "engine_unavailable",
        "engine_timeout",
        "undefined_decision",
        "malformed_decision",
        "engine_error",
        "no_decision",
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class Fault:
    """One fault of the matrix.

    Attributes:
        name: a short identifier.
        description: what is done to the engine.
        kind: ``kill``, ``pause``, ``policy`` or ``front``.
        expected: the code every call made while the fault is in force must get.
        policy: the replacement main module (``policy`` faults).
        mode: the front's behaviour (``front`` faults).
    """

    name: str
    description: str
    kind: str
    expected: str
    policy: str | None = None
    mode: FrontMode | None = None

    @property
    def via_front(self) -> bool:
        """Whether the gateway talks to OPA through the faulty front for this fault."""
        return self.kind == "front"


FAULTS: Final = (
    Fault(
        "opa_killed",
        "OPA killed (SIGKILL), then restarted on its port",
        "kill",
        "engine_unavailable",
    ),
    Fault(
        "opa_paused",
        "OPA frozen (SIGSTOP) past the timeout, then resumed",
        "pause",
        "engine_timeout",
    ),
    Fault(
        "policy_error",
        "policy replaced by conflicting complete rules (OPA answers 500)",
        "policy",
        "engine_error",
        policy=CONFLICTING_POLICY,
    ),
    Fault(
        "policy_undefined",
        "policy replaced by one whose decision is undefined",
        "policy",
        "undefined_decision",
        policy=UNDEFINED_POLICY,
    ),
    Fault(
        "policy_non_boolean",
        'policy replaced by one answering {"allow": "yes"}',
        "policy",
        "malformed_decision",
        policy=NON_BOOLEAN_POLICY,
    ),
    Fault(
        "front_garbage",
        "stand-in server answers 200 with a body that is not JSON",
        "front",
        "engine_error",
        mode=FrontMode.GARBAGE,
    ),
    Fault(
        "front_bad_gateway",
        "stand-in server answers 502 with an HTML page",
        "front",
        "engine_error",
        mode=FrontMode.BAD_GATEWAY,
    ),
    Fault(
        "front_slow_drip",
        "stand-in server drips the body one byte every 0.1 s",
        "front",
        "engine_timeout",
        mode=FrontMode.DRIP,
    ),
    Fault(
        "front_reset",
        "stand-in server resets connections (before and mid-answer)",
        "front",
        "engine_unavailable",
        mode=FrontMode.RESET,
    ),
)


@dataclasses.dataclass(frozen=True, slots=True)
class MatrixConfig:
    """How hard and how long each fault is driven.

    Attributes:
        callers: concurrent async callers.
        timeout: the engine's per-request deadline (s).
        baseline: healthy traffic before the fault (s).
        duration: how long the fault is held (s); at least twice ``timeout`` plus a
            margin, so that calls begin and time out entirely within a freeze.
        settle: traffic kept up after recovery (s); longer than ``timeout``, which the
            first calls after recovery may spend waiting behind OPA's backlog.
        recovery_limit: the longest wait for the first successful call after the fault (s).
        invalid_every: one call in this many is refused at admission.
    """

    callers: int = 32
    timeout: float = 1.0
    baseline: float = 1.0
    duration: float = 2.5
    settle: float = 2.0
    recovery_limit: float = 20.0
    invalid_every: int = 16

    def __post_init__(self) -> None:
        if self.callers < 1 or self.timeout <= 0 or self.invalid_every < 2:
            raise ValueError("callers, timeout and invalid_every must be positive")
        if self.duration < 2 * self.timeout + 0.2:
            raise ValueError("duration must exceed twice the timeout (plus 0.2 s)")
        if self.settle <= self.timeout:
            raise ValueError("settle must exceed the timeout (calls after it must be healthy)")


class CountingTool:
    """``add(a, b)``: counts every execution, by call id (thread-safe)."""

    def __init__(self) -> None:
        self._definition = ToolDefinition(
            "add",
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
            "Add two integers.",
        )
        self._lock = threading.Lock()
        self.executed: list[str] = []

    def definition(self) -> ToolDefinition:
        """The fixed definition of ``add``."""
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Count, then add."""
        with self._lock:
            self.executed.append(invocation.call_id)
        values = json.loads(invocation.arguments)
        return ToolOutput.from_text(str(values["a"] + values["b"]))


@dataclasses.dataclass(frozen=True, slots=True)
class CallRecord:
    """One call as its caller saw it (times from ``time.perf_counter``)."""

    call_id: str
    kind: str
    started: float
    ended: float
    code: str
    decision_id: str | None


@dataclasses.dataclass(slots=True)
class Timeline:
    """When the fault happened (``time.perf_counter``)."""

    injected: float = 0.0
    active: float = 0.0
    clearing: float = 0.0
    cleared: float = 0.0


class FaultEnvironment:
    """The real OPA, the faulty front before it, and how each fault is done and undone.

    Args:
        opa: a started OPA serving the shipped policies.
        front: a started :class:`FaultyFront` proxying to ``opa``.
        main_id: OPA's id of the shipped main module.
        main_text: its original text.
    """

    def __init__(self, opa: OpaServer, front: FaultyFront, main_id: str, main_text: str):
        self.opa = opa
        self.front = front
        self._main_id = main_id
        self._main_text = main_text

    def url_for(self, fault: Fault) -> str:
        """Where the gateway's engine points for this fault."""
        return self.front.url if fault.via_front else self.opa.url

    async def inject(self, fault: Fault) -> None:
        """Bring the fault about; returns once it is in force."""
        if fault.kind == "kill":
            await asyncio.to_thread(self.opa.kill)
        elif fault.kind == "pause":
            await asyncio.to_thread(self.opa.pause)
        elif fault.kind == "policy" and fault.policy is not None:
            await asyncio.to_thread(
                self.opa.put_policy, self._main_id, fault.policy, timeout=_PUT_POLICY_TIMEOUT_S
            )
        elif fault.kind == "front" and fault.mode is not None:
            self.front.set_mode(fault.mode)
        else:
            raise ValueError(f"fault {fault.name!r} cannot be injected")

    async def clear(self, fault: Fault) -> None:
        """End the fault; returns once the engine is healthy again."""
        if fault.kind == "kill":
            await asyncio.to_thread(self.opa.restart)
            # A restarted OPA reads the policy files again: restore that text from now on.
            self._main_id, self._main_text = await asyncio.to_thread(main_module, self.opa)
        elif fault.kind == "pause":
            await asyncio.to_thread(self.opa.resume)
        elif fault.kind == "policy":
            await asyncio.to_thread(
                self.opa.put_policy, self._main_id, self._main_text, timeout=_PUT_POLICY_TIMEOUT_S
            )
        elif fault.kind == "front":
            self.front.set_mode(FrontMode.PROXY)

    async def revoke(self) -> None:
        """Replace the main module by one that denies every call."""
        await asyncio.to_thread(
            self.opa.put_policy, self._main_id, DENY_ALL_POLICY, timeout=_PUT_POLICY_TIMEOUT_S
        )

    async def restore(self) -> None:
        """Put the shipped main module back."""
        await asyncio.to_thread(
            self.opa.put_policy, self._main_id, self._main_text, timeout=_PUT_POLICY_TIMEOUT_S
        )


class _Driver:
    """Concurrent callers through one gateway until told to stop."""

    def __init__(
        self, gateway: Gateway, prefix: str, config: MatrixConfig, *, distinct: int = 97
    ) -> None:
        self._gateway = gateway
        self._distinct = distinct
        self._prefix = prefix
        self._config = config
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.calls: list[CallRecord] = []
        self._first_ok: dict[float, asyncio.Future[float]] = {}

    def start(self) -> None:
        self._tasks = [
            asyncio.get_running_loop().create_task(self._worker(index))
            for index in range(self._config.callers)
        ]

    async def stop(self) -> None:
        self._stop.set()
        bound = self._config.timeout + 30.0
        done, pending = await asyncio.wait(self._tasks, timeout=bound)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for task in done:
            task.result()  # a crashed worker is a harness error, not a finding

    def _kind(self, worker: int, number: int) -> str:
        if number % self._config.invalid_every == self._config.invalid_every - 1:
            return "invalid"
        return "denied" if (worker + number) % 3 == 2 else "allowed"

    async def _worker(self, index: int) -> None:
        for number in itertools.count():
            if self._stop.is_set():
                return
            kind = self._kind(index, number)
            call_id = f"{self._prefix}-{index}-{number}"
            arguments = (
                json.dumps({"a": "not a number", "b": 1})
                if kind == "invalid"
                else json.dumps({"a": number % self._distinct, "b": index % 4})
            )
            started = time.perf_counter()
            with caller_context(CALLERS[kind]):
                try:
                    async with asyncio.timeout(self._config.timeout + 20.0):
                        result = await self._gateway.call(ToolCall(call_id, "add", arguments))
                    code, decision_id = result.code, result.decision_id
                except TimeoutError:
                    code, decision_id = "harness_timeout", None
            ended = time.perf_counter()
            self.calls.append(CallRecord(call_id, kind, started, ended, code, decision_id))
            if code == "ok":
                for after, future in list(self._first_ok.items()):
                    if started >= after and not future.done():
                        future.set_result(ended)

    async def first_ok_after(self, after: float, within: float) -> float | None:
        """When the first ``ok`` call that started at or after ``after`` ended."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._first_ok[after] = future
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=within)
        except TimeoutError:
            return None
        finally:
            del self._first_ok[after]


@dataclasses.dataclass(slots=True)
class FaultResult:
    """Everything measured and checked for one fault (times in seconds)."""

    fault: str
    description: str
    expected_code: str
    calls: int = 0
    calls_in_fault: int = 0
    codes: dict[str, int] = dataclasses.field(default_factory=dict)
    codes_in_fault: dict[str, int] = dataclasses.field(default_factory=dict)
    wrong_codes: int = 0
    wrong_code_examples: list[str] = dataclasses.field(default_factory=list)
    undocumented_codes: int = 0
    executions: int = 0
    unauthorized_executions: int = 0
    executions_not_ok: int = 0
    ok_not_executed: int = 0
    denied_caller_executions: int = 0
    fault_duration_s: float = 0.0
    clear_s: float = 0.0
    recovered: bool = False
    recovery_s: float | None = None
    failures_after_recovery: int = 0
    max_fault_latency_s: float = 0.0
    decision_records: int = 0
    outcome_records: int = 0
    refusal_records: int = 0
    lost_records: int = 0
    extra_records: int = 0
    mismatched_records: int = 0
    audit_problems: list[str] = dataclasses.field(default_factory=list)
    trail_verified: bool = False
    trail_records: int = 0
    trail_error: str | None = None

    @property
    def passed(self) -> bool:
        """Whether every property held."""
        return (
            self.unauthorized_executions == 0
            and self.executions_not_ok == 0
            and self.ok_not_executed == 0
            and self.denied_caller_executions == 0
            and self.wrong_codes == 0
            and self.undocumented_codes == 0
            and self.recovered
            and self.failures_after_recovery == 0
            and self.lost_records == 0
            and self.extra_records == 0
            and self.mismatched_records == 0
            and self.trail_verified
            and self.calls_in_fault > 0
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, with ``passed``."""
        return {**dataclasses.asdict(self), "passed": self.passed}


async def run_fault(
    environment: FaultEnvironment, fault: Fault, config: MatrixConfig, workdir: Path
) -> FaultResult:
    """Drive load through one fault and account for every call."""
    audit_path = workdir / fault.name / "audit.jsonl"
    sink = JsonlFileSink(audit_path, fsync="always")
    tool = CountingTool()
    timeline = Timeline()
    recovered_at: float | None = None
    async with OpaRestEngine(
        environment.url_for(fault), timeout=config.timeout, revision_interval=0.5
    ) as engine:
        gateway = Gateway([tool], authorizer=PolicyAuthorizer(engine), audit=AuditTrail(sink))
        driver = _Driver(gateway, fault.name, config)
        driver.start()
        try:
            await asyncio.sleep(config.baseline)
            timeline.injected = time.perf_counter()
            await environment.inject(fault)
            timeline.active = time.perf_counter()
            await asyncio.sleep(config.duration)
            timeline.clearing = time.perf_counter()
            await environment.clear(fault)
            timeline.cleared = time.perf_counter()
            recovered_at = await driver.first_ok_after(timeline.cleared, config.recovery_limit)
            await asyncio.sleep(config.settle)
        finally:
            with contextlib.suppress(Exception):
                if timeline.injected and not timeline.cleared:
                    await environment.clear(fault)
            await driver.stop()
    sink.close()
    return analyse(
        fault,
        calls=driver.calls,
        executed=list(tool.executed),
        timeline=timeline,
        recovered_at=recovered_at,
        audit_path=audit_path,
        drain_s=config.timeout,
    )


def _records(path: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for file in trail_files(path):
        with file.open("rb") as handle:
            records.extend(json.loads(line) for line in handle if line.strip())
    return records


def analyse(
    fault: Fault,
    *,
    calls: list[CallRecord],
    executed: list[str],
    timeline: Timeline,
    recovered_at: float | None,
    audit_path: Path,
    drain_s: float = 0.0,
) -> FaultResult:
    """Check every property of one fault run.

    ``drain_s`` (the engine's timeout): calls begun within it after the first success may
    still wait behind requests a frozen OPA received during the fault and answers first;
    they may end either way, later ones must be healthy.
    """
    result = FaultResult(fault.name, fault.description, fault.expected)
    result.calls = len(calls)
    result.codes = dict(collections.Counter(call.code for call in calls))
    result.fault_duration_s = timeline.clearing - timeline.active
    result.clear_s = timeline.cleared - timeline.clearing
    result.recovered = recovered_at is not None
    result.recovery_s = None if recovered_at is None else recovered_at - timeline.cleared
    _check_codes(result, fault, calls, timeline, recovered_at, drain_s=drain_s)
    _check_executions(result, calls, executed, audit_path)
    verdict = verify(trail_files(audit_path), head=head_path(audit_path))
    result.trail_verified = verdict.ok
    result.trail_records = verdict.records
    result.trail_error = verdict.error
    return result


def _note(result: FaultResult, text: str) -> None:
    result.wrong_codes += 1
    if len(result.wrong_code_examples) < 5:
        result.wrong_code_examples.append(text)


def _check_codes(
    result: FaultResult,
    fault: Fault,
    calls: Iterable[CallRecord],
    timeline: Timeline,
    recovered_at: float | None,
    *,
    drain_s: float,
) -> None:
    in_fault: collections.Counter[str] = collections.Counter()
    for call in calls:
        if call.code not in DOCUMENTED_CODES:
            result.undocumented_codes += 1
        healthy = HEALTHY[call.kind]
        if call.kind == "invalid":
            # Admission comes before any policy: no fault may change this answer.
            if call.code != healthy:
                _note(result, f"{call.call_id} (invalid): {call.code}")
            continue
        if call.ended < timeline.injected:
            if call.code != healthy:
                _note(result, f"{call.call_id} ({call.kind}, before the fault): {call.code}")
        elif call.started >= timeline.active and call.ended <= timeline.clearing:
            in_fault[call.code] += 1
            result.max_fault_latency_s = max(result.max_fault_latency_s, call.ended - call.started)
            if call.code != fault.expected:
                _note(result, f"{call.call_id} ({call.kind}, in the fault): {call.code}")
        elif recovered_at is not None and call.started >= recovered_at + drain_s:
            if call.code != healthy:
                result.failures_after_recovery += 1
                _note(result, f"{call.call_id} ({call.kind}, after recovery): {call.code}")
        elif call.code not in (healthy, fault.expected) and call.code not in AT_A_TRANSITION:
            _note(result, f"{call.call_id} ({call.kind}, at a transition): {call.code}")
    result.calls_in_fault = sum(in_fault.values())
    result.codes_in_fault = dict(in_fault)


def _check_executions(
    result: FaultResult, calls: list[CallRecord], executed: list[str], audit_path: Path
) -> None:
    by_id = {call.call_id: call for call in calls}
    records = _records(audit_path)
    decisions: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    outcomes: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for record in records:
        call_id = record.get("call_id")
        if call_id not in by_id:
            result.extra_records += 1
            _problem(result, f"record for an unknown call {call_id!r}")
            continue
        if record.get("type") == "decision":
            decisions[call_id].append(record)
            result.decision_records += 1
        elif record.get("outcome") == "invalid":
            outcomes[call_id].append(record)
            result.refusal_records += 1
        else:
            outcomes[call_id].append(record)
            result.outcome_records += 1
    allowed = {cid for cid, recs in decisions.items() if any(r["result"] == "allow" for r in recs)}
    counted = collections.Counter(executed)
    result.executions = len(executed)
    for call_id, times in counted.items():
        call = by_id.get(call_id)
        if call_id not in allowed:
            result.unauthorized_executions += times
        if call is None or call.code != "ok":
            result.executions_not_ok += times
        elif times > 1:
            result.executions_not_ok += times - 1  # one call ran more than once
        if call is not None and call.kind != "allowed":
            result.denied_caller_executions += times
    result.ok_not_executed = sum(
        1 for call in calls if call.code == "ok" and call.call_id not in counted
    )
    for call in calls:
        _check_call_records(
            result, call, decisions.get(call.call_id, []), outcomes.get(call.call_id, [])
        )


def _problem(result: FaultResult, text: str) -> None:
    if len(result.audit_problems) < 5:
        result.audit_problems.append(text)


def _check_call_records(
    result: FaultResult,
    call: CallRecord,
    decisions: list[dict[str, Any]],
    outcomes: list[dict[str, Any]],
) -> None:
    want_decisions = 0 if call.code in ("invalid_arguments", "unknown_tool") else 1
    if len(decisions) < want_decisions or not outcomes:
        result.lost_records += 1
        _problem(result, f"{call.call_id}: {len(decisions)} decision, {len(outcomes)} outcome")
        return
    if len(decisions) > want_decisions or len(outcomes) > 1:
        result.extra_records += 1
        _problem(result, f"{call.call_id}: {len(decisions)} decision, {len(outcomes)} outcome")
        return
    outcome = outcomes[0]
    if want_decisions == 0:
        if outcome.get("outcome") != "invalid" or outcome.get("code") != call.code:
            result.mismatched_records += 1
            _problem(result, f"{call.call_id}: refusal record {outcome.get('code')}")
        return
    decision = decisions[0]
    expected_result = {"ok": "allow", "denied": "deny"}.get(call.code, "error")
    expected_outcome = "executed" if call.code == "ok" else "rejected"
    expected_code = None if call.code == "ok" else call.code
    problems = []
    if decision.get("result") != expected_result:
        problems.append(f"decision result {decision.get('result')} for {call.code}")
    if expected_result == "error" and decision.get("code") != call.code:
        problems.append(f"decision code {decision.get('code')} for {call.code}")
    if outcome.get("outcome") != expected_outcome or outcome.get("code") != expected_code:
        problems.append(f"outcome {outcome.get('outcome')}/{outcome.get('code')} for {call.code}")
    if outcome.get("decision_id") != decision.get("decision_id"):
        problems.append("outcome not linked to its decision")
    if call.decision_id is not None and call.decision_id != decision.get("decision_id"):
        problems.append("caller's decision id is not the audited one")
    if problems:
        result.mismatched_records += 1
        _problem(result, f"{call.call_id}: {'; '.join(problems)}")


async def run_matrix(
    environment: FaultEnvironment,
    config: MatrixConfig,
    workdir: Path,
    faults: Iterable[Fault] = FAULTS,
) -> list[FaultResult]:
    """Every fault in turn, against the same OPA."""
    results = []
    for fault in faults:
        results.append(await run_fault(environment, fault, config, workdir))
    return results


@dataclasses.dataclass(slots=True)
class RevocationResult:
    """A permission revoked in OPA while the decision cache is on (times in seconds)."""

    calls: int = 0
    cache_hits: int = 0
    revision_interval_s: float = 0.0
    timeout_s: float = 0.0
    bound_s: float = 0.0
    revision_seen_s: float | None = None
    allows_after_change: int = 0
    last_allow_after_change_s: float | None = None
    denied_after_bound: int = 0
    allowed_again_s: float | None = None
    unauthorized_executions: int = 0
    executions_not_ok: int = 0
    lost_records: int = 0
    extra_records: int = 0
    mismatched_records: int = 0
    cached_allow_records: int = 0
    trail_verified: bool = False

    @property
    def passed(self) -> bool:
        """Stale allows stop within the bound; every execution still has an allow record."""
        stale_ok = (
            self.last_allow_after_change_s is None or self.last_allow_after_change_s <= self.bound_s
        )
        return (
            stale_ok
            and self.revision_seen_s is not None
            and self.allowed_again_s is not None
            and self.unauthorized_executions == 0
            and self.executions_not_ok == 0
            and self.lost_records == 0
            and self.extra_records == 0
            and self.mismatched_records == 0
            and self.trail_verified
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, with ``passed``."""
        return {**dataclasses.asdict(self), "passed": self.passed}


async def run_revocation(
    environment: FaultEnvironment,
    config: MatrixConfig,
    workdir: Path,
    *,
    revision_interval: float = 0.5,
    hold: float = 3.0,
) -> RevocationResult:
    """Revoke every permission in OPA under cached load; measure how long allows go on.

    The documented staleness bound with the REST engine is ``revision_interval + timeout``:
    the revision watcher sees the new policy, and the cache key changes with it.
    """
    audit_path = workdir / "revocation" / "audit.jsonl"
    sink = JsonlFileSink(audit_path, fsync="always")
    tool = CountingTool()
    cache = DecisionCache(max_ttl=30)
    seen: list[float] = []
    result = RevocationResult(
        revision_interval_s=revision_interval,
        timeout_s=config.timeout,
        bound_s=revision_interval + config.timeout,
    )
    changed = restoring = restored = 0.0
    allowed_again: float | None = None
    async with OpaRestEngine(
        environment.opa.url,
        timeout=config.timeout,
        revision_interval=revision_interval,
        on_revision_change=lambda _: seen.append(time.perf_counter()),
    ) as engine:
        gateway = Gateway(
            [tool], authorizer=PolicyAuthorizer(engine, cache=cache), audit=AuditTrail(sink)
        )
        driver = _Driver(gateway, "revocation", config, distinct=4)
        driver.start()
        try:
            await asyncio.sleep(max(config.baseline, 1.0))
            await environment.revoke()
            changed = time.perf_counter()
            await asyncio.sleep(hold)
            restoring = time.perf_counter()
            await environment.restore()
            restored = time.perf_counter()
            allowed_again = await driver.first_ok_after(restored, config.recovery_limit)
            await asyncio.sleep(config.settle)
        finally:
            with contextlib.suppress(Exception):
                if changed and not restored:
                    await environment.restore()
            await driver.stop()
    sink.close()
    calls = driver.calls
    result.calls = len(calls)
    result.cache_hits = cache.stats().hits
    after_change = [c for c in seen if c >= changed]
    result.revision_seen_s = after_change[0] - changed if after_change else None
    # Calls that began after the change and ended before the restore began.
    stale = [c for c in calls if c.code == "ok" and c.started >= changed and c.ended < restoring]
    result.allows_after_change = len(stale)
    result.last_allow_after_change_s = max((c.started - changed for c in stale), default=None)
    result.denied_after_bound = sum(
        1
        for c in calls
        if c.kind == "allowed"
        and c.code == "denied"
        and changed + result.bound_s <= c.started
        and c.ended < restoring
    )
    result.allowed_again_s = None if allowed_again is None else allowed_again - restored
    accounting = FaultResult("revocation", "", "denied")
    _check_executions(accounting, calls, list(tool.executed), audit_path)
    result.unauthorized_executions = accounting.unauthorized_executions
    result.executions_not_ok = accounting.executions_not_ok + accounting.ok_not_executed
    result.lost_records = accounting.lost_records
    result.extra_records = accounting.extra_records
    result.mismatched_records = accounting.mismatched_records
    result.cached_allow_records = sum(
        1 for r in _records(audit_path) if r.get("type") == "decision" and r.get("cached")
    )
    verdict = verify(trail_files(audit_path), head=head_path(audit_path))
    result.trail_verified = verdict.ok
    return result
