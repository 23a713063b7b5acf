"""A chain's head is bound to that chain: another chain's head never passes for its own.

The head is what catches a cut at a line boundary. A head copied from another writer's
chain (or another trail's, under the same key) over a cut chain's must fail verification:
the head names its chain by the hash of the chain's first record, under its tag, and the
verifier requires the record at the head's ``seq`` to be in the chain with the head's hash.
The sink refuses to resume (and so to rewrite) a head that disagrees with its chain.

Caveat: a head naming record 0 (a chain's head before its first commit, which a crash can
leave over a chain's first records) names no record, so it fits every chain, as no head does.

The head's newer API is reached through the module at call time, so that each test fails on
its own, rather than the whole file at import, on a version without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.audit import (
    GENESIS,
    AuditWriteError,
    JsonlFileSink,
    _chain,
    head_path,
    trail_files,
    verify,
    verify_trail,
    writer_path,
)
from gateway.cli import main

KEY = b"head-binding-audit-chain-key-32b"
WAIT = 30


def write(path: Path, count: int, *, note: str = "a") -> list[dict[str, Any]]:
    """Append ``count`` records to the chain at ``path`` (one commit each)."""
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        return [sink.submit({"note": note, "n": n}).result(WAIT) for n in range(count)]


def cut(path: Path, keep: int) -> None:
    """Keep the first ``keep`` lines of a chain's active file (a cut at a line boundary)."""
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:keep]))


def check(path: Path) -> Any:
    return verify(trail_files(path), key=KEY, head=head_path(path))


def two_writers(folder: Path, first: int = 10, second: int = 3) -> tuple[Path, Path]:
    """A trail with two writer chains held at once: ``audit.jsonl`` and ``audit.w2.jsonl``."""
    path = folder / "audit.jsonl"
    one = JsonlFileSink(path, fsync="none", key=KEY)
    two = JsonlFileSink(path, fsync="none", key=KEY)
    try:
        for n in range(first):
            one.submit({"writer": 1, "n": n}).result(WAIT)
        for n in range(second):
            two.submit({"writer": 2, "n": n}).result(WAIT)
    finally:
        one.close()
        two.close()
    assert two.path == writer_path(path, 2)
    return path, two.path


def v2_head(seq: int, digest: str, key: bytes) -> bytes:
    """A head file of the previous two-slot form (no chain named), as a key holder writes it."""
    body = b"gateway-audit-head 2 %020d %s " % (seq, digest.encode())
    derived = hashlib.sha256(b"gateway-audit-head\0" + key).digest()
    tag = hashlib.blake2b(body, key=derived, digest_size=32).hexdigest().encode()
    slot = body + tag + b"\n"
    return slot + bytes(4096 - len(slot)) + slot


# --- another chain's head over a cut chain -------------------------------------------------


@pytest.mark.parametrize("source", ["another writer", "another trail"])
def test_a_head_copied_from_another_chain_over_a_cut_chain_fails_verification(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str
) -> None:
    path, second = two_writers(tmp_path / "trail")
    if source == "another trail":  # a chain of another trail under the same key
        second = tmp_path / "other" / "audit.jsonl"
        write(second, 3, note="other")
    cut(path, 5)
    shutil.copyfile(head_path(second), head_path(path))
    key_file = tmp_path / "audit.key"
    key_file.write_bytes(KEY)

    result = check(path)
    status = main(["audit", "verify", "--key-file", str(key_file), str(path)])
    err = capsys.readouterr().err

    assert (result.ok, result.records) == (False, 5)
    assert str(result.error).startswith(f"{path}:1: record 1 is not the first record of the ")
    assert "another chain's" in str(result.error)
    assert status == 1
    assert f"FAILED: {path}:1: " in err


def test_a_head_from_another_chain_naming_more_records_than_are_left_fails(
    tmp_path: Path,
) -> None:
    path, second = two_writers(tmp_path, first=4, second=8)
    cut(path, 2)
    shutil.copyfile(head_path(second), head_path(path))

    assert check(path).ok is False


