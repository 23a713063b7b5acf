"""The replay view's data: shadow disagreements from the trail, and replay reports.

Shadow records (``type: shadow``) hold results and codes only. A replay report is the JSON
``gateway replay --json`` writes (without ``--show-text`` it holds no message or reason);
the console reads its counts and examples and nothing else of it.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gateway.replay._outcome import CHANGES

MAX_REPORT_BYTES: Final = 8 * 1024 * 1024
MAX_REPORTS: Final = 20
MAX_EXAMPLES: Final = 20


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


@dataclass(slots=True)
class ReplayView:
    """Flip counts by tool and change, with examples."""

    title: str = ""
    decisions: int = 0
    changed: int = 0
    by_tool: dict[str, dict[str, int]] = field(default_factory=dict)
    examples: list[dict[str, str]] = field(default_factory=list)
    problem: str = ""

    @classmethod
    def empty(cls) -> ReplayView:
        """No data."""
        return cls()

    @property
    def changes(self) -> list[str]:
        """The changes that occur, in the report's order."""
        seen = {change for counts in self.by_tool.values() for change in counts}
        return [change for change in CHANGES if change in seen]


def shadow_summary(records: list[dict[str, Any]]) -> ReplayView:
    """The shadow disagreements among the trail's recent records."""
    view = ReplayView(title="Shadow evaluation (from the audit trail)")
    by_tool: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for record in records:
        if record.get("type") != "shadow":
            continue
        change = _text(record.get("change"))
        if change not in CHANGES:
            continue
        tool = _text(record.get("tool"))
        view.changed += 1
        by_tool[tool][change] += 1
        if len(view.examples) < MAX_EXAMPLES:
            view.examples.append(
                {
                    "decision_id": _text(record.get("decision_id")),
                    "tool": tool,
                    "change": change,
                    "time": _text(record.get("time")),
                    "revision": _text(record.get("candidate_revision")),
                }
            )
    view.decisions = sum(1 for r in records if r.get("type") == "decision")
    view.by_tool = {tool: dict(counts) for tool, counts in sorted(by_tool.items())}
    return view


def _report(path: Path) -> ReplayView:
    view = ReplayView(title=path.name)
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            view.problem = "too large to show"
            return view
        document = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        view.problem = "not a replay report (unreadable JSON)"
        return view
    if not isinstance(document, dict) or document.get("version") != 1:
        view.problem = "not a replay report (unknown format)"
        return view
    candidate = document.get("candidate")
    if isinstance(candidate, dict):
        revision = _text(candidate.get("revision"))
        view.title = f"{path.name}: candidate {_text(candidate.get('engine'))}" + (
            f" (revision {revision})" if revision else ""
        )
    view.decisions = _count(document.get("decisions"))
    view.changed = _count(document.get("changed"))
    tools = document.get("by_tool")
    if isinstance(tools, dict):
        for tool, counts in tools.items():
            if isinstance(tool, str) and isinstance(counts, dict):
                view.by_tool[tool] = {
                    change: _count(n) for change, n in counts.items() if change in CHANGES
                }
    for example in document.get("examples") or []:
        if isinstance(example, dict) and len(view.examples) < MAX_EXAMPLES:
            recorded, candidate_outcome = example.get("recorded"), example.get("candidate")
            view.examples.append(
                {
                    "decision_id": _text(example.get("decision_id")),
                    "tool": _text(example.get("tool")),
                    "change": _text(example.get("change")),
                    "time": "",
                    "revision": "",
                    "recorded": _text(recorded.get("code")) if isinstance(recorded, dict) else "",
                    "candidate": (
                        _text(candidate_outcome.get("code"))
                        if isinstance(candidate_outcome, dict)
                        else ""
                    ),
                }
            )
    return view


def read_reports(folder: Path) -> list[ReplayView]:
    """The newest replay reports (``*.json``) of ``folder``."""
    try:
        paths = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    return [_report(path) for path in paths[:MAX_REPORTS]]
