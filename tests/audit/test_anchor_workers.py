"""Anchors of a trail written by several worker processes under one anchor name.

Each worker holds its own chain of the trail (``audit.jsonl``, ``audit.w2.jsonl`` ...) and
the workers share ``audit.anchor_name``. An anchor names its chain by the chain's first
record, so every chain's latest anchor is checked on its own: deleting any one writer's
chain (the highest-numbered one included, which verifying the trail alone cannot miss), or
cutting it below its anchor, fails against the anchor log. Each anchorer anchors every chain
of its trail, so a worker that died before anchoring its own chain is still covered.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import shutil
from pathlib import Path

import pytest

from gateway.audit import JsonlFileSink, head_path, trail_files, writer_path
from gateway.audit._anchor import Anchor, Anchorer, AnchorLog, check_anchors, read_anchors
from gateway.cli import main

KEY = b"anchor-workers-audit-chain-key-3"
NOON = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.UTC)
NAME = "replica-a"  # every worker's audit.anchor_name
WAIT = 30
LENGTHS = (9, 6, 4)  # writer 1 the longest: its record number is the highest anchored


def workers(path: Path, lengths: tuple[int, ...] = LENGTHS) -> list[JsonlFileSink]:
    """One sink per worker on the trail at ``path``, all held at once (each its own chain)."""
    sinks = [JsonlFileSink(path, fsync="always", key=KEY) for _ in lengths]
    for number, (sink, count) in enumerate(zip(sinks, lengths, strict=True), start=1):
        assert sink.path == writer_path(path, number)
        for n in range(count):
            sink.submit({"worker": number, "n": n}).result(WAIT)
    return sinks


def anchorer(chain: Path, log: AnchorLog, name: str = NAME) -> Anchorer:
    return Anchorer(chain, log, writer=name, key=KEY, interval_s=60, now=lambda: NOON)


def remove(chain: Path) -> None:
    """Delete a writer's chain: every file of it and its head."""
    for path in [*trail_files(chain), head_path(chain)]:
        path.unlink()


def cut(chain: Path, keep: int) -> None:
    """Cut a chain to its first ``keep`` records and delete the head that would tell."""
    lines = chain.read_bytes().splitlines(keepends=True)
    chain.write_bytes(b"".join(lines[:keep]))
    head_path(chain).unlink()


@pytest.fixture
def trail(tmp_path: Path) -> tuple[Path, AnchorLog]:
    """Three workers' chains, each anchored by its own worker under the one shared name."""
    path = tmp_path / "trail" / "audit.jsonl"
    log = AnchorLog(tmp_path / "anchors" / "anchors.jsonl", KEY)
    sinks = workers(path)
    try:
        for sink in sinks:
            anchorer(sink.path, log).anchor_now()
    finally:
        for sink in sinks:
            sink.close()
    return path, log


def problems_of(log: AnchorLog, chains: list[Path]) -> list[str]:
    anchors, unreadable = read_anchors(log.path, KEY)
    assert unreadable == []
    return check_anchors(anchors, chains)


def test_the_intact_trail_of_several_workers_satisfies_its_anchors(
    trail: tuple[Path, AnchorLog],
) -> None:
    path, log = trail
    chains = [writer_path(path, n) for n in (1, 2, 3)]

    assert problems_of(log, chains) == []
    anchors = read_anchors(log.path, KEY)[0]
    assert {anchor.writer for anchor in anchors} == {NAME}
    # Each chain is anchored apart, named by its first record.
    assert len({anchor.chain for anchor in anchors}) == 3


@pytest.mark.parametrize("number", [1, 2, 3])
def test_deleting_any_one_workers_chain_fails_against_the_anchors(
    trail: tuple[Path, AnchorLog], number: int
) -> None:
    path, log = trail
    remove(writer_path(path, number))
    left = [writer_path(path, n) for n in (1, 2, 3) if n != number]

    problems = problems_of(log, left)

    assert len(problems) == 1
    assert problems[0].startswith(f"{NAME}: record {LENGTHS[number - 1]} anchored at ")
    assert f"the chain {writer_path(path, number).name} was deleted" in problems[0]


@pytest.mark.parametrize("number", [2, 3])
def test_cutting_a_workers_chain_below_its_anchor_fails_against_the_anchors(
    trail: tuple[Path, AnchorLog], number: int
) -> None:
    path, log = trail
    cut(writer_path(path, number), 2)

    problems = problems_of(log, [writer_path(path, n) for n in (1, 2, 3)])

    assert len(problems) == 1
    assert writer_path(path, number).name in problems[0]


def test_a_chain_replaced_by_a_copy_of_another_workers_fails_against_the_anchors(
    trail: tuple[Path, AnchorLog],
) -> None:
    # Writer 3's chain replaced by writer 2's files, head and all: both verify on their own.
    path, log = trail
    third = writer_path(path, 3)
    remove(third)
    for source in [*trail_files(writer_path(path, 2)), head_path(writer_path(path, 2))]:
        shutil.copyfile(source, source.with_name(source.name.replace(".w2.", ".w3.")))

    problems = problems_of(log, [writer_path(path, n) for n in (1, 2, 3)])

    assert [third.name in problem for problem in problems] == [True]


def test_the_cli_fails_when_the_highest_numbered_workers_chain_is_deleted(
    trail: tuple[Path, AnchorLog], capsys: pytest.CaptureFixture[str]
) -> None:
    # Verifying the trail alone cannot tell: no chain is missing below the last one left.
    path, log = trail
    remove(writer_path(path, 3))
    key_file = path.parent.parent / "audit.key"
    key_file.write_bytes(KEY)

    status = main(
        ["audit", "verify", "--key-file", str(key_file), "--anchors", str(log.path), str(path)]
    )
    out, err = capsys.readouterr()

    assert status == 1
    assert out.count("ok: ") == 2  # both chains left verify
    assert err.splitlines()[-1].startswith(f"FAILED: anchors: {NAME}: record 4 anchored at ")
    assert "audit.w3.jsonl" in err


