"""Random identifiers: 128 bits of the OS's CSPRNG, distinct across threads and processes."""

from __future__ import annotations

import os
import re
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway._ids import random_hex


def test_random_hex_is_128_bits_of_lowercase_hex() -> None:
    ids = {random_hex() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in ids)


@given(st.integers(min_value=0, max_value=256))
def test_random_hex_has_two_digits_per_byte(count: int) -> None:
    assert re.fullmatch(rf"[0-9a-f]{{{2 * count}}}", random_hex(count))


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        random_hex(-1)


def test_threads_never_share_an_id() -> None:
    found: list[list[str]] = [[] for _ in range(8)]

    def work(index: int) -> None:
        found[index].extend(random_hex() for _ in range(3000))

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [value for values in found for value in values]
    assert len(set(every)) == len(every) == 8 * 3000


def test_a_forked_child_never_repeats_the_parents_ids() -> None:
    random_hex()
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
