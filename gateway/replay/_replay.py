"""Replay: recorded decisions re-evaluated against a candidate policy, and the flip report.

The trail says which decisions were made (decision id, tool, result); the capture holds
each one's full input and outcome, encrypted. Every decision record of the trail is either
replayed (its input evaluated by the candidate and the outcomes compared) or reported as
not replayed with a reason code (see :data:`gateway.replay.REASONS`): nothing is skipped
silently. A capture record that fails authentication is never used.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gateway.audit import folder_chains, trail_files, writer_chains
from gateway.policy import EmbeddedEngine, PolicyEngine, normalize_path
from gateway.replay._capture import (
    AUTH_FAILURES,
    CONFLICTING,
    DUPLICATE,
    MISMATCH,
    NO_CAPTURE,
    REASONS,
    Captured,
    CaptureIndex,
    index_captures,
    open_capture,
)
from gateway.replay._keys import KeyRing
from gateway.replay._outcome import CHANGES, Outcome, change, decide

REPORT_VERSION: Final = 1
DEFAULT_EXAMPLES: Final = 20
DEFAULT_CONCURRENCY: Final = 16
NO_ROLES: Final = "(no roles)"

#: ``--fail-on`` tokens besides the changes themselves.
ANY_CHANGE: Final = "any-change"
UNREPLAYED: Final = "unreplayed"
AUTH_FAILURE: Final = "auth-failure"
FAIL_ON_TOKENS: Final = (*CHANGES, ANY_CHANGE, UNREPLAYED, AUTH_FAILURE)
DEFAULT_FAIL_ON: Final = frozenset({"deny-to-allow", "error-to-allow", AUTH_FAILURE})


def parse_fail_on(text: str) -> frozenset[str]:
    """Read a comma-separated ``--fail-on`` list (``none``: never fail).

    Raises:
        ValueError: an unknown token (the message lists the known ones).
    """
    tokens = {token.strip() for token in text.split(",") if token.strip()}
    if tokens == {"none"}:
        return frozenset()
    unknown = sorted(tokens - set(FAIL_ON_TOKENS))
    if unknown or not tokens:
        raise ValueError(
            f"unknown --fail-on {', '.join(unknown) or '(empty)'}; use none or any of "
            + ", ".join(FAIL_ON_TOKENS)
        )
    return frozenset(tokens)


def role_key(roles: Iterable[str] | None) -> str:
    """The report's caller-role key: the sorted roles joined by ``+``, or ``(no roles)``."""
    distinct = sorted(set(roles or ()))
    return "+".join(distinct) if distinct else NO_ROLES


@dataclass(frozen=True, slots=True)
class TrailDecision:
    """One decision record of a trail (what replay needs of it)."""

    decision_id: str
    tool: str
    result: str
    roles: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class ChangeExample:
    """A replayed decision whose outcome changed."""

    decision_id: str
    tool: str
    roles: str
    change: str
    recorded: Outcome
    candidate: Outcome

    def as_dict(self, *, show_text: bool) -> dict[str, Any]:
        """Plain JSON; messages and reasons only with ``show_text`` (they may quote inputs)."""

        def shown(outcome: Outcome) -> dict[str, Any]:
            value: dict[str, Any] = {"result": outcome.result, "code": outcome.code}
            if show_text:
                value.update(message=outcome.message, reasons=list(outcome.reasons))
            return value

        return {
            "decision_id": self.decision_id,
            "tool": self.tool,
            "roles": self.roles,
            "change": self.change,
            "recorded": shown(self.recorded),
            "candidate": shown(self.candidate),
        }


@dataclass(frozen=True, slots=True)
class NotReplayed:
    """A recorded decision that could not be replayed, and why (a reason code)."""

    decision_id: str
    tool: str
    reason: str


def _nested() -> collections.defaultdict[str, collections.Counter[str]]:
    return collections.defaultdict(collections.Counter)