def test_chains_collected_under_other_names_satisfy_every_workers_anchors(
    trail: tuple[Path, AnchorLog], tmp_path: Path
) -> None:
    path, log = trail
    collected = tmp_path / "collected"
    collected.mkdir()
    for source in sorted(path.parent.iterdir()):
        if not source.name.endswith(".lock"):
            shutil.copyfile(source, collected / source.name.replace("audit", "host1", 1))
    chains = [collected / "host1.jsonl", collected / "host1.w2.jsonl", collected / "host1.w3.jsonl"]

    assert problems_of(log, chains) == []
    assert problems_of(log, chains[:2]) != []


def test_one_anchorer_covers_every_workers_chain_of_its_trail(tmp_path: Path) -> None:
    # Workers 2 and 3 die before their first anchor; worker 1's anchorer covers them.
    path = tmp_path / "trail" / "audit.jsonl"
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)
    sinks = workers(path)
    for sink in sinks:
        sink.close()

    made = anchorer(path, log).anchor_now()

    assert sorted((anchor.file, anchor.seq) for anchor in made) == [
        ("audit.jsonl", 9),
        ("audit.w2.jsonl", 6),
        ("audit.w3.jsonl", 4),
    ]
    remove(writer_path(path, 3))
    problems = problems_of(log, [writer_path(path, n) for n in (1, 2)])
    assert len(problems) == 1
    assert "audit.w3.jsonl" in problems[0]


def test_an_anchorer_of_a_later_writer_covers_the_first_writers_chain_too(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    sinks = workers(path, (3, 2))
    for sink in sinks:
        sink.close()
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)

    made = anchorer(writer_path(path, 2), log).anchor_now()

    assert sorted(anchor.file for anchor in made) == ["audit.jsonl", "audit.w2.jsonl"]


def test_only_the_heads_that_moved_are_anchored_again(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sinks = workers(path, (2, 2))
    keeper = anchorer(path, AnchorLog(tmp_path / "anchors.jsonl", KEY))
    try:
        assert len(keeper.anchor_now()) == 2
        assert keeper.anchor_now() == []
        sinks[1].submit({"n": "more"}).result(WAIT)
        again = keeper.anchor_now()
    finally:
        for sink in sinks:
            sink.close()

    assert [(anchor.file, anchor.seq) for anchor in again] == [("audit.w2.jsonl", 3)]


def test_an_unreadable_head_of_one_chain_leaves_the_others_anchored(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    for sink in workers(path, (2, 2)):
        sink.close()
    head_path(writer_path(path, 2)).write_bytes(b"damaged")
    keeper = anchorer(path, AnchorLog(tmp_path / "anchors.jsonl", KEY))

    made = keeper.anchor_now()

    assert [anchor.file for anchor in made] == ["audit.jsonl"]
    assert keeper.last_error is not None
    assert "audit.w2.jsonl" in keeper.last_error


def test_a_chain_without_a_record_yet_is_not_anchored(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="always", key=KEY):
        made = anchorer(path, AnchorLog(tmp_path / "anchors.jsonl", KEY)).anchor_now()
    assert made == []


def test_an_anchor_line_whose_chain_was_altered_does_not_verify(
    trail: tuple[Path, AnchorLog],
) -> None:
    _, log = trail
    lines = log.path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[0])
    record["chain"] = "f" * 64
    lines[0] = json.dumps(record, separators=(",", ":")).encode() + b"\n"
    log.path.write_bytes(b"".join(lines))

    anchors, problems = read_anchors(log.path, KEY)

    assert len(anchors) == len(lines) - 1
    assert problems == [f"{log.path}:1: the anchor's tag does not verify (altered, or another key)"]


def test_an_anchor_of_the_earlier_form_is_still_read_and_checked_by_its_writer(
    tmp_path: Path,
) -> None:
    # Written before anchors named their chain: checked as then, by its writer's name.
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="always", key=KEY) as sink:
        records = [sink.submit({"n": n}).result(WAIT) for n in range(3)]
    body = json.dumps(
        {"writer": "old", "seq": 3, "hash": records[2]["hash"], "time": NOON.isoformat()},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    mac = hmac.new(KEY, b"gateway-audit-anchor\0" + body, hashlib.sha256).hexdigest()
    log = tmp_path / "anchors.jsonl"
    log.write_bytes(body[:-1] + b',"mac":"' + mac.encode() + b'"}\n')

    anchors, problems = read_anchors(log, KEY)

    assert (anchors, problems) == ([Anchor("old", 3, records[2]["hash"], NOON.isoformat())], [])
    assert check_anchors(anchors, [path]) == []
    cut(path, 2)
    assert check_anchors(anchors, [path])[0].startswith("old: record 3 anchored at ")


def test_hostile_chain_lines_and_anchor_macs_are_problems_never_exceptions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    log = AnchorLog(tmp_path / "anchors.jsonl", KEY)
    for sink in workers(path, (2,)):
        sink.close()
    anchorer(path, log).anchor_now()
    path.write_bytes(path.read_bytes() + b'{"seq":[1],"hash":"x"}\n{"seq":true,"hash":"y"}\n')
    line = json.loads(log.path.read_bytes())
    line["mac"] = "\u00e9" * 64
    log.path.write_bytes(log.path.read_bytes() + json.dumps(line).encode() + b"\n")

    anchors, problems = read_anchors(log.path, KEY)

    assert (len(anchors), problems) == (1, [f"{log.path}:2: not an anchor"])
    assert check_anchors(anchors, [path]) == []
