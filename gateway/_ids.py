"""Unguessable identifiers: decision, call and request ids.

They are shown to callers and may name a decision to approve or replay, so they must be
unguessable: 128 bits from the operating system's CSPRNG (``os.urandom``), as ``uuid4``
gives. ``uuid.uuid4().hex`` builds a ``UUID`` object first and costs about five times as
much (2.2 us against 0.45 us measured here), and a pool of pre-drawn bytes behind a lock
cost more than the one ``getrandom`` system call it saves.
"""

from __future__ import annotations

import os


def random_hex(count: int = 16) -> str:
    """``count`` random bytes (default 16: 128 bits) as ``2 * count`` lowercase hex digits.

    Raises:
        ValueError: ``count`` is negative.
    """
    return os.urandom(count).hex()