@dataclass(slots=True)
class ReplayReport:
    """The flip report: what a candidate policy would change of the recorded decisions.

    Every decision record is counted once: ``decisions == replayed + not_replayed`` and
    ``replayed == unchanged + changed``; each changed decision has exactly one change and
    is counted once under its tool and once under its caller-role key.
    """

    candidate: str = ""
    revision: str = ""
    examples_wanted: int = DEFAULT_EXAMPLES
    list_all_unreplayed: bool = False
    decisions: int = 0
    replayed: int = 0
    unchanged: int = 0
    changes: collections.Counter[str] = field(default_factory=collections.Counter)
    by_tool: collections.defaultdict[str, collections.Counter[str]] = field(default_factory=_nested)
    by_role: collections.defaultdict[str, collections.Counter[str]] = field(default_factory=_nested)
    examples: list[ChangeExample] = field(default_factory=list)
    not_replayed: collections.Counter[str] = field(default_factory=collections.Counter)
    not_replayed_by_tool: collections.defaultdict[str, collections.Counter[str]] = field(
        default_factory=_nested
    )
    unreplayed: list[NotReplayed] = field(default_factory=list)
    captures_without_decision: int = 0
    malformed_capture_lines: list[str] = field(default_factory=list)
    unreadable_trail_lines: list[str] = field(default_factory=list)

    @property
    def changed(self) -> int:
        """Replayed decisions whose outcome changed."""
        return sum(self.changes.values())

    def add_replayed(
        self,
        decision_id: str,
        tool: str,
        roles: Iterable[str] | None,
        recorded: Outcome,
        candidate: Outcome,
    ) -> str | None:
        """Count one replayed decision; the change found, if any."""
        self.decisions += 1
        self.replayed += 1
        found = change(recorded, candidate)
        if found is None:
            self.unchanged += 1
            return None
        key = role_key(roles)
        self.changes[found] += 1
        self.by_tool[tool][found] += 1
        self.by_role[key][found] += 1
        if len(self.examples) < self.examples_wanted:
            self.examples.append(ChangeExample(decision_id, tool, key, found, recorded, candidate))
        return found

    def add_not_replayed(self, decision_id: str, tool: str, reason: str) -> None:
        """Count one decision that could not be replayed."""
        self.decisions += 1
        self.not_replayed[reason] += 1
        self.not_replayed_by_tool[tool][reason] += 1
        if self.list_all_unreplayed or len(self.unreplayed) < self.examples_wanted:
            self.unreplayed.append(NotReplayed(decision_id, tool, reason))

    @property
    def not_replayed_total(self) -> int:
        """Decisions that could not be replayed."""
        return sum(self.not_replayed.values())

    def auth_failures(self) -> int:
        """Capture records that cannot be trusted: per decision, plus unreadable lines."""
        per_decision = sum(n for reason, n in self.not_replayed.items() if reason in AUTH_FAILURES)
        return per_decision + len(self.malformed_capture_lines)

    def failures(self, fail_on: Iterable[str]) -> dict[str, int]:
        """The ``--fail-on`` tokens that apply, with their counts (empty: pass)."""
        counts: dict[str, int] = {}
        for token in sorted(set(fail_on)):
            if token == ANY_CHANGE:
                count = self.changed
            elif token == UNREPLAYED:
                count = self.not_replayed_total
            elif token == AUTH_FAILURE:
                count = self.auth_failures()
            else:
                count = self.changes.get(token, 0)
            if count:
                counts[token] = count
        return counts

    def as_dict(
        self, *, fail_on: Iterable[str] = DEFAULT_FAIL_ON, show_text: bool = False
    ) -> dict[str, Any]:
        """The machine-readable report (``gateway replay --json``)."""
        failures = self.failures(fail_on)
        return {
            "version": REPORT_VERSION,
            "candidate": {"engine": self.candidate, "revision": self.revision},
            "decisions": self.decisions,
            "replayed": self.replayed,
            "unchanged": self.unchanged,
            "changed": self.changed,
            "changes": {name: self.changes.get(name, 0) for name in CHANGES},
            "by_tool": _table(self.by_tool),
            "by_role": _table(self.by_role),
            "examples": [example.as_dict(show_text=show_text) for example in self.examples],
            "not_replayed": {
                "total": self.not_replayed_total,
                "by_reason": dict(sorted(self.not_replayed.items())),
                "by_tool": _table(self.not_replayed_by_tool),
                "reasons": {reason: REASONS[reason] for reason in sorted(self.not_replayed)},
                "decisions": [
                    {"decision_id": item.decision_id, "tool": item.tool, "reason": item.reason}
                    for item in self.unreplayed
                ],
            },
            "captures_without_decision": self.captures_without_decision,
            "malformed_capture_lines": self.malformed_capture_lines,
            "unreadable_trail_lines": self.unreadable_trail_lines,
            "fail_on": sorted(set(fail_on)),
            "failures": failures,
            "passed": not failures,
        }

    def to_text(self, *, fail_on: Iterable[str] = DEFAULT_FAIL_ON, show_text: bool = False) -> str:
        """The human-readable report."""
        lines = [
            f"replay against {self.candidate} (revision {self.revision or 'unknown'})",
            f"decisions {self.decisions}: replayed {self.replayed} (unchanged {self.unchanged}, "
            f"changed {self.changed}), not replayed {self.not_replayed_total}",
        ]
        if self.changed:
            lines.append("changes:")
            lines += [
                f"  {name:<16} {self.changes[name]}" for name in CHANGES if self.changes.get(name)
            ]
            lines.append("by tool:")
            lines += _rows(self.by_tool)
            lines.append("by caller role:")
            lines += _rows(self.by_role)
            lines.append(f"examples (first {len(self.examples)}):")
            for example in self.examples:
                lines.append(
                    f"  {example.decision_id}  {example.tool}  [{example.roles}]  "
                    f"{example.change}: {_shown(example.recorded, show_text)} -> "
                    f"{_shown(example.candidate, show_text)}"
                )
        if self.not_replayed_total:
            lines.append("not replayed:")
            for reason, count in sorted(self.not_replayed.items()):
                lines.append(f"  {reason:<16} {count}  ({REASONS[reason]})")
            lines.append(f"  decisions (first {len(self.unreplayed)}):")
            lines += [
                f"    {item.decision_id}  {item.tool}  {item.reason}" for item in self.unreplayed
            ]
        if self.captures_without_decision:
            lines.append(
                f"capture records naming no decision of the trail: {self.captures_without_decision}"
            )
        for place in self.malformed_capture_lines[: self.examples_wanted]:
            lines.append(f"malformed capture line: {place}")
        for place in self.unreadable_trail_lines[: self.examples_wanted]:
            lines.append(f"unreadable trail line: {place}")
        failures = self.failures(fail_on)
        verdict = ", ".join(f"{token} {count}" for token, count in failures.items())
        lines.append(f"result: FAIL ({verdict})" if failures else "result: pass")
        return "\n".join(lines) + "\n"


