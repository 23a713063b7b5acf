"""Replay finds exactly the decisions a candidate changes, and says why it skipped any."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.cli import main
from gateway.policy import EmbeddedEngine, build_bundle
from gateway.replay import KeyRing, ReplayReport, replay, trail_decisions
from gateway.testing import OpaServer
from tests.replay.conftest import CALLS, decision_ids, expected_changes, key_entry, record
from tests.replay.large import write_trail

RING = KeyRing.parse(key_entry("k1", 1))


@pytest.fixture
def recorded(
    tmp_path: Path, baseline_engine: EmbeddedEngine, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path, list[str]]:
    """CALLS decided by the baseline, with a capture (for the CLI tests, which are sync).

    The key ring is in ``$REPLAY_KEYS``.
    """
    monkeypatch.setenv("REPLAY_KEYS", key_entry("k1", 1))
    return asyncio.run(_recorded(tmp_path, baseline_engine))


@pytest.fixture
def candidate_args(policy_dirs: tuple[Path, Path], opa_bin: str) -> tuple[str, ...]:
    """The CLI arguments naming the candidate policy folder (and the opa compiling it)."""
    return ("--policies", str(policy_dirs[1]), "--opa-binary", opa_bin)


async def _recorded(tmp_path: Path, engine: EmbeddedEngine) -> tuple[Path, Path, list[str]]:
    trail, capture = tmp_path / "trail", tmp_path / "capture"
    ids = await record(engine, trail, capture_dir=capture, keyring=RING)
    return trail, capture, ids


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    status = main(["replay", "--json", *args])
    out = capsys.readouterr().out
    return status, json.loads(out)


async def test_replay_finds_exactly_the_changes_the_candidate_makes_with_their_decision_ids(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture, ids = await _recorded(tmp_path, baseline_engine)

    report = await replay(
        trail, candidate_engine, path="gateway/authz/decision", capture=capture, keyring=RING
    )

    assert report.decisions == len(CALLS) == report.replayed
    assert dict(report.changes) == expected_changes()
    found = {example.decision_id: example.change for example in report.examples}
    assert found == {ids[n]: call.change for n, call in enumerate(CALLS) if call.change}
    assert report.by_tool["write"] == {"deny-to-allow": 1, "allow-to-deny": 1}
    assert report.by_role["reader"] == {"reasons": 1, "deny-to-allow": 1, "deny-to-error": 1}
    assert report.by_role["writer"] == {"allow-to-deny": 1, "message": 1}
    assert report.failures({"deny-to-allow"}) == {"deny-to-allow": 1}


async def test_the_same_policy_replays_with_no_change(
    tmp_path: Path, baseline_engine: EmbeddedEngine
) -> None:
    trail, capture, _ = await _recorded(tmp_path, baseline_engine)

    report = await replay(
        trail, baseline_engine, path="gateway/authz/decision", capture=capture, keyring=RING
    )

    assert (report.replayed, report.unchanged, report.changed) == (len(CALLS), len(CALLS), 0)


def test_cli_replays_against_a_policy_folder_and_exits_1_on_a_deny_to_allow_flip(
    recorded: tuple[Path, Path, list[str]],
    candidate_args: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    trail, capture, ids = recorded

    status, report = _cli(
        capsys,
        *("--trail", str(trail), "--capture", str(capture), "--key-env", "REPLAY_KEYS"),
        *candidate_args,
    )

    assert status == 1
    assert report["failures"] == {"deny-to-allow": 1}
    assert {name: n for name, n in report["changes"].items() if n} == expected_changes()
    assert [e["decision_id"] for e in report["examples"]] == [
        ids[n] for n, call in enumerate(CALLS) if call.change
    ]
    assert report["not_replayed"]["total"] == 0


def test_cli_exit_code_follows_fail_on(
    recorded: tuple[Path, Path, list[str]],
    candidate_args: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    trail, capture, _ = recorded
    key_file = trail.parent / "keys"
    key_file.write_text(key_entry("k1", 1) + "\n")
    key_file.chmod(0o600)
    common = (
        *("--trail", str(trail), "--capture", str(capture), "--key-file", str(key_file)),
        *candidate_args,
    )

    assert _cli(capsys, *common, "--fail-on", "none")[0] == 0
    assert _cli(capsys, *common, "--fail-on", "error-to-allow")[0] == 0
    status, report = _cli(capsys, *common, "--fail-on", "allow-to-deny,message")
    assert status == 1
    assert report["failures"] == {"allow-to-deny": 1, "message": 1}
    assert main(["replay", *common, "--fail-on", "allow-to-nothing"]) == 2


@pytest.fixture
def candidate_opa(policy_dirs: tuple[Path, Path], opa_bin: str) -> Iterator[OpaServer]:
    """A real OPA server serving the candidate policy."""
    with OpaServer(binary=opa_bin, policy_paths=[policy_dirs[1]]) as opa:
        yield opa


def test_cli_replays_against_a_live_opa_server(
    recorded: tuple[Path, Path, list[str]],
    candidate_opa: OpaServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    trail, capture, _ = recorded

    status, report = _cli(
        capsys,
        *("--trail", str(trail), "--capture", str(capture), "--key-env", "REPLAY_KEYS"),
        *("--opa", candidate_opa.url),
    )

    assert status == 1
    assert {name: n for name, n in report["changes"].items() if n} == expected_changes()
    assert report["replayed"] == len(CALLS)


def test_cli_replays_against_a_bundle(
    recorded: tuple[Path, Path, list[str]],
    policy_dirs: tuple[Path, Path],
    opa_bin: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    trail, capture, _ = recorded
    bundle = build_bundle(
        opa_bin,
        policy_dirs[1],
        trail.parent / "candidate.tar.gz",
        entrypoints=("gateway/authz/decision",),
    )

    _, report = _cli(
        capsys,
        *("--trail", str(trail), "--capture", str(capture), "--key-env", "REPLAY_KEYS"),
        *("--bundle", str(bundle)),
    )

    assert {name: n for name, n in report["changes"].items() if n} == expected_changes()


def test_a_masked_only_trail_reports_every_decision_as_not_replayed_with_the_reason(
    tmp_path: Path,
    baseline_engine: EmbeddedEngine,
    candidate_args: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    trail = tmp_path / "trail"
    # No capture: the trail's inputs are masked.
    ids = asyncio.run(record(baseline_engine, trail))

    status, report = _cli(
        capsys,
        *("--trail", str(trail), *candidate_args),
        "--fail-on",
        "unreplayed",
    )

    assert status == 1
    assert report["replayed"] == 0
    assert report["not_replayed"]["by_reason"] == {"no-capture": len(CALLS)}
    assert [d["decision_id"] for d in report["not_replayed"]["decisions"]] == ids
    assert "hunter2" not in json.dumps(report)


async def test_without_the_key_every_captured_decision_is_reported_as_not_replayed(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture, ids = await _recorded(tmp_path, baseline_engine)

    report = await replay(trail, candidate_engine, path="gateway/authz/decision", capture=capture)

    assert report.not_replayed == {"no-key": len(CALLS)}
    assert [item.decision_id for item in report.unreplayed] == ids
    assert report.failures({"auth-failure", "deny-to-allow"}) == {}


@pytest.mark.parametrize(
    ("ring", "reason"),
    [
        (key_entry("k1", 2), "wrong-key"),  # same id, other key
        (key_entry("k9", 1), "unknown-key-id"),
    ],
)
async def test_a_wrong_key_is_reported_per_decision_and_fails_the_auth_check(
    tmp_path: Path,
    baseline_engine: EmbeddedEngine,
    candidate_engine: EmbeddedEngine,
    ring: str,
    reason: str,
) -> None:
    trail, capture, _ = await _recorded(tmp_path, baseline_engine)

    report = await replay(
        trail,
        candidate_engine,
        path="gateway/authz/decision",
        capture=capture,
        keyring=KeyRing.parse(ring),
    )

    assert report.not_replayed == {reason: len(CALLS)}
    assert report.failures({"auth-failure"}) == {"auth-failure": len(CALLS)}


def _capture_lines(capture: Path) -> tuple[Path, list[dict[str, Any]]]:
    (path,) = sorted(capture.iterdir())
    return path, [json.loads(line) for line in path.read_text().splitlines()]


def _write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _flip_base64(text: str, at: int) -> str:
    replacement = "A" if text[at] != "A" else "B"
    return text[:at] + replacement + text[at + 1 :]


async def test_tampered_capture_records_are_detected_and_reported_by_decision_id(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture, ids = await _recorded(tmp_path, baseline_engine)
    path, lines = _capture_lines(capture)
    lines[0]["c"] = _flip_base64(lines[0]["c"], 10)  # one ciphertext byte changed
    lines[1]["n"] = _flip_base64(lines[1]["n"], 2)  # the nonce changed
    lines[2]["id"], lines[3]["id"] = lines[3]["id"], lines[2]["id"]  # records swapped
    lines[4]["k"] = "k1x"  # the key id changed
    lines[5]["c"] = lines[5]["c"][:-3]  # cut short: not base64 any more
    lines[6]["c"] = lines[6]["c"][:-8]  # cut short, still base64: its tag is gone
    _write_lines(path, lines)

    report = await replay(
        trail, candidate_engine, path="gateway/authz/decision", capture=capture, keyring=RING
    )

    reasons = {item.decision_id: item.reason for item in report.unreplayed}
    assert reasons == {
        ids[0]: "tampered",
        ids[1]: "tampered",
        ids[2]: "tampered",
        ids[3]: "tampered",
        ids[4]: "unknown-key-id",
        ids[5]: "malformed",
        ids[6]: "tampered",
    }
    assert report.replayed == len(CALLS) - 7
    assert report.failures({"auth-failure"}) == {"auth-failure": 7}


async def test_a_recomputed_check_value_does_not_hide_tampering_and_junk_lines_are_reported(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture, ids = await _recorded(tmp_path, baseline_engine)
    path, lines = _capture_lines(capture)
    other = KeyRing.parse(key_entry("k1", 7))
    lines[0]["kc"] = other.check("k1")  # now looks like a wrong key, and is reported as one
    duplicate = dict(lines[1], c=_flip_base64(lines[1]["c"], 4))
    _write_lines(path, [*lines, duplicate])
    with path.open("a") as handle:
        handle.write("not json\n")

    report = await replay(
        trail, candidate_engine, path="gateway/authz/decision", capture=capture, keyring=RING
    )

    reasons = {item.decision_id: item.reason for item in report.unreplayed}
    assert reasons == {ids[0]: "wrong-key", ids[1]: "conflicting"}
    assert report.malformed_capture_lines == [f"{path}:{len(lines) + 2}"]
    assert report.failures({"auth-failure"}) == {"auth-failure": 3}


async def test_a_capture_that_disagrees_with_its_trail_record_is_a_mismatch(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture, ids = await _recorded(tmp_path, baseline_engine)
    audit = trail / "audit.jsonl"
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    records[0]["result"] = "deny"  # an unkeyed trail can be rewritten; the capture cannot
    audit.write_text("".join(json.dumps(r) + "\n" for r in records))

    report = await replay(
        trail, candidate_engine, path="gateway/authz/decision", capture=capture, keyring=RING
    )

    assert [(i.decision_id, i.reason) for i in report.unreplayed] == [(ids[0], "mismatch")]


async def test_rotated_keys_old_captures_open_with_the_old_key_kept_in_the_ring(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture = tmp_path / "trail", tmp_path / "capture"
    first = await record(baseline_engine, trail, capture_dir=capture, keyring=RING, calls=CALLS[:3])
    rotated = KeyRing.parse(f"{key_entry('k2', 2)} {key_entry('k1', 1)}")
    both = await record(
        baseline_engine, trail, capture_dir=capture, keyring=rotated, calls=CALLS[3:]
    )
    assert both[:3] == first

    full = await replay(
        trail, candidate_engine, path="gateway/authz/decision", capture=capture, keyring=rotated
    )
    new_only = await replay(
        trail,
        candidate_engine,
        path="gateway/authz/decision",
        capture=capture,
        keyring=KeyRing.parse(key_entry("k2", 2)),
    )

    assert full.replayed == len(CALLS)
    assert dict(full.changes) == expected_changes()
    assert new_only.not_replayed == {"unknown-key-id": 3}
    assert [item.decision_id for item in new_only.unreplayed] == first


async def test_capture_records_without_a_trail_record_are_counted(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture, _ = await _recorded(tmp_path, baseline_engine)
    audit = trail / "audit.jsonl"
    audit.write_text("".join(audit.read_text().splitlines(keepends=True)[:4]))

    report = await replay(
        trail, candidate_engine, path="gateway/authz/decision", capture=capture, keyring=RING
    )

    assert report.decisions == 4
    assert report.captures_without_decision == len(CALLS) - 4


async def test_the_text_report_never_shows_messages_unless_asked(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture, ids = await _recorded(tmp_path, baseline_engine)
    report = await replay(
        trail,
        candidate_engine,
        path="gateway/authz/decision",
        capture=capture,
        keyring=RING,
        report=ReplayReport(examples_wanted=2),
    )

    text = report.to_text()
    shown = report.to_text(show_text=True)

    assert "denied by default" not in text
    assert '"denied by default"' in shown  # the deny-to-allow example's recorded message
    assert len(report.examples) == 2
    assert ids[1] in text
    assert text.rstrip().endswith("result: FAIL (deny-to-allow 1)")
    assert decision_ids(trail) == ids


async def test_a_large_trail_replays_every_decision_and_finds_every_change(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture, expected = write_trail(tmp_path, 800, baseline_engine)

    report = await replay(
        trail, candidate_engine, path="gateway/authz/decision", capture=capture, keyring=RING
    )

    assert (report.decisions, report.replayed) == (800, 800)
    assert dict(report.changes) == expected
    assert sum(expected.values()) == 500  # five of every eight calls change
    assert len(report.examples) == 20


@given(st.lists(st.binary(max_size=120), max_size=10))
@settings(deadline=None)
def test_any_trail_file_is_read_without_raising_and_its_junk_is_reported(
    lines: list[bytes],
) -> None:
    data = b"\n".join(lines)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch, "audit.jsonl")
        path.write_bytes(data)
        unreadable: list[str] = []
        decisions = list(trail_decisions(path, unreadable))
    assert len(decisions) + len(unreadable) <= data.count(b"\n") + 1


def test_an_unreachable_candidate_opa_is_a_usage_error_not_a_report_of_flips(
    recorded: tuple[Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    trail, capture, _ = recorded

    status = main(
        [
            "replay",
            *("--trail", str(trail), "--capture", str(capture), "--key-env", "REPLAY_KEYS"),
            *("--opa", "http://127.0.0.1:9", "--timeout", "0.5"),
        ]
    )

    assert status == 2
    assert "not healthy" in capsys.readouterr().err


def test_new_key_prints_an_entry_a_key_ring_reads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--new-key", "2026-12"]) == 0
    entry = capsys.readouterr().out.strip()

    assert KeyRing.parse(entry).active_id == "2026-12"
    assert main(["replay", "--new-key", "bad id"]) == 2


def test_a_missing_trail_or_a_bad_key_ring_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BAD_RING", "k1:" + "A" * 10)

    assert main(["replay", "--opa", "http://127.0.0.1:9"]) == 2
    assert main(["replay", "--trail", str(tmp_path / "none"), "--opa", "http://127.0.0.1:9"]) == 2
    assert (
        main(["replay", "--trail", str(tmp_path), "--key-env", "BAD_RING", "--opa", "http://x"])
        == 2
    )
    errors = capsys.readouterr().err
    assert "name the trail" in errors
    assert "no such trail" in errors
    assert "A" * 10 not in errors


async def test_a_decision_record_repeated_in_the_trail_is_replayed_once_and_reported(
    tmp_path: Path, baseline_engine: EmbeddedEngine, candidate_engine: EmbeddedEngine
) -> None:
    trail, capture, ids = await _recorded(tmp_path, baseline_engine)
    audit = trail / "audit.jsonl"
    lines = audit.read_text().splitlines(keepends=True)
    audit.write_text("".join([*lines, lines[2]]))  # the third call's decision record again

    report = await replay(
        trail, candidate_engine, path="gateway/authz/decision", capture=capture, keyring=RING
    )

    assert report.replayed == len(CALLS)
    assert [(i.decision_id, i.reason) for i in report.unreplayed] == [(ids[2], "duplicate")]
    assert report.changes["deny-to-allow"] == 1
    assert report.failures({"auth-failure"}) == {"auth-failure": 1}
