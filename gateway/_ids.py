"""Unpredictable identifiers without a system call each.

Decision ids and call ids are shown to callers and may name a decision to approve or replay,
so they must be unguessable: they are bytes from the operating system's CSPRNG
(``os.urandom``), as ``uuid.uuid4`` and ``secrets`` give. Those make one ``getrandom`` system
call per id, which on the gateway's hot path costs more than the rest of an id's work; here
the bytes are drawn in blocks of :data:`BLOCK_BYTES` and each byte is handed out once.

A forked child drops the block it inherited (and the lock, which a parent's thread may have
held at the fork), so two processes never hand out the same bytes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Final

#: How many random bytes one system call draws.
BLOCK_BYTES: Final = 4096


class Pool:
    """Random bytes from ``source`` (default ``os.urandom``), drawn :data:`BLOCK_BYTES` at once.

    Each byte is handed out once. Thread-safe; not fork-safe by itself (the module's pool
    is reset in a forked child).
    """

    __slots__ = ("_block", "_lock", "_offset", "_source")

    def __init__(self, source: Callable[[int], bytes] = os.urandom) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._block = b""
        self._offset = 0

    def take(self, count: int) -> bytes:
        """``count`` bytes never handed out before by this pool."""
        if count < 0:
            raise ValueError("count must not be negative")
        if count > BLOCK_BYTES:
            return self._source(count)
        with self._lock:
            start = self._offset
            end = start + count
            if end > len(self._block):
                block = self._source(BLOCK_BYTES)
                if len(block) != BLOCK_BYTES:
                    raise RuntimeError("the random source gave a short block")
                self._block = block
                start, end = 0, count
            self._offset = end
            return self._block[start:end]

    def reset(self) -> None:
        """Drop the bytes drawn (in a forked child: they are the parent's to hand out)."""
        self._lock = threading.Lock()
        self._block = b""
        self._offset = 0


_POOL: Final = Pool()
os.register_at_fork(after_in_child=_POOL.reset)


def random_bytes(count: int) -> bytes:
    """``count`` bytes from the OS's CSPRNG, never handed out before in this process."""
    return _POOL.take(count)


def random_hex(count: int = 16) -> str:
    """:func:`random_bytes` as ``2 * count`` lowercase hexadecimal digits (default 128 bits)."""
    return random_bytes(count).hex()