def _table(
    table: collections.defaultdict[str, collections.Counter[str]],
) -> dict[str, dict[str, int]]:
    return {key: dict(sorted(counts.items())) for key, counts in sorted(table.items())}


def _rows(table: collections.defaultdict[str, collections.Counter[str]]) -> list[str]:
    return [
        f"  {key:<24} " + "  ".join(f"{name} {count}" for name, count in sorted(counts.items()))
        for key, counts in sorted(table.items())
    ]


def _shown(outcome: Outcome, show_text: bool) -> str:
    text = (
        outcome.result if outcome.code in (None, "denied") else f"{outcome.result} ({outcome.code})"
    )
    if show_text and outcome.message is not None:
        text += f" {json.dumps(outcome.message, ensure_ascii=False)}"
    return text


# -- reading the trail ----------------------------------------------------------------------


def _chain_files(trail: Path) -> list[Path]:
    chains = folder_chains(trail) if trail.is_dir() else writer_chains(trail)
    return [path for chain in chains for path in trail_files(chain)]


def trail_decisions(trail: Path, unreadable: list[str]) -> Iterator[TrailDecision]:
    """The decision records of a trail (a folder, or its file as configured), in order.

    Lines that are not records are noted in ``unreadable`` (``file:line``).

    Raises:
        OSError: a file cannot be read.
    """
    for path in _chain_files(trail):
        with path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):
                    unreadable.append(f"{path}:{number}")
                    continue
                if not isinstance(record, dict):
                    unreadable.append(f"{path}:{number}")
                    continue
                if record.get("type") != "decision":
                    continue
                decision_id, tool = record.get("decision_id"), record.get("tool")
                if not isinstance(decision_id, str) or not isinstance(tool, str):
                    unreadable.append(f"{path}:{number}")
                    continue
                context = record.get("context")
                roles = context.get("roles") if isinstance(context, dict) else None
                yield TrailDecision(
                    decision_id,
                    tool,
                    str(record.get("result")),
                    tuple(r for r in roles if isinstance(r, str))
                    if isinstance(roles, list)
                    else None,
                )


