"""The file sink's awaited write when a record is durable once appended (fsync none, batch)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audit import AuditWriteError, JsonlFileSink, verify
from gateway.audit._chain import head_path, trail_files

KEY = b"sink-write-audit-chain-key-32-by"


def check(path: Path) -> bool:
    return verify(trail_files(path), key=KEY, head=head_path(path)).ok


@pytest.mark.parametrize("fsync", ["none", "batch"])
async def test_an_awaited_write_returns_its_chained_record_as_soon_as_it_is_appended(
    tmp_path: Path, fsync: str
) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync=fsync, key=KEY) as sink:
        first = await sink.write({"n": 1})
        second = await sink.write({"n": 2})
    assert (first["seq"], second["seq"]) == (1, 2)
    assert second["prev"] == first["hash"]
    assert check(path)


@pytest.mark.parametrize("fsync", ["none", "batch", "always"])
async def test_an_awaited_write_of_a_record_that_is_not_json_fails_alone(
    tmp_path: Path, fsync: str
) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlFileSink(path, fsync=fsync, key=KEY) as sink:
        with pytest.raises(AuditWriteError, match="not JSON"):
            await sink.write({"call_id": "\ud800"})
        assert (await sink.write({"n": 1}))["seq"] == 1
    assert check(path)


@pytest.mark.parametrize("fsync", ["none", "batch", "always"])
async def test_an_awaited_write_to_a_closed_sink_raises_audit_write_error(
    tmp_path: Path, fsync: str
) -> None:
    sink = JsonlFileSink(tmp_path / "audit.jsonl", fsync=fsync, key=KEY)
    sink.close()
    with pytest.raises(AuditWriteError, match="closed"):
        await sink.write({"n": 1})
    assert sink.submit({"n": 1}).exception() is not None


_VALUES = st.one_of(st.integers(), st.text(max_size=8), st.none(), st.booleans())


@settings(max_examples=25, deadline=None)
@given(
    fsync=st.sampled_from(["none", "batch"]),
    steps=st.lists(st.tuples(st.booleans(), st.booleans(), _VALUES), min_size=1, max_size=20),
)
def test_awaited_and_submitted_records_in_any_order_chain_consecutively_and_verify(
    fsync: str, steps: list[tuple[bool, bool, object]]
) -> None:
    # Each step: awaited or submitted, a plain record or one that is not JSON.
    async def run(sink: JsonlFileSink) -> list[int]:
        seqs = []
        for awaited, plain, value in steps:
            record = {"v": value} if plain else {"v": value, "bad": float("nan")}
            try:
                if awaited:
                    chained = await sink.write(record)
                else:
                    chained = sink.submit(record).result(timeout=10)
            except AuditWriteError:
                assert not plain
                continue
            assert plain
            seqs.append(chained["seq"])
        return seqs

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "audit.jsonl"
        with JsonlFileSink(path, fsync=fsync, key=KEY) as sink:
            seqs = asyncio.run(run(sink))
        assert seqs == list(range(1, len(seqs) + 1))
        assert check(path)