def test_every_writer_chain_with_another_writers_head_fails_in_verify_trail(
    tmp_path: Path,
) -> None:
    # The heads of the two writers swapped, each chain cut to at least the other's length.
    path, second = two_writers(tmp_path, first=6, second=6)
    first_head, second_head = head_path(path).read_bytes(), head_path(second).read_bytes()
    head_path(path).write_bytes(second_head)
    head_path(second).write_bytes(first_head)

    results = verify_trail(path, key=KEY)

    assert [(chain.name, result.ok) for chain, result in results] == [
        ("audit.jsonl", False),
        ("audit.w2.jsonl", False),
    ]


def test_a_head_of_the_earlier_two_slot_form_is_checked_against_the_record_at_its_seq(
    tmp_path: Path,
) -> None:
    # That form does not name its chain, but the chain must still hold the record the head
    # names with the head's hash: another chain's earlier-form head fails too.
    path, second = two_writers(tmp_path, first=10, second=3)
    other = [json.loads(line) for line in second.read_bytes().splitlines()]
    cut(path, 5)
    head_path(path).write_bytes(v2_head(3, other[2]["hash"], KEY))

    result = check(path)

    assert result.ok is False
    assert str(result.error).startswith(f"{path}:3: record 3 does not match the head ")


def test_a_head_of_the_earlier_two_slot_form_of_its_own_chain_is_read_then_rewritten(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    records = write(path, 4)
    head_path(path).write_bytes(v2_head(3, records[2]["hash"], KEY))

    assert check(path).ok is True  # one record behind: what a crash can leave
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        assert len(head_path(path).read_bytes()) == _chain.HEAD_FILE_SIZE
        sink.submit({"n": 4}).result(WAIT)
    assert check(path).ok is True
    assert _chain.load_head(head_path(path), KEY).chain == records[0]["hash"]


# --- what the head names -------------------------------------------------------------------


def test_the_head_names_the_chains_first_record_and_its_last(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY) as sink:
        empty = _chain.load_head(head_path(path), KEY)
        records = [sink.submit({"n": n}).result(WAIT) for n in range(3)]
        named = _chain.load_head(head_path(path), KEY)

    assert (empty.seq, empty.hash, empty.chain) == (0, GENESIS, GENESIS)
    assert (named.seq, named.hash, named.chain) == (3, records[2]["hash"], records[0]["hash"])


def test_a_resumed_chain_keeps_naming_its_first_record(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    first = write(path, 2)[0]
    with JsonlFileSink(path, fsync="none", key=KEY, max_bytes=1) as sink:  # rotates each time
        last = [sink.submit({"n": n}).result(WAIT) for n in range(3)][-1]

    named = _chain.load_head(head_path(path), KEY)
    assert (named.seq, named.hash, named.chain) == (5, last["hash"], first["hash"])
    assert check(path).ok is True


def test_a_slot_tagged_for_one_chain_does_not_read_as_naming_another(tmp_path: Path) -> None:
    # Changing the chain a slot names, without the key, makes the slot not intact.
    path = tmp_path / "audit.jsonl"
    records = write(path, 2)
    raw = head_path(path).read_bytes()
    forged = raw.replace(records[0]["hash"].encode(), b"f" * 64)
    assert forged != raw
    head_path(path).write_bytes(forged)

    assert [slot is None for slot in _chain.decode_head_slots(forged, KEY)] == [True, True]
    assert "unreadable head" in str(check(path).error)


def test_a_head_behind_its_chain_is_accepted_and_still_catches_a_cut_below_it(
    tmp_path: Path,
) -> None:
    # A crash can leave the head a batch behind: the records past it are not checked (the
    # head cannot know them), the one it names is.
    path = tmp_path / "audit.jsonl"
    writes: list[int] = []

    def stalling_head(fd: int, data: bytes, offset: int) -> int:
        writes.append(offset)
        if len(writes) > 2:  # the head stops at record 2, as a crash would leave it
            return len(data)
        return os.pwrite(fd, data, offset)

    with JsonlFileSink(path, fsync="none", key=KEY, write_head=stalling_head) as sink:
        for n in range(5):
            sink.submit({"n": n}).result(WAIT)

    assert _chain.load_head(head_path(path), KEY).seq == 2
    assert check(path).ok is True
    cut(path, 2)
    assert check(path).ok is True
    cut(path, 1)
    assert "records were truncated" in str(check(path).error)


def test_a_head_naming_no_record_yet_is_accepted_over_a_chain(tmp_path: Path) -> None:
    # A crash between the first records and the first head update leaves the head naming
    # record 0, which every chain holds: it cannot show a cut (the module's caveat).
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY, write_head=lambda _fd, d, _o: len(d)) as sink:
        sink.submit({"n": 0}).result(WAIT)

    assert _chain.load_head(head_path(path), KEY).seq == 0
    assert check(path).ok is True


def test_no_head_message_quotes_a_hash(tmp_path: Path) -> None:
    path, second = two_writers(tmp_path)
    cut(path, 5)
    shutil.copyfile(head_path(second), head_path(path))

    error = str(check(path).error)
    assert re.search(r"[0-9a-f]{64}", error.replace(str(tmp_path), "")) is None


# --- the sink refuses a head that is not its chain's ---------------------------------------


def test_a_sink_refuses_to_resume_a_chain_under_another_chains_head_and_leaves_it(
    tmp_path: Path,
) -> None:
    # Resuming would rewrite the head to name the cut chain's end, hiding the cut.
    path, second = two_writers(tmp_path)
    cut(path, 5)
    shutil.copyfile(head_path(second), head_path(path))
    copied = head_path(path).read_bytes()

    with pytest.raises(AuditWriteError, match="head of another chain"):
        JsonlFileSink(path, fsync="none", key=KEY)
    assert head_path(path).read_bytes() == copied
    assert check(path).ok is False


def test_a_sink_refuses_a_chain_whose_last_record_differs_from_its_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write(path, 3)
    other = tmp_path / "other" / "audit.jsonl"
    write(other, 3, note="b")
    # The whole active file replaced by another chain's (same length), its head kept.
    path.write_bytes(other.read_bytes())

    with pytest.raises(AuditWriteError, match="head of another chain"):
        JsonlFileSink(path, fsync="none", key=KEY)


# --- any cut under any other chain's head --------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mine=st.integers(1, 8),
    theirs=st.integers(1, 8),
    keep=st.integers(0, 8),
)
def test_no_cut_of_a_chain_verifies_under_another_chains_head(
    tmp_path_factory: pytest.TempPathFactory, mine: int, theirs: int, keep: int
) -> None:
    folder = tmp_path_factory.mktemp("trail")
    path, second = two_writers(folder, first=mine, second=theirs)
    cut(path, min(keep, mine))
    shutil.copyfile(head_path(second), head_path(path))

    assert check(path).ok is False


def test_the_cli_says_how_many_records_are_past_the_head_and_so_unchecked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A head behind its chain (a crash before the head caught up, or a head copied from a
    # chain that had just begun) vouches for fewer records than the chain holds: those past
    # it could be cut unseen, so a plain "ok" would claim more than was checked.
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync="none", key=KEY, write_head=lambda _fd, d, _o: len(d)) as sink:
        for n in range(3):
            sink.submit({"n": n}).result(WAIT)
    key_file = tmp_path / "audit.key"
    key_file.write_bytes(KEY)

    status = main(["audit", "verify", "--key-file", str(key_file), str(path)])
    behind = capsys.readouterr().out
    write(tmp_path / "current" / "audit.jsonl", 3)
    main(["audit", "verify", "--key-file", str(key_file), str(tmp_path / "current")])
    current = capsys.readouterr().out

    assert status == 0
    assert check(path).head_seq == 0
    assert "its last 3 record(s) are past its head, unchecked" in behind
    assert current.startswith("ok: ")
    assert "past its head" not in current
