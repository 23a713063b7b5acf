"""What the console reads of the audit trail: recent records, filters, verification.

The trail is read, never written. Records are read newest first, up to a bound, from every
writer's chain; a line that is not a record is counted, never shown. Every argument and
context document is masked again with the gateway's masker before a page sees it (the trail
already holds them masked; a second pass costs little and covers a trail written under a
narrower masking configuration).
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gateway.audit import Masker, trail_files, verify_trail, writer_chains

OUTCOMES: Final = ("allow", "deny", "error")
#: The longest filter value taken (longer ones are refused as not understood).
MAX_FILTER: Final = 200
_MAX_LINE: Final = 4 * 1024 * 1024


class FilterError(ValueError):
    """A filter parameter that is not understood (the message never quotes it)."""


def _time(text: str, name: str) -> datetime.datetime:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise FilterError(f"{name}: not a date and time (2026-01-31T09:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment


def _printable(text: str) -> bool:
    return text.isprintable() and len(text) <= MAX_FILTER


@dataclass(frozen=True, slots=True)
class Filters:
    """The decision table's filters (every one optional, all must match)."""

    tool: str = ""
    caller: str = ""
    outcome: str = ""
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None

    @classmethod
    def parse(cls, params: Any) -> Filters:
        """Read the filters from query parameters (untrusted).

        ``outcome`` is ``allow``, ``deny``, ``error`` or an error code; ``since`` and
        ``until`` are ISO 8601 times (UTC when no offset is given).

        Raises:
            FilterError: a value that is too long, not printable, or not a time.
        """
        values: dict[str, str] = {}
        for name in ("tool", "caller", "outcome", "since", "until"):
            raw = params.get(name, "")
            text = raw.strip() if isinstance(raw, str) else ""
            if not _printable(text):
                raise FilterError(f"{name}: too long or not printable")
            values[name] = text
        since = _time(values["since"], "since") if values["since"] else None
        until = _time(values["until"], "until") if values["until"] else None
        return cls(values["tool"], values["caller"], values["outcome"], since, until)

    def query(self) -> dict[str, str]:
        """The filters as query parameters (for links)."""
        out = {"tool": self.tool, "caller": self.caller, "outcome": self.outcome}
        if self.since is not None:
            out["since"] = self.since.isoformat(timespec="minutes")
        if self.until is not None:
            out["until"] = self.until.isoformat(timespec="minutes")
        return {k: v for k, v in out.items() if v}

    def match(self, record: Decision) -> bool:
        """Whether a decision passes every filter."""
        if self.tool and record.tool != self.tool:
            return False
        if self.caller and self.caller != record.caller:
            return False
        if self.outcome and self.outcome not in (record.result, record.code, record.call):
            return False
        if self.since is not None and (record.moment is None or record.moment < self.since):
            return False
        return not (
            self.until is not None and (record.moment is None or record.moment > self.until)
        )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision record, as the table shows it."""

    decision_id: str
    time: str
    moment: datetime.datetime | None
    tool: str
    caller: str
    result: str
    code: str
    revision: str
    record: dict[str, Any]
    #: What became of the call: its outcome record's code (``ok``, ``approval_pending``,
    #: ``tool_error``, ...) or, without a code, its outcome; "" when none was read.
    call: str = ""

    @classmethod
    def of(cls, record: dict[str, Any], outcome: dict[str, Any] | None = None) -> Decision:
        """The decision of a ``type: decision`` record, with its call's ``outcome`` record."""
        context = record.get("context")
        caller = _text(context.get("subject")) if isinstance(context, dict) else ""
        when = _text(record.get("time"))
        try:
            moment: datetime.datetime | None = datetime.datetime.fromisoformat(when)
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return cls(
            decision_id=_text(record.get("decision_id")),
            time=when,
            moment=moment,
            tool=_text(record.get("tool")),
            caller=caller,
            result=_text(record.get("result")),
            code=_text(record.get("code")),
            revision=_text(record.get("revision")),
            record=record,
            call=(_text(outcome.get("code")) or _text(outcome.get("outcome"))) if outcome else "",
        )


@dataclass(frozen=True, slots=True)
class TrailStatus:
    """The trail's verification status: ``verified``, ``unkeyed``, ``broken``, ``missing``."""

    state: str
    records: int
    detail: str = ""


