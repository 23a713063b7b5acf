"""A large recorded trail, written directly in the trail's and the capture's formats.

``python -m tests.replay.large 100000`` writes one of that many decisions, replays it
against the candidate policy on the embedded engine, and prints the time, the replay rate
and the memory it took. The tests use a small one.
"""

from __future__ import annotations

import asyncio
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from gateway import Authorization, ToolDefinition
from gateway.audit import JsonlFileSink
from gateway.policy import CallerContext, EmbeddedEngine, InputDocument
from gateway.replay import KeyRing, Outcome, ReplayCapture, replay
from tests.replay.conftest import BASELINE, CALLS, CANDIDATE, SCHEMA, key_entry

RING = KeyRing.parse(key_entry("k1", 1))
PATH = "gateway/authz/decision"


def write_trail(
    folder: Path, count: int, baseline: EmbeddedEngine
) -> tuple[Path, Path, dict[str, int]]:
    """``count`` decisions (CALLS over and over, numbered arguments) decided by ``baseline``.

    Returns the trail folder, the capture folder and the changes the candidate makes.
    """
    trail, capture_dir = folder / "trail", folder / "capture"
    sink = JsonlFileSink(trail / "audit.jsonl", fsync="none")
    capture = ReplayCapture(capture_dir, RING)
    expected: dict[str, int] = {}
    try:
        for number in range(count):
            call = CALLS[number % len(CALLS)]
            arguments = call.arguments[:-1] + (b", " if call.arguments != b"{}" else b"")
            arguments += b'"i": %d}' % number
            document = InputDocument(
                Authorization(ToolDefinition(call.tool, SCHEMA), arguments),
                CallerContext({"subject": f"user-{number % 97}", "roles": list(call.roles)}),
            )
            encoded = document.to_json()
            answer = baseline.evaluate_sync(PATH, encoded)
            value = answer.value
            if value.get("allow") is True:
                recorded = Outcome(
                    "allow", None, value.get("message"), tuple(value.get("reasons", ()))
                )
            else:
                recorded = Outcome("deny", "denied", value.get("message"), ())
            decision_id = f"d{number:08d}"
            sink.submit(
                {
                    "type": "decision",
                    "decision_id": decision_id,
                    "tool": call.tool,
                    "context": {"roles": list(call.roles)},
                    "result": recorded.result,
                }
            ).result()
            capture.record(
                decision_id, encoded, tool=call.tool, roles=call.roles, recorded=recorded
            )
            if call.change is not None:
                expected[call.change] = expected.get(call.change, 0) + 1
    finally:
        sink.close()
        capture.close()
    return trail, capture_dir, expected


def main(count: int) -> None:
    """Write, replay and measure."""
    with tempfile.TemporaryDirectory(prefix="gateway-replay-") as scratch:
        root = Path(scratch)
        for name, text in (("baseline", BASELINE), ("candidate", CANDIDATE)):
            (root / name).mkdir()
            (root / name / "authz.rego").write_text(text, encoding="utf-8")
        with EmbeddedEngine.from_directory(root / "baseline") as baseline:
            started = time.perf_counter()
            trail, capture, expected = write_trail(root, count, baseline)
            written = time.perf_counter() - started
        size = sum(p.stat().st_size for p in capture.iterdir())
        trail_size = sum(p.stat().st_size for p in trail.iterdir())
        with EmbeddedEngine.from_directory(root / "candidate") as candidate:
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            started, cpu_started = time.perf_counter(), time.process_time()
            report = asyncio.run(replay(trail, candidate, path=PATH, capture=capture, keyring=RING))
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            # Again under tracemalloc (which slows it down), for the Python heap's peak.
            tracemalloc.start()
            asyncio.run(replay(trail, candidate, path=PATH, capture=capture, keyring=RING))
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        assert report.replayed == count, report.to_text()
        assert dict(report.changes) == expected
        print(
            f"decisions: {count} (trail {trail_size / 1e6:.1f} MB, capture {size / 1e6:.1f} MB;"
            f" written in {written:.1f} s)"
        )
        print(
            f"replayed:  {report.replayed} in {elapsed:.2f} s = {count / elapsed:,.0f} decisions/s"
            f" ({cpu:.2f} s of CPU = {count / cpu:,.0f} decisions per CPU second)"
        )
        print(f"changes:   {dict(sorted(report.changes.items()))}")
        print(
            f"memory:    Python peak {peak / 1e6:.1f} MB (tracemalloc);"
            f" max RSS {rss_before / 1e3:.0f} -> {rss_after / 1e3:.0f} MB"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
