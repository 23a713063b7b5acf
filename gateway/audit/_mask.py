"""Masking of sensitive values before they enter an audit record.

A masked value is replaced by a keyed digest (HMAC-SHA256), so equal secrets stay
correlatable within a trail without being recoverable by guessing. The raw value is also
scrubbed from every other string in the record (a policy message that echoes it, say).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from typing import Any, Final

from gateway import _json

#: Key names masked by default, compared case-insensitively without ``-``/``_``.
DEFAULT_MASKED_KEYS: Final = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "clientsecret",
        "token",
        "accesstoken",
        "refreshtoken",
        "idtoken",
        "apikey",
        "authorization",
        "privatekey",
        "cardnumber",
        "creditcard",
        "cvv",
        "ssn",
    }
)
_NORMALIZE: Final = re.compile(r"[^a-z0-9]")
_MIN_SCRUB: Final = 4


def _normalize(key: str) -> str:
    return _NORMALIZE.sub("", key.lower())


def _pointer(text: str) -> tuple[str, ...]:
    if text == "":
        return ()
    if not text.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {text!r}")
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/"))


class Masker:
    """Replaces sensitive values with ``"masked:<digest>"``.

    Args:
        keys: member names to mask wherever they occur (default :data:`DEFAULT_MASKED_KEYS`).
        pointers: JSON pointers (RFC 6901) of further values to mask, relative to the
            document being masked (``/card/number``).
        key: the HMAC key; a random one per process when omitted.
    """

    def __init__(
        self,
        *,
        keys: Iterable[str] = DEFAULT_MASKED_KEYS,
        pointers: Iterable[str] = (),
        key: bytes | None = None,
    ) -> None:
        self._keys = frozenset(_normalize(name) for name in keys)
        self._pointers = tuple(_pointer(pointer) for pointer in pointers)
        self._key = key if key is not None else secrets.token_bytes(32)

    def digest(self, value: Any) -> str:
        """The replacement text for one value (a non-string by its canonical JSON)."""
        if isinstance(value, str):
            text = value
        else:
            # Canonical JSON, so that equal objects give equal digests whatever their
            # member order; repr() only for values that are not JSON.
            try:
                text = _json.canonical(value).decode("utf-8")
            except (_json.StrictJSONError, UnicodeError):
                text = repr(value)
        mac = hmac.new(self._key, text.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return "masked:" + mac.hexdigest()[:24]

    def mask(self, document: Any, found: list[str] | None = None) -> Any:
        """A masked copy of ``document``; raw masked strings are appended to ``found``."""
        sink = found if found is not None else []
        return self._walk(document, (), sink)

    def _walk(self, node: Any, path: tuple[str, ...], found: list[str]) -> Any:
        if path and path in self._pointers:
            return self._replace(node, found)
        if isinstance(node, dict):
            result = {}
            for name, value in node.items():
                if isinstance(name, str) and _normalize(name) in self._keys:
                    result[name] = self._replace(value, found)
                else:
                    result[name] = self._walk(value, (*path, str(name)), found)
            return result
        if isinstance(node, list):
            return [self._walk(item, (*path, str(index)), found) for index, item in enumerate(node)]
        return node

    def _replace(self, value: Any, found: list[str]) -> str:
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                found.append(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif item is not None and not isinstance(item, bool):
                found.append(str(item))
        return self.digest(value)

    @staticmethod
    def scrub(record: Any, secrets_found: Iterable[str]) -> Any:
        """Remove every occurrence of the given raw values from all strings in ``record``."""
        needles = sorted({s for s in secrets_found if len(s) >= _MIN_SCRUB}, key=len, reverse=True)
        if not needles:
            return record

        def clean(node: Any) -> Any:
            if isinstance(node, str):
                for needle in needles:
                    if needle in node:
                        node = node.replace(needle, "[masked]")
                return node
            if isinstance(node, dict):
                return {clean(k): clean(v) for k, v in node.items()}
            if isinstance(node, list):
                return [clean(item) for item in node]
            return node

        return clean(record)