class TrailReader:
    """Reads the trail configured at ``path`` for the console.

    Args:
        path: the trail (``audit.path``).
        key: the chain's HMAC key (``None``: an unkeyed chain, whose hashes anyone who can
            write the files can recompute).
        masker: the gateway's masker, applied again to what is shown.
        limit: the most recent records read.
    """

    def __init__(self, path: Path, *, key: bytes | None, masker: Masker, limit: int) -> None:
        self._path = path
        self._key = key
        self._masker = masker
        self._limit = limit
        self._lock = threading.Lock()
        self._verified: tuple[tuple[Any, ...], TrailStatus] | None = None

    def _files(self) -> list[list[Path]]:
        return [trail_files(chain) for chain in writer_chains(self._path)]

    def _lines_newest_first(self, files: list[Path]) -> Iterator[bytes]:
        for path in reversed(files):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            yield from reversed(data.splitlines())

    def recent(self) -> tuple[list[dict[str, Any]], int]:
        """The most recent records of every chain, newest first, and the unreadable lines."""
        records: list[dict[str, Any]] = []
        unreadable = 0
        for chain in self._files():
            taken = 0
            for line in self._lines_newest_first(chain):
                if taken >= self._limit:
                    break
                taken += 1
                record = _record(line)
                if record is None:
                    unreadable += 1
                    continue
                records.append(self._shown(record))
        records.sort(key=_order, reverse=True)
        return records[: self._limit], unreadable

    def _shown(self, record: dict[str, Any]) -> dict[str, Any]:
        shown = dict(record)
        for name in ("arguments", "context", "fields"):
            if name in shown:
                shown[name] = self._masker.mask(shown[name], [])
        return shown

    def decisions(self, filters: Filters) -> tuple[list[Decision], int]:
        """The decisions that pass ``filters``, newest first, and the unreadable lines."""
        records, unreadable = self.recent()
        outcomes = {
            r["decision_id"]: r
            for r in reversed(records)
            if r.get("type") == "outcome" and isinstance(r.get("decision_id"), str)
        }
        found = [
            Decision.of(r, outcomes.get(r.get("decision_id")))
            for r in records
            if r.get("type") == "decision"
        ]
        return [d for d in found if filters.match(d)], unreadable

    def about(self, decision_id: str) -> list[dict[str, Any]]:
        """Every recent record of one decision (the decision, its outcome, approval steps)."""
        records, _ = self.recent()
        return [r for r in reversed(records) if r.get("decision_id") == decision_id]

    def status(self) -> TrailStatus:
        """Verify every chain (cached until a file of the trail changes)."""
        signature = tuple(
            (str(p), p.stat().st_size, p.stat().st_mtime_ns)
            for chain in self._files()
            for p in chain
            if p.exists()
        )
        with self._lock:
            if self._verified is not None and self._verified[0] == signature:
                return self._verified[1]
        status = self._verify(bool(signature))
        with self._lock:
            self._verified = (signature, status)
        return status

    def _verify(self, present: bool) -> TrailStatus:
        if not present:
            return TrailStatus("missing", 0, "no trail has been written yet")
        results = verify_trail(self._path, key=self._key)
        total = sum(result.records for _, result in results)
        for chain, result in results:
            if not result.ok:
                return TrailStatus("broken", total, _broken(chain, result.records, result.error))
        if self._key is None:
            return TrailStatus("unkeyed", total, "plain SHA-256 chain: no HMAC key is configured")
        return TrailStatus("verified", total)


def _broken(chain: Path, good: int, error: str | None) -> str:
    # Names the chain's file and the first bad record's number, never a record's content.
    return f"{chain.name}: broken at record {good + 1}" + (
        "" if error is None else f" ({_reason(error)})"
    )


def _reason(error: str) -> str:
    # The verifier names "path:line: problem"; the console shows the problem alone.
    parts = error.split(": ", 1)
    return parts[1] if len(parts) == 2 else "see gateway audit verify"


_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _order(record: dict[str, Any]) -> tuple[datetime.datetime, int]:
    # By the second written (parsed, not compared as text; approval records carry whole
    # seconds, decision records microseconds), then by the record's number in its chain:
    # within one writer's chain, the order it wrote them.
    try:
        moment = datetime.datetime.fromisoformat(_text(record.get("time")))
    except ValueError:
        moment = _EPOCH
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    seq = record.get("seq")
    return moment.replace(microsecond=0), seq if isinstance(seq, int) and not isinstance(
        seq, bool
    ) else 0


def _record(line: bytes) -> dict[str, Any] | None:
    if not line.strip() or len(line) > _MAX_LINE:
        return None
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