# -- replaying ------------------------------------------------------------------------------


def _opened(
    decision: TrailDecision, index: CaptureIndex, keyring: KeyRing | None
) -> Captured | str:
    if decision.decision_id in index.conflicting:
        return CONFLICTING
    line = index.read(decision.decision_id)
    if line is None:
        return NO_CAPTURE
    opened = open_capture(line, decision.decision_id, keyring)
    if isinstance(opened, str):
        return opened
    if opened.tool != decision.tool or opened.recorded.result != decision.result:
        return MISMATCH
    return opened


async def replay(
    trail: Path,
    engine: PolicyEngine,
    *,
    path: str,
    capture: Path | None = None,
    keyring: KeyRing | None = None,
    report: ReplayReport | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> ReplayReport:
    """Replay every decision record of ``trail`` against ``engine`` (see the module docstring).

    Args:
        trail: the audit trail (its folder, or its file as configured).
        engine: the candidate.
        path: the candidate's decision path.
        capture: the capture folder (``None``: a masked-only trail, nothing replayable).
        keyring: the keys that open the capture.
        report: the report to fill (its example count and options); a new one by default.
        concurrency: evaluations in flight at once (for an OPA server).

    Raises:
        OSError: the trail or the capture cannot be read.
    """
    decision_path = normalize_path(path)
    report = report if report is not None else ReplayReport()
    report.candidate = engine.identity
    report.revision = engine.revision()
    index = index_captures(capture) if capture is not None else CaptureIndex()
    report.malformed_capture_lines = list(index.malformed)
    seen: set[str] = set()
    batch: list[tuple[TrailDecision, Captured]] = []

    async def flush() -> None:
        documents = [captured.document for _, captured in batch]
        if isinstance(engine, EmbeddedEngine):  # evaluated in line: no task per decision
            outcomes = [await decide(engine, decision_path, document) for document in documents]
        else:
            outcomes = await asyncio.gather(
                *(decide(engine, decision_path, document) for document in documents)
            )
        for (decision, captured), candidate in zip(batch, outcomes, strict=True):
            report.add_replayed(
                decision.decision_id, decision.tool, captured.roles, captured.recorded, candidate
            )
        batch.clear()

    try:
        for decision in trail_decisions(trail, report.unreadable_trail_lines):
            # A decision id twice: one capture record would be counted twice.
            repeated = decision.decision_id in seen
            seen.add(decision.decision_id)
            opened = DUPLICATE if repeated else _opened(decision, index, keyring)
            if isinstance(opened, str):
                # In trail order: what is queued is counted first.
                if batch:
                    await flush()
                report.add_not_replayed(decision.decision_id, decision.tool, opened)
                continue
            batch.append((decision, opened))
            if len(batch) >= concurrency:
                await flush()
        if batch:
            await flush()
    finally:
        index.close()
    report.captures_without_decision = len(index.entries.keys() - seen)
    return report
