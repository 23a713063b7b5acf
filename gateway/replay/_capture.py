"""The replay capture: each decision's full policy input, encrypted, beside the audit trail.

The audit trail masks secrets, so the input a policy saw cannot be rebuilt from it. The
capture keeps that input whole, encrypted with AES-256-GCM (authenticated encryption) under
the active key of a :class:`KeyRing`, one JSON line per decision in files of its own folder,
linked to the trail by the decision id. Each line is::

    {"c": "<ciphertext, base64>", "id": "<decision id>", "k": "<key id>",
     "kc": "<check value of that key>", "n": "<96-bit nonce, base64>", "v": 1}

The decision id, the key id and the format version are authenticated with the ciphertext
(associated data), so a record edited, cut, or moved to another decision fails to open;
the key check tells a wrong key from a tampered record. The plaintext is one line of header
(tool, caller roles, the recorded outcome) and the input document's exact JSON bytes.

Each process writes its own file (``capture.<time>.<random>.jsonl``, mode 0600), so writers
never interleave. A record is written to the page cache on the caller's thread, as the
audit file sink writes; it is not fsynced (the trail, not the capture, is the record of
what happened).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from cryptography.exceptions import InvalidTag

from gateway.replay._keys import KeyRing
from gateway.replay._outcome import Outcome

_LOG: Final = logging.getLogger("gateway.replay")
_VERSION: Final = 1
_AAD_PREFIX: Final = b"gateway-replay capture v1\0"
_NONCE_BYTES: Final = 12
_SUFFIX: Final = ".jsonl"
_PREFIX: Final = "capture."
#: A capture line longer than this is not one the writer made (an input is at most ~16 MiB).
MAX_LINE_BYTES: Final = 64 << 20

#: Why a recorded decision could not be replayed (stable codes, for reports and CI).
NO_CAPTURE: Final = "no-capture"
NO_KEY: Final = "no-key"
UNKNOWN_KEY_ID: Final = "unknown-key-id"
WRONG_KEY: Final = "wrong-key"
TAMPERED: Final = "tampered"
MALFORMED: Final = "malformed"
CONFLICTING: Final = "conflicting"
MISMATCH: Final = "mismatch"
DUPLICATE: Final = "duplicate"

REASONS: Final = {
    NO_CAPTURE: "no capture record for this decision (capture off, a masked-only trail, "
    "or the record was lost)",
    NO_KEY: "a capture record exists but no replay key was given",
    UNKNOWN_KEY_ID: "the capture record's key id is not in the key ring",
    WRONG_KEY: "the key ring's key for the record's key id is not the key that wrote it",
    TAMPERED: "the capture record failed authentication (modified, cut, or moved to "
    "another decision)",
    MALFORMED: "the capture record is not in the form the capture writes",
    CONFLICTING: "two different capture records name this decision",
    MISMATCH: "the capture record's tool or result differs from its trail record",
    DUPLICATE: "the trail names this decision id more than once",
}
#: The reasons that mean the capture cannot be trusted (``--fail-on auth-failure``).
AUTH_FAILURES: Final = frozenset(
    {UNKNOWN_KEY_ID, WRONG_KEY, TAMPERED, MALFORMED, CONFLICTING, MISMATCH, DUPLICATE}
)


def _aad(key_id: str, decision_id: str) -> bytes:
    return (
        _AAD_PREFIX + key_id.encode("utf-8") + b"\0" + decision_id.encode("utf-8", "surrogatepass")
    )


def _header(tool: str, roles: Sequence[str] | None, recorded: Outcome) -> bytes:
    # ASCII JSON: no raw newline can occur in it, so the first newline ends it.
    header = {
        "recorded": recorded.as_dict(),
        "roles": list(roles) if roles is not None else None,
        "tool": tool,
        "v": _VERSION,
    }
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode("ascii")


def seal(
    keyring: KeyRing,
    decision_id: str,
    document_json: bytes,
    *,
    tool: str,
    roles: Sequence[str] | None,
    recorded: Outcome,
    nonce: bytes | None = None,
) -> bytes:
    """One capture line (with its newline) for one decision, under the active key."""
    key_id = keyring.active_id
    cipher = keyring.cipher(key_id)
    assert cipher is not None  # noqa: S101 - the active id is always in the ring
    nonce = nonce if nonce is not None else secrets.token_bytes(_NONCE_BYTES)
    plaintext = _header(tool, roles, recorded) + b"\n" + document_json
    ciphertext = cipher.encrypt(nonce, plaintext, _aad(key_id, decision_id))
    line = {
        "c": base64.b64encode(ciphertext).decode("ascii"),
        "id": decision_id,
        "k": key_id,
        "kc": keyring.check(key_id),
        "n": base64.b64encode(nonce).decode("ascii"),
        "v": _VERSION,
    }
    return json.dumps(line, sort_keys=True, separators=(",", ":")).encode("ascii") + b"\n"


@dataclass(frozen=True, slots=True)
class Captured:
    """One opened capture record.

    Attributes:
        decision_id: the decision it belongs to.
        tool: the tool's name.
        roles: the caller's roles (``None`` when the context had no list of roles).
        recorded: the outcome the enforced policy gave.
        document: the input document's exact JSON bytes.
    """

    decision_id: str
    tool: str
    roles: tuple[str, ...] | None
    recorded: Outcome
    document: bytes


class ReplayCapture:
    """Writes capture records into ``directory`` (made 0700 if missing), one file per writer.

    Thread-safe. A record that cannot be written is counted (:attr:`failed`) and logged by
    its decision id only; it never fails the call it describes.

    Args:
        directory: the capture folder (keep it apart from the audit trail).
        keyring: the keys; new records use its active key.
        clock: seconds since the epoch, for the file name.

    Raises:
        OSError: the folder or the file cannot be made.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        keyring: KeyRing,
        *,
        clock: Any = time.time,
    ) -> None:
        self._directory = Path(directory)
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._keyring = keyring
        name = f"{_PREFIX}{int(clock() * 1e6):016d}.{secrets.token_hex(4)}{_SUFFIX}"
        self._path = self._directory / name
        self._fd = os.open(
            self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
        )
        self._lock = threading.Lock()
        self._closed = False
        self.written = 0
        self.failed = 0

    @property
    def path(self) -> Path:
        """This writer's file."""
        return self._path

    def record(
        self,
        decision_id: str,
        document_json: bytes,
        *,
        tool: str,
        roles: Sequence[str] | None,
        recorded: Outcome,
    ) -> bool:
        """Encrypt and append one decision's input; ``False`` (counted) when it failed."""
        problem: str | None = None
        try:
            line = seal(
                self._keyring, decision_id, document_json, tool=tool, roles=roles, recorded=recorded
            )
            with self._lock:
                if self._closed:
                    problem = "closed"
                else:
                    view = memoryview(line)
                    while view:
                        view = view[os.write(self._fd, view) :]
                    self.written += 1
        except Exception as exc:  # noqa: BLE001 - a capture failure never fails a call
            problem = type(exc).__name__
        if problem is None:
            return True
        with self._lock:
            self.failed += 1
        # The decision id only: the input may hold anything.
        _LOG.warning("replay capture: decision %r not captured (%s)", decision_id, problem)
        return False

    def close(self) -> None:
        """Close the file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._fd)

    def __enter__(self) -> ReplayCapture:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# -- reading -------------------------------------------------------------------------------


def capture_files(directory: Path) -> list[Path]:
    """The capture files of a folder, in name order (which is the order they were begun)."""
    return sorted(
        path
        for path in directory.iterdir()
        if path.name.startswith(_PREFIX) and path.name.endswith(_SUFFIX) and path.is_file()
    )


@dataclass(slots=True)
class CaptureIndex:
    """Where each decision's capture record is: ``(file number, offset, length)`` by id.

    Attributes:
        files: the capture files read.
        entries: decision id to the record's place.
        conflicting: decision ids named by two different records.
        malformed: places (``file:line``) of lines that name no decision.
    """

    files: list[Path] = field(default_factory=list)
    entries: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    conflicting: set[str] = field(default_factory=set)
    malformed: list[str] = field(default_factory=list)
    _fds: dict[int, int] = field(default_factory=dict)

    def read(self, decision_id: str) -> bytes | None:
        """The record line of ``decision_id``, if there is one.

        Raises:
            OSError: its file cannot be read.
        """
        place = self.entries.get(decision_id)
        if place is None:
            return None
        number, offset, length = place
        fd = self._fds.get(number)
        if fd is None:
            fd = self._fds[number] = os.open(self.files[number], os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(fd, length, offset)

    def close(self) -> None:
        """Close the files :meth:`read` opened."""
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


def _line_id(line: bytes) -> str | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    decision_id = value.get("id") if isinstance(value, dict) else None
    return decision_id if isinstance(decision_id, str) else None


def _bounded_lines(handle: BinaryIO, limit: int) -> Iterator[bytes]:
    # Lines as they are in the file; one longer than ``limit`` is read in parts of that
    # size, never whole (each part is malformed: none is a whole record).
    while line := handle.readline(limit):
        yield line


def index_captures(directory: Path, *, max_line: int = MAX_LINE_BYTES) -> CaptureIndex:
    """Index every capture record of ``directory`` by decision id.

    A line longer than ``max_line`` is not read whole: its parts are malformed lines.

    Raises:
        OSError: the folder or a file cannot be read.
    """
    index = CaptureIndex(files=capture_files(directory))
    for number, path in enumerate(index.files):
        with path.open("rb") as handle:
            offset = 0
            for line_number, line in enumerate(_bounded_lines(handle, max_line), start=1):
                length = len(line)
                decision_id = _line_id(line) if line.endswith(b"\n") else None
                if decision_id is None:
                    index.malformed.append(f"{path}:{line_number}")
                else:
                    known = index.entries.get(decision_id)
                    if known is None:
                        index.entries[decision_id] = (number, offset, length)
                    elif decision_id not in index.conflicting and (index.read(decision_id) != line):
                        index.conflicting.add(decision_id)
                offset += length
    return index


def _b64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError("not base64 text")
    return base64.b64decode(value, validate=True)


def open_capture(  # noqa: PLR0911 - one return per way a record can fail
    line: bytes, decision_id: str, keyring: KeyRing | None
) -> Captured | str:
    """Decrypt and check the capture record of ``decision_id``: the record, or a reason code.

    Never raises for what the line holds.
    """
    try:
        record = json.loads(line)
        if not isinstance(record, dict) or set(record) != {"c", "id", "k", "kc", "n", "v"}:
            return MALFORMED
        if record["v"] != _VERSION or record["id"] != decision_id:
            return MALFORMED
        key_id, check = record["k"], record["kc"]
        if not isinstance(key_id, str) or not isinstance(check, str):
            return MALFORMED
        nonce, ciphertext = _b64(record["n"]), _b64(record["c"])
    except (ValueError, TypeError, RecursionError, binascii.Error):
        return MALFORMED
    if len(nonce) != _NONCE_BYTES:
        return MALFORMED
    if keyring is None:
        return NO_KEY
    cipher = keyring.cipher(key_id)
    if cipher is None:
        return UNKNOWN_KEY_ID
    if keyring.check(key_id) != check:
        return WRONG_KEY
    try:
        plaintext = cipher.decrypt(nonce, ciphertext, _aad(key_id, decision_id))
    except InvalidTag:
        return TAMPERED
    header_bytes, newline, document = plaintext.partition(b"\n")
    try:
        header = json.loads(header_bytes)
        if not newline or not isinstance(header, dict) or header.get("v") != _VERSION:
            return MALFORMED
        roles = header.get("roles")
        tool = header.get("tool")
        if not isinstance(tool, str) or not (
            roles is None or (isinstance(roles, list) and all(isinstance(r, str) for r in roles))
        ):
            return MALFORMED
        recorded = Outcome.from_dict(header.get("recorded"))
    except (ValueError, RecursionError):
        return MALFORMED
    return Captured(
        decision_id, tool, tuple(roles) if roles is not None else None, recorded, document
    )
