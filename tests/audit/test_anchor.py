"""Anchors: a writer's durable chain head kept apart from the trail, so that deleting,
cutting or rolling back a whole trail (head file included) is found."""

from __future__ import annotations

import datetime
import hashlib
import json
import shutil
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audit import JsonlFileSink, head_path, trail_files
from gateway.audit._anchor import (
    Anchor,
    Anchorer,
    AnchorError,
    AnchorLog,
    check_anchors,
    read_anchors,
)
from gateway.cli import main
from gateway.server import ConfigError, build_service, load_config
from gateway.testing import LiveServer

KEY = b"k" * 32
BUNDLE = Path(__file__).resolve().parents[2] / "bundles" / "policies.tar.gz"
NOON = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.UTC)


def write(path: Path, count: int) -> None:
    with JsonlFileSink(path, fsync="always", key=KEY) as sink:
        for n in range(count):
            sink.submit({"n": n}).result(30)


def anchorer(chain: Path, log: AnchorLog) -> Anchorer:
    return Anchorer(chain, log, writer="replica1", key=KEY, interval_s=60, now=lambda: NOON)


def test_an_anchor_names_the_durable_head_and_verifies_against_the_trail(tmp_path: Path) -> None:
    chain = tmp_path / "trail" / "audit.jsonl"
    write(chain, 5)
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)

    made = anchorer(chain, log).anchor_now()

    records = [json.loads(line) for line in chain.read_bytes().splitlines()]
    first, last = records[0]["hash"], records[-1]["hash"]
    assert made == [Anchor("replica1", 5, last, NOON.isoformat(), first, "audit.jsonl")]
    anchors, problems = read_anchors(log.path, KEY)
    assert (anchors, problems) == (made, [])
    assert check_anchors(anchors, [chain]) == []


def test_an_unchanged_head_is_not_anchored_twice(tmp_path: Path) -> None:
    chain = tmp_path / "audit.jsonl"
    write(chain, 2)
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)
    keeper = anchorer(chain, log)

    assert len(keeper.anchor_now()) == 1
    assert keeper.anchor_now() == []
    write(chain, 1)
    assert len(keeper.anchor_now()) == 1
    assert len(read_anchors(log.path, KEY)[0]) == 2


@pytest.mark.parametrize("damage", ["deleted", "cut below the anchor", "rolled back"])
def test_a_trail_deleted_cut_or_rolled_back_with_its_head_fails_against_the_anchors(
    tmp_path: Path, damage: str
) -> None:
    chain = tmp_path / "trail" / "audit.jsonl"
    write(chain, 3)
    backup = tmp_path / "backup"
    shutil.copytree(chain.parent, backup)
    write(chain, 3)
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)
    anchorer(chain, log).anchor_now()
    if damage == "deleted":
        shutil.rmtree(chain.parent)
        chains: list[Path] = []
    elif damage == "cut below the anchor":
        lines = chain.read_bytes().splitlines(keepends=True)
        chain.write_bytes(b"".join(lines[:4]))
        head_path(chain).unlink()  # whoever cut it also removed the head that would tell
        chains = [chain]
    else:
        shutil.rmtree(chain.parent)
        shutil.copytree(backup, chain.parent)  # an older copy, head and all: it verifies
        chains = [chain]

    problems = check_anchors(read_anchors(log.path, KEY)[0], chains)

    assert len(problems) == 1
    assert problems[0].startswith("replica1: record 6 anchored at ")


def test_a_collected_chain_under_another_name_still_satisfies_its_anchor(tmp_path: Path) -> None:
    chain = tmp_path / "replica" / "audit.jsonl"
    write(chain, 4)
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)
    anchorer(chain, log).anchor_now()
    collected = tmp_path / "collected" / "replica1.jsonl"
    collected.parent.mkdir()
    for path in trail_files(chain):
        shutil.copyfile(path, collected.parent / path.name.replace("audit", "replica1", 1))

    assert check_anchors(read_anchors(log.path, KEY)[0], [collected]) == []


