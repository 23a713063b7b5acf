"""One writer per chain: concurrent writers of one trail each get their own chain, and verify.

Two gateway processes on one configuration (two MCP clients each spawning one, a second
``serve``) must never append to one chain: each claims its own under an exclusive lock, and
``gateway audit verify`` checks every writer's chain of the trail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.audit import (
    JsonlFileSink,
    folder_chains,
    head_path,
    trail_files,
    verify,
    verify_trail,
    writer_chains,
    writer_path,
)
from gateway.cli import main

ROOT = Path(__file__).resolve().parents[2]
KEY = b"writers-audit-chain-key-32-bytes"

# A writer process: opens the trail, says which chain it holds, waits for "go" on stdin
# (so that every writer holds its chain at once), appends, closes, says "done".
WRITER = """
import sys
from gateway.audit import JsonlFileSink
path, count, name, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].encode()
sink = JsonlFileSink(path, fsync="none", key=key)
print(sink.path, flush=True)
if sys.stdin.readline().strip() == "go":
    for n in range(count):
        sink.submit({"writer": name, "n": n}).result(60)
    sink.close()
    print("done", flush=True)
else:  # "hold": keep the chain until killed
    sink.submit({"writer": name, "n": 0}).result(60)
    print("held", flush=True)
    sys.stdin.readline()
"""


class Writer:
    """A writer process, talked to line by line."""

    def __init__(self, path: Path, count: int, name: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(count), name, KEY.decode()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def hear(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def finish(self, *, kill: bool = False) -> int:
        if kill:
            self.process.send_signal(signal.SIGKILL)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        return self.process.wait(timeout=60)


def records_of(chain: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for file in trail_files(chain) for line in file.read_bytes().splitlines()
    ]


def test_two_processes_on_one_trail_each_append_to_their_own_chain_and_the_trail_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit" / "audit.jsonl"
    count = 300
    first, second = Writer(path, count, "a"), Writer(path, count, "b")
    held = {Path(first.hear()), Path(second.hear())}
    for process in (first, second):  # both hold their chain now: append at the same time
        process.say("go")
    done = [process.hear() for process in (first, second)]
    assert [process.finish() for process in (first, second)] == [0, 0]

    key_file = tmp_path / "audit.key"
    key_file.write_bytes(KEY)
    status = main(["audit", "verify", "--key-file", str(key_file), str(path)])
    out = capsys.readouterr().out

    assert held == {path, writer_path(path, 2)}
    assert done == ["done", "done"]
    assert status == 0, out
    assert out.count(f": {count} records") == 2
    assert {r["writer"] for r in records_of(path)} | {
        r["writer"] for r in records_of(writer_path(path, 2))
    } == {"a", "b"}
    for chain in (path, writer_path(path, 2)):
        assert len({r["writer"] for r in records_of(chain)}) == 1  # one writer per chain


def test_a_second_sink_on_a_held_trail_writes_the_next_chain_and_both_keep_working(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, key=KEY) as first, JsonlFileSink(path, key=KEY) as second:
        for n in range(5):
            first.submit({"n": n}).result(30)
            second.submit({"n": n}).result(30)
        paths = (first.path, second.path)

    assert paths == (path, tmp_path / "audit.w2.jsonl")
    assert [
        (chain, result.ok, result.records) for chain, result in verify_trail(path, key=KEY)
    ] == [
        (path, True, 5),
        (tmp_path / "audit.w2.jsonl", True, 5),
    ]


def test_a_closed_writer_releases_its_chain_and_the_next_one_resumes_it(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, key=KEY) as sink:
        sink.submit({"n": 1}).result(30)
    with JsonlFileSink(path, key=KEY) as sink:
        resumed = sink.submit({"n": 2}).result(30)

    assert (sink.path, resumed["seq"]) == (path, 2)
    assert writer_chains(path) == [path]


def test_a_killed_writer_leaves_no_stale_lock_and_its_chain_is_resumed(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    process = Writer(path, 1, "killed")
    assert Path(process.hear()) == path
    process.say("hold")
    assert process.hear() == "held"
    assert process.finish(kill=True) == -signal.SIGKILL

    with JsonlFileSink(path, key=KEY) as sink:
        resumed = sink.submit({"n": 1}).result(30)

    assert (sink.path, resumed["seq"]) == (path, 2)
    assert verify(trail_files(path), key=KEY, head=head_path(path)).ok is True


def test_each_writer_rotates_its_own_chain_into_its_own_segments(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with (
        JsonlFileSink(path, key=KEY, max_bytes=300) as first,
        JsonlFileSink(path, key=KEY, max_bytes=300) as second,
    ):
        for n in range(12):
            first.submit({"n": n}).result(30)
            second.submit({"n": n}).result(30)
    second_chain = writer_path(path, 2)

    assert len(trail_files(path)) > 2
    assert len(trail_files(second_chain)) > 2
    assert all(file.name.startswith("audit.w2.jsonl") for file in trail_files(second_chain))
    assert all(not file.name.startswith("audit.w2") for file in trail_files(path))
    assert [(result.ok, result.records) for _, result in verify_trail(path, key=KEY)] == [
        (True, 12),
        (True, 12),
    ]


def test_writer_paths_are_numbered_beside_the_configured_file() -> None:
    assert [writer_path(Path("/t/audit.jsonl"), n) for n in (1, 2, 10)] == [
        Path("/t/audit.jsonl"),
        Path("/t/audit.w2.jsonl"),
        Path("/t/audit.w10.jsonl"),
    ]
    assert writer_path(Path("/t/trail"), 3) == Path("/t/trail.w3")


def test_a_writer_chain_deleted_below_the_last_fails_verification(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, key=KEY) as first, JsonlFileSink(path, key=KEY) as second:
        first.submit({"n": 1}).result(30)
        second.submit({"n": 1}).result(30)
    for file in [*trail_files(path), head_path(path)]:
        file.unlink()

    results = verify_trail(path, key=KEY)

    assert [(chain, result.ok) for chain, result in results] == [
        (path, False),
        (writer_path(path, 2), True),
    ]
    assert "missing" in str(results[0][1].error)


def test_verifying_a_folder_checks_every_chain_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        JsonlFileSink(tmp_path / "a.jsonl", key=KEY) as a,
        JsonlFileSink(tmp_path / "a.jsonl", key=KEY) as a2,
        JsonlFileSink(tmp_path / "b.jsonl", key=KEY, max_bytes=100) as b,
    ):
        for n in range(3):
            for sink in (a, a2, b):
                sink.submit({"n": n}).result(30)
    key_file = tmp_path.parent / f"{tmp_path.name}.key"
    key_file.write_bytes(KEY)
    lines = (tmp_path / "a.w2.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "a.w2.jsonl").write_bytes(
        lines[0].replace(b'"n":0', b'"n":7') + b"".join(lines[1:])
    )

    chains = folder_chains(tmp_path)
    status = main(["audit", "verify", "--key-file", str(key_file), str(tmp_path)])
    out, err = capsys.readouterr()

    assert chains == [tmp_path / "a.jsonl", tmp_path / "a.w2.jsonl", tmp_path / "b.jsonl"]
    assert status == 1
    assert out.count("ok: ") == 2
    assert err.startswith(f"FAILED: {tmp_path / 'a.w2.jsonl'}:1: record was modified")
