"""Random identifiers: each byte of the OS's CSPRNG handed out once, one draw per block."""

from __future__ import annotations

import os
import re
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway._ids import BLOCK_BYTES, Pool, random_bytes, random_hex


class _CountingSource:
    """A deterministic source that numbers its bytes, and records each draw."""

    def __init__(self) -> None:
        self.draws: list[int] = []
        self._next = 0

    def __call__(self, count: int) -> bytes:
        self.draws.append(count)
        start, self._next = self._next, self._next + count
        # Byte i of the stream is i mod 256: a take that is not the next bytes the model
        # expects differs from them.
        return bytes((start + index) % 256 for index in range(count))


def test_random_hex_is_128_bits_of_lowercase_hex() -> None:
    ids = {random_hex() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in ids)


@given(st.lists(st.integers(min_value=0, max_value=BLOCK_BYTES + 10), max_size=40))
def test_a_pool_hands_out_consecutive_bytes_of_its_blocks(counts: list[int]) -> None:
    # A model of the pool: a new block when the take does not fit in what is left.
    source = _CountingSource()
    pool = Pool(source)
    model = _CountingSource()
    block, offset, draws = b"", 0, []
    for count in counts:
        taken = pool.take(count)
        if count > BLOCK_BYTES:
            expected = model(count)
            draws.append(count)
        else:
            if offset + count > len(block):
                block, offset = model(BLOCK_BYTES), 0
                draws.append(BLOCK_BYTES)
            expected, offset = block[offset : offset + count], offset + count
        assert taken == expected
    assert source.draws == draws


def test_a_pool_draws_once_per_block_not_once_per_id() -> None:
    source = _CountingSource()
    pool = Pool(source)
    for _ in range(BLOCK_BYTES // 16 * 3):
        pool.take(16)
    assert source.draws == [BLOCK_BYTES] * 3


def test_no_byte_of_a_block_is_handed_out_twice() -> None:
    blocks: list[bytes] = []

    def source(count: int) -> bytes:
        blocks.append(os.urandom(count))
        return blocks[-1]

    pool = Pool(source)
    taken = b"".join(pool.take(10) for _ in range(1000))
    # The takes are the blocks' prefixes, in order: the tail too short for a take is dropped.
    usable = BLOCK_BYTES - BLOCK_BYTES % 10
    assert taken == b"".join(block[:usable] for block in blocks)[: len(taken)]


def test_threads_never_share_an_id() -> None:
    pool = Pool()
    found: list[list[bytes]] = [[] for _ in range(8)]

    def work(index: int) -> None:
        found[index].extend(pool.take(16) for _ in range(3000))

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [value for values in found for value in values]
    assert len(set(every)) == len(every) == 8 * 3000


def test_a_short_block_from_the_source_is_refused() -> None:
    pool = Pool(lambda count: b"\0" * (count - 1))
    with pytest.raises(RuntimeError, match="short block"):
        pool.take(16)


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        random_bytes(-1)


def test_a_forked_child_never_repeats_the_parents_ids() -> None:
    random_hex()  # the parent holds a block with bytes left in it
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids and leave at once
        try:
            os.write(writer, "".join(random_hex() for _ in range(50)).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    parent = "".join(random_hex() for _ in range(50))
    child_ids = {child[index : index + 32] for index in range(0, len(child), 32)}
    parent_ids = {parent[index : index + 32] for index in range(0, len(parent), 32)}
    assert len(child_ids) == 50
    assert not child_ids & parent_ids
