"""The replay key ring: AES-256-GCM keys by key id, the first one active.

A key ring is text: one or more ``KEY_ID:BASE64`` entries separated by white space or
commas, each a 32-byte key. New captures are encrypted with the first entry; every entry
decrypts the captures written under its id, so a key is rotated by putting the new key
first and keeping the old ones for as long as their captures are to be replayed.

Errors name the entry by its position, never its text: the text is key material.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gateway import GatewayError

#: The key size: AES-256.
KEY_BYTES: Final = 32
_KEY_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SEPARATORS: Final = re.compile(r"[\s,]+")
_CHECK_LABEL: Final = b"gateway-replay key check v1"


class KeyRingError(GatewayError, ValueError):
    """A replay key ring that is missing, unreadable or malformed."""

    code = "replay_key_invalid"


def key_check(key: bytes) -> str:
    """A short public check value of ``key``: tells a wrong key from a tampered record."""
    return hmac.new(key, _CHECK_LABEL, hashlib.sha256).hexdigest()[:16]


class KeyRing:
    """Replay keys by id; :attr:`active_id` names the one new captures are encrypted with.

    Args:
        keys: key id to 32-byte key, in order; the first is active.

    Raises:
        KeyRingError: no key, a malformed key id, or a key that is not 32 bytes.
    """

    __slots__ = ("_active", "_checks", "_ciphers", "_keys")

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise KeyRingError("the replay key ring holds no key")
        for number, (key_id, key) in enumerate(keys.items(), start=1):
            if not isinstance(key_id, str) or _KEY_ID.fullmatch(key_id) is None:
                raise KeyRingError(
                    f"replay key {number}: the key id must be 1-64 of A-Z a-z 0-9 . _ -"
                )
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise KeyRingError(f"replay key {number}: a key must be {KEY_BYTES} bytes")
        self._keys = dict(keys)
        self._active = next(iter(self._keys))
        self._checks = {key_id: key_check(key) for key_id, key in self._keys.items()}
        self._ciphers = {key_id: AESGCM(key) for key_id, key in self._keys.items()}

    @classmethod
    def parse(cls, text: str, *, where: str = "replay key") -> KeyRing:
        """Read ``KEY_ID:BASE64`` entries (white space or commas between them).

        Raises:
            KeyRingError: an entry without an id, not base64, not 32 bytes, or an id twice.
        """
        keys: dict[str, bytes] = {}
        entries = [entry for entry in _SEPARATORS.split(text.strip()) if entry]
        for number, entry in enumerate(entries, start=1):
            key_id, colon, encoded = entry.partition(":")
            if not colon or _KEY_ID.fullmatch(key_id) is None:
                raise KeyRingError(f"{where}: entry {number} is not KEY_ID:BASE64")
            try:
                key = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise KeyRingError(f"{where}: entry {number} is not base64") from None
            if len(key) != KEY_BYTES:
                raise KeyRingError(f"{where}: entry {number} is not a {KEY_BYTES}-byte key")
            if key_id in keys:
                raise KeyRingError(f"{where}: key id {key_id!r} appears twice")
            keys[key_id] = key
        return cls(keys)

    @classmethod
    def from_env(cls, name: str, *, environ: Mapping[str, str] | None = None) -> KeyRing:
        """The key ring held by the environment variable ``name``.

        Raises:
            KeyRingError: the variable is unset or empty, or its ring is malformed.
        """
        value = (os.environ if environ is None else environ).get(name, "")
        if not value.strip():
            raise KeyRingError(f"replay key: the environment variable {name} is not set")
        return cls.parse(value, where=f"replay key in ${name}")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        """The key ring held by the file at ``path``, which only its owner may read.

        Raises:
            KeyRingError: the file cannot be read, others may read or write it, or its
                ring is malformed.
        """
        where = Path(path)
        try:
            mode = where.stat().st_mode
            text = where.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not ASCII text"
            raise KeyRingError(f"replay key file {where}: cannot read it: {reason}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise KeyRingError(
                f"replay key file {where}: group or others may access it (chmod 600 it)"
            )
        return cls.parse(text, where=f"replay key file {where}")

    @property
    def active_id(self) -> str:
        """The id of the key new captures are encrypted with."""
        return self._active

    @property
    def ids(self) -> tuple[str, ...]:
        """Every key id, the active one first."""
        return tuple(self._keys)

    def key(self, key_id: str) -> bytes | None:
        """The key of ``key_id``, if the ring holds it."""
        return self._keys.get(key_id)

    def cipher(self, key_id: str) -> AESGCM | None:
        """The AES-256-GCM cipher of the key of ``key_id``, if the ring holds it."""
        return self._ciphers.get(key_id)

    def check(self, key_id: str) -> str | None:
        """The check value of the key of ``key_id``, if the ring holds it."""
        return self._checks.get(key_id)

    def __repr__(self) -> str:
        # Never the keys.
        return f"KeyRing(ids={list(self._keys)!r}, active={self._active!r})"


def new_key_entry(key_id: str) -> str:
    """A fresh random ``KEY_ID:BASE64`` entry for a key ring.

    Raises:
        KeyRingError: the key id is malformed.
    """
    if _KEY_ID.fullmatch(key_id) is None:
        raise KeyRingError("the key id must be 1-64 of A-Z a-z 0-9 . _ -")
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode('ascii')}"
