"""The replay view reads the reports ``gateway replay --json`` writes, and survives bad ones."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Final

import pytest
from starlette.testclient import TestClient

from gateway.cli import main
from gateway.console import ConsoleApp, SessionStore, console_roles
from gateway.console._replay import MAX_REPORT_BYTES
from gateway.policy import EmbeddedEngine
from gateway.replay import KeyRing
from gateway.testing import FakeClock
from tests.console.conftest import AUDITOR, ORIGIN, authenticator, sign_in
from tests.replay.conftest import (
    CALLS,
    baseline_engine,
    key_entry,
    opa_bin,
    policy_dirs,
    record,
)

RING: Final = KeyRing.parse(key_entry("k1", 1))
#: A value a broken report holds: no page may ever quote it.
MARKER: Final = "marker-do-not-show"

__all__ = ["baseline_engine", "opa_bin", "policy_dirs"]


@pytest.fixture
def report(  # noqa: PLR0917 - pytest fixtures are positional
    tmp_path: Path,
    baseline_engine: EmbeddedEngine,
    policy_dirs: tuple[Path, Path],
    opa_bin: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[list[str], dict[str, object]]:
    """A real ``gateway replay --json`` report of CALLS against the candidate; the decision ids."""
    monkeypatch.setenv("REPLAY_KEYS", key_entry("k1", 1))
    trail, capture = tmp_path / "trail", tmp_path / "capture"
    ids = asyncio.run(record(baseline_engine, trail, capture_dir=capture, keyring=RING))
    capsys.readouterr()
    main(
        [
            *("replay", "--json", "--trail", str(trail), "--capture", str(capture)),
            *("--key-env", "REPLAY_KEYS", "--policies", str(policy_dirs[1])),
            *("--opa-binary", opa_bin),
        ]
    )
    out = capsys.readouterr().out
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "candidate.json").write_text(out, encoding="utf-8")
    return ids, json.loads(out)


def _page(folder: Path) -> tuple[int, str]:
    """The replay view, as an auditor sees it, with ``folder`` as the reports' folder."""
    app = ConsoleApp(
        authenticator=authenticator(),
        roles=console_roles(auditors=["anna"]),
        sessions=SessionStore(
            idle_timeout_s=900, max_age_s=3600, max_sessions=10, clock=FakeClock()
        ),
        replay_reports=folder,
    )
    client = TestClient(app, base_url=ORIGIN, follow_redirects=False)
    sign_in(client, AUDITOR)
    response = client.get("/console/replay")
    return response.status_code, response.text


def test_a_real_replay_report_is_counted_by_tool_and_direction_with_examples(
    tmp_path: Path, report: tuple[list[str], dict[str, object]]
) -> None:
    ids, document = report

    status, page = _page(tmp_path / "reports")

    assert status == 200
    assert "candidate.json" in page
    changed = sum(1 for call in CALLS if call.change)
    assert f"{len(CALLS)} decisions; {changed} would change." in page
    # write: deny-to-allow once, allow-to-deny once (the report's own counts)
    by_tool = document["by_tool"]
    assert isinstance(by_tool, dict)
    assert by_tool["write"]["deny-to-allow"] == 1
    assert by_tool["write"]["allow-to-deny"] == 1
    assert '<th scope="col">allow-to-deny</th>' in page
    assert '<th scope="col">deny-to-allow</th>' in page
    assert "<code>write</code></th>" in page
    for n, call in enumerate(CALLS):
        if call.change:
            assert f"/console/decisions/{ids[n]}" in page
            assert f"<td>{call.change}</td>" in page
    assert "hunter2" not in page  # a recorded argument value


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("broken.json", ('{"version": 1, "by_tool": {"' + MARKER).encode()),
        ("notjson.json", MARKER.encode()),
        ("binary.json", b"\xff\xfe" + MARKER.encode() + b"\x00"),
        ("list.json", json.dumps([MARKER]).encode()),
        ("version.json", json.dumps({"version": 2, "by_tool": {MARKER: {}}}).encode()),
        ("deep.json", b"[" * 100_000 + b"]" * 100_000),
        (
            "oddtypes.json",
            json.dumps(
                {
                    "version": 1,
                    "decisions": MARKER,
                    "changed": -3,
                    "by_tool": [MARKER],
                    "examples": {MARKER: 1},
                    "candidate": MARKER,
                }
            ).encode(),
        ),
    ],
)
def test_a_malformed_report_is_named_unreadable_and_never_quoted_and_the_page_still_works(
    tmp_path: Path, report: tuple[list[str], dict[str, object]], name: str, content: bytes
) -> None:
    folder = tmp_path / "reports"
    (folder / name).write_bytes(content)

    status, page = _page(folder)

    assert status == 200
    assert MARKER not in page
    assert "candidate.json" in page  # the good report still shows
    assert "<code>write</code></th>" in page
    if name != "oddtypes.json":
        assert name in page
        assert "not a replay report" in page


def test_an_oversized_report_is_not_read_and_is_named_too_large(
    tmp_path: Path, report: tuple[list[str], dict[str, object]]
) -> None:
    folder = tmp_path / "reports"
    big = folder / "huge.json"
    with big.open("wb") as handle:
        handle.write(('{"version": 1, "by_tool": {"' + MARKER + '": {}}, "pad": "').encode())
        handle.truncate(MAX_REPORT_BYTES + 1)
    os.utime(big)

    status, page = _page(folder)

    assert status == 200
    assert "huge.json" in page
    assert "too large" in page
    assert MARKER not in page
    assert "candidate.json" in page