def test_an_altered_anchor_line_or_another_key_is_reported_and_not_used(tmp_path: Path) -> None:
    chain = tmp_path / "audit.jsonl"
    write(chain, 2)
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)
    anchorer(chain, log).anchor_now()
    log.path.write_bytes(log.path.read_bytes().replace(b'"seq":2', b'"seq":1'))

    anchors, problems = read_anchors(log.path, KEY)
    assert anchors == []
    assert problems == [f"{log.path}:1: the anchor's tag does not verify (altered, or another key)"]
    assert read_anchors(log.path, b"x" * 32)[0] == []


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=300))
def test_any_line_in_the_anchor_log_is_an_anchor_or_a_problem_never_an_exception(
    tmp_path_factory: pytest.TempPathFactory, junk: bytes
) -> None:
    path = tmp_path_factory.mktemp("junk") / "anchors.jsonl"
    path.write_bytes(junk)
    anchors, problems = read_anchors(path, KEY)
    assert anchors == []
    assert len(problems) == len(junk.splitlines())


def test_anchors_need_the_audit_key(tmp_path: Path) -> None:
    with pytest.raises(AnchorError, match="need the audit key"):
        AnchorLog(tmp_path / "anchors.jsonl", b"")


def test_stopping_the_anchorer_anchors_the_last_head(tmp_path: Path) -> None:
    chain = tmp_path / "audit.jsonl"
    write(chain, 3)
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)
    keeper = anchorer(chain, log)
    keeper.start()
    keeper.stop()

    assert [a.seq for a in read_anchors(log.path, KEY)[0]] == [3]


# -- gateway audit verify --anchors ---------------------------------------------------------


def _verify(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["audit", "verify", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_verify_with_anchors_passes_on_the_trail_and_fails_on_its_older_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "audit.key"
    key_file.write_bytes(KEY)
    chain = tmp_path / "trail" / "audit.jsonl"
    write(chain, 2)
    older = tmp_path / "older"
    shutil.copytree(chain.parent, older)
    write(chain, 2)
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)
    anchorer(chain, log).anchor_now()
    args = ("--key-file", str(key_file), "--anchors", str(log.path))

    status, out, _ = _verify(capsys, *args, str(chain))
    assert status == 0
    assert (
        out.splitlines()[-1] == f"ok: {log.path}: 1 anchors of 1 writer(s), each in a chain given"
    )

    status, out, err = _verify(capsys, *args, str(older / "audit.jsonl"))
    assert status == 1
    assert out.startswith("ok: ")  # the older copy verifies on its own
    assert err.startswith("FAILED: anchors: replica1: record 4 anchored at ")


def test_verify_with_anchors_needs_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = tmp_path / "audit.jsonl"
    write(chain, 1)
    status, _, err = _verify(capsys, "--anchors", str(tmp_path / "anchors.jsonl"), str(chain))
    assert (status, err.splitlines()[-1]) == (
        2,
        "gateway audit verify: --anchors needs the audit key",
    )


# -- the service anchors its chain ----------------------------------------------------------


def _service_config(tmp_path: Path, audit: str) -> Path:
    """Write a gateway.toml: the embedded engine, the trail trail/audit.jsonl with the
    ``audit`` lines added to its table, and the API key anchor-test-key of alice."""
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"""
[engine]
kind = "embedded"
bundle = "{BUNDLE}"

[audit]
path = "trail/audit.jsonl"
{audit}

[[auth.api_keys]]
sha256 = "{hashlib.sha256(b"anchor-test-key").hexdigest()}"
context = {{ subject = "alice", roles = ["reader"], tenant = "acme" }}

[tools]
modules = ["examples.example_tools:TOOLS"]
""",
        encoding="utf-8",
    )
    return config


@pytest.mark.integration
def test_the_service_anchors_its_head_when_it_closes(tmp_path: Path) -> None:
    (tmp_path / "audit.key").write_bytes(KEY)
    config = _service_config(
        tmp_path,
        'key_file = "audit.key"\nanchor_path = "anchors/anchors.jsonl"\nanchor_name = "replica-a"',
    )
    service = build_service(load_config(config))
    with LiveServer(service.app) as server:
        answer = httpx.post(
            f"{server.url}/v1/calls",
            json={"id": "1", "name": "add", "arguments": {"a": 1, "b": 2}},
            headers={"X-API-Key": "anchor-test-key"},
        )
    assert answer.status_code == 200

    anchors, problems = read_anchors(tmp_path / "anchors" / "anchors.jsonl", KEY)
    assert problems == []
    assert [a.writer for a in anchors] == ["replica-a"]
    assert check_anchors(anchors, [tmp_path / "trail" / "audit.jsonl"]) == []


def test_an_anchor_log_without_an_audit_key_is_a_configuration_error(tmp_path: Path) -> None:
    config = _service_config(tmp_path, 'unkeyed = true\nanchor_path = "anchors.jsonl"')
    with pytest.raises(ConfigError, match=r"^audit\.anchor_path: "):
        load_config(config)
