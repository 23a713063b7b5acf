"""The hash chain that makes an audit trail tamper-evident, and its verification.

Each record carries ``seq`` (1, 2, 3, ... across every file of a chain), ``prev`` (the
previous record's hash, or the genesis value) and ``hash``: HMAC-SHA256 when a key is
configured (the only form that resists someone who can write the files), plain SHA-256
otherwise, over ``prev`` and the canonical JSON of the record without ``hash``. Changing,
deleting, inserting or reordering any record breaks the chain at that record; a cut inside a
line is a malformed record; a cut at a line boundary is caught by comparing the chain with
the head file the sink keeps beside it: two fixed-size slots, each tagged with the chain's
key, rewritten in turn in place, so that a rewrite torn by a crash leaves the other slot
naming an earlier end, and a damaged or forged slot never reads as a plausible head. A slot
names the chain it belongs to by its first record's hash (the chain's identity: record 1's
HMAC covers its content, and every later hash covers record 1), and the verifier requires
the record at the head's ``seq`` to be there with the head's hash: another chain's head,
copied over a cut chain's, never passes for its own (the heads of earlier versions are
still read).

A trail is a folder holding one chain per writer: no two processes ever append to one chain.
The first writer of ``audit.jsonl`` writes that file; while it holds it, a second writes
``audit.w2.jsonl``, and so on. Each chain rotates into its own numbered segments
(``audit.jsonl.000001`` ...) and keeps its own head (``audit.jsonl.head``).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

GENESIS: Final = "0" * 64

_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
_SEGMENT: Final = re.compile(r"\.[0-9]{6,}")
_SEGMENT_NAME: Final = re.compile(r"(.+)\.[0-9]{6,}")
# A record number is written by the sink; anything longer is not one.
_MAX_SEQ_DIGITS: Final = 19


def _plain(value: object) -> float:
    # Records hold plain JSON; an exact Decimal is written as the float a reader gets back.
    if isinstance(value, Decimal) and value.is_finite():
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def encode(record: Mapping[str, Any]) -> bytes:
    """The canonical line form of a record: sorted keys, compact, UTF-8, no NaN.

    The C encoder makes this cheap on the writer thread; a reader decodes with
    :func:`decode` (floats, as the writer saw) and re-encodes to exactly the same bytes.
    """
    return _ENCODER.encode(record).encode("utf-8")


# One encoder for every record: json.dumps would build one per call.
_ENCODER: Final = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    default=_plain,
)


class MalformedRecordError(ValueError):
    """A line of a trail that is not one record as the sink writes them."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: no record the sink writes holds one
        raise MalformedRecordError("a number is out of range")
    return value


def _refuse_constant(_: str) -> Any:
    raise MalformedRecordError("NaN and Infinity are not JSON")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        raise MalformedRecordError("a member name is repeated")
    return members


#: Made once: ``json.loads`` with hooks builds a decoder anew for every line. Reading a
#: text with it is exactly ``json.loads(text, ...)`` (a leading BOM is refused either way).
_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_unique, parse_float=_finite, parse_constant=_refuse_constant
)


def decode(line: bytes) -> Any:
    """Read one record line strictly: UTF-8, one JSON value, no duplicates, finite numbers.

    The interpreter's recursion limit bounds the nesting; the messages never quote the line.

    Raises:
        MalformedRecordError: the line is not one such value.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedRecordError("not valid UTF-8") from None
    try:
        return _DECODER.decode(text)
    except MalformedRecordError:
        raise
    except RecursionError:
        raise MalformedRecordError("nested too deeply") from None
    except ValueError:  # JSONDecodeError, and int() past the digit limit
        raise MalformedRecordError("not one JSON value") from None


def record_hash(record: Mapping[str, Any], prev: str, key: bytes | None = None) -> str:
    """The hash of a record (its ``hash`` member excluded) chained to ``prev``."""
    body = {name: value for name, value in record.items() if name != "hash"}
    payload = prev.encode("ascii") + b"\n" + encode(body)
    if key is not None:
        return hmac.new(key, payload, hashlib.sha256).hexdigest()
    return hashlib.sha256(payload).hexdigest()


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The outcome of verifying one chain.

    Attributes:
        ok: whether every record and the head check out.
        records: how many records were checked and found good.
        error: what is wrong, naming the first bad record (``path:line``), or ``None``.
        last_seq: the sequence number of the last good record.
        last_hash: its hash.
        head_seq: the sequence number the head vouches for (``None``: no head was
            checked). Records past it (a batch not yet committed, or a head copied from a
            chain that had just begun) could be cut from the end unseen.
    """

    ok: bool
    records: int
    error: str | None = None
    last_seq: int = 0
    last_hash: str = GENESIS
    head_seq: int | None = None


def _lines(paths: Iterable[Path]) -> Iterator[tuple[Path, int, bytes]]:
    for path in paths:
        with path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                yield path, number, line


def head_path(path: Path) -> Path:
    """Where the sink keeps the last (seq, hash) of the chain whose active file is ``path``."""
    return path.with_name(path.name + ".head")


def lock_path(path: Path) -> Path:
    """The lock file its one writer holds while it appends to the chain at ``path``."""
    return path.with_name(path.name + ".lock")


def writer_path(path: Path, number: int) -> Path:
    """The active file of writer ``number`` (1, 2, ...) of the trail configured as ``path``."""
    if number == 1:
        return path
    return path.with_name(f"{path.stem}.w{number}{path.suffix}")


def trail_files(path: Path) -> list[Path]:
    """The rotated segments of one chain (``<name>.000001`` ...) in order, then its active file."""
    prefix = path.name
    segments = sorted(
        candidate
        for candidate in path.parent.glob(glob_escape(prefix) + ".*")
        if _SEGMENT.fullmatch(candidate.name[len(prefix) :]) and candidate.is_file()
    )
    return [*segments, path] if path.exists() else segments


def glob_escape(name: str) -> str:
    """``name`` with the glob wildcards ``*?[`` taken literally."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def writer_chains(path: Path) -> list[Path]:
    """The active file of every writer's chain of the trail configured as ``path``.

    Writer 1's file is listed even when nothing of it exists (an empty trail); every other
    writer's when any file of its chain (active file, segment or head) exists.
    """
    pattern = re.compile(
        re.escape(path.stem)
        + r"\.w([1-9][0-9]*)"
        + re.escape(path.suffix)
        + r"(?:\.head|\.[0-9]{6,})?"
    )
    numbers = {
        int(match.group(1))
        for candidate in path.parent.glob(glob_escape(path.stem) + ".w*")
        if (match := pattern.fullmatch(candidate.name)) is not None
    }
    return [path, *(writer_path(path, n) for n in sorted(numbers) if n > 1)]


def folder_chains(folder: Path) -> list[Path]:
    """The active file of every chain whose files are in ``folder`` (hidden files skipped)."""
    chains: set[Path] = set()
    for candidate in folder.iterdir():
        name = candidate.name
        if name.startswith(".") or name.endswith((".lock", ".tmp")) or not candidate.is_file():
            continue
        if name.endswith(".head"):
            name = name[: -len(".head")]
        elif (segment := _SEGMENT_NAME.fullmatch(name)) is not None:
            name = segment.group(1)
        chains.add(folder / name)
    return sorted(chains)


def _field_problem(record: dict[str, Any]) -> str | None:
    seq = record.get("seq")
    if type(seq) is not int:  # bool is an int to Python, never to the chain
        return "malformed record (seq is not an integer)"
    prev, digest = record.get("prev"), record.get("hash")
    if not isinstance(prev, str) or _DIGEST.fullmatch(prev) is None:
        return "malformed record (prev is not a hash)"
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        return "malformed record (hash is not a hash)"
    return None


def _check(  # noqa: PLR0911 - one early return per way a record can be bad
    line: bytes, expected_seq: int, prev: str, key: bytes | None
) -> tuple[str | None, str]:
    # Returns (problem, hash of the record); problem is None for a good record. The
    # problem never quotes the record: it may hold anything.
    if not line.endswith(b"\n"):
        return "truncated record", prev
    try:
        record = decode(line[:-1])
    except MalformedRecordError as exc:
        return f"malformed record ({exc})", prev
    if not isinstance(record, dict):
        return "malformed record (not a JSON object)", prev
    problem = _field_problem(record)
    if problem is not None:
        return problem, prev
    seq = record["seq"]
    if seq != expected_seq:
        shown = str(seq) if len(str(abs(seq))) <= _MAX_SEQ_DIGITS else "out of range"
        return (
            f"sequence {shown}, expected {expected_seq} (a record was deleted, inserted or moved)",
            prev,
        )
    if record["prev"] != prev:
        return "chain broken (prev does not match)", prev
    try:
        canonical = encode(record) + b"\n"
        expected = record_hash(record, prev, key)
    except (ValueError, RecursionError):  # a lone surrogate, nesting past the encoder
        return "malformed record (not writable JSON)", prev
    if canonical != line:
        # Same values, other bytes (spacing, member order, number spelling): not as written.
        return "record was modified (not in the form the sink writes)", prev
    if not hmac.compare_digest(record["hash"], expected):
        return "record was modified (hash mismatch)", prev
    return None, expected


#: The head file holds two fixed-size slots, at offsets 0 and :data:`HEAD_SLOT_STRIDE`
#: (separate disk sectors and pages). After every commit the sink rewrites the *older* slot
#: in place (``pwrite``), so a write torn by a crash damages only that one slot and the other
#: still names an earlier end of the chain. Each slot is
#: ``gateway-audit-head 3 <seq, 20 digits> <chain> <hash> <tag>\n``: ``chain`` is the hash
#: of the chain's first record (:data:`GENESIS` while it has none), the chain's identity;
#: ``hash`` is record ``seq``'s. The tag is a keyed BLAKE2b MAC of what precedes it, under a
#: key derived from the chain's (unkeyed BLAKE2b without one), so a torn or edited slot never
#: reads as a plausible head, without the key nobody can write one, and a slot names the one
#: chain it was written for. The head is the newest intact slot.
HEAD_SLOT_SIZE: Final = 237
HEAD_SLOT_STRIDE: Final = 4096
HEAD_FILE_SIZE: Final = HEAD_SLOT_STRIDE + HEAD_SLOT_SIZE
_HEAD_MAGIC: Final = b"gateway-audit-head 3 "
_HEAD_SLOT: Final = re.compile(
    rb"gateway-audit-head 3 ([0-9]{20}) ([0-9a-f]{64}) ([0-9a-f]{64}) ([0-9a-f]{64})\n"
)
# The two-slot head of the previous version, which does not name its chain; still read.
_V2_SLOT_SIZE: Final = 172
_V2_FILE_SIZE: Final = HEAD_SLOT_STRIDE + _V2_SLOT_SIZE
_V2_MAGIC: Final = b"gateway-audit-head 2 "
_V2_SLOT: Final = re.compile(rb"gateway-audit-head 2 ([0-9]{20}) ([0-9a-f]{64}) ([0-9a-f]{64})\n")
# The single-slot head of earlier versions (a CRC-32 instead of a tag); still read.
_V1_SIZE: Final = 116
_V1_MAGIC: Final = b"gateway-audit-head 1 "
_V1_SLOT: Final = re.compile(rb"gateway-audit-head 1 ([0-9]{20}) ([0-9a-f]{64}) ([0-9a-f]{8})\n")
# A slot's tag: 64 hex digits and the newline.
_TAG_TAIL: Final = 65

#: The forms of a head file, oldest first: ``[seq, hash]``, one slot, two slots, two slots
#: naming the chain (:data:`HEAD_SLOT_SIZE`).
HEAD_JSON: Final = 0
HEAD_V1: Final = 1
HEAD_V2: Final = 2
HEAD_V3: Final = 3


@dataclass(frozen=True, slots=True)
class Head:
    """What a head file says: its chain holds at least records 1 to ``seq``.

    Attributes:
        seq: the number of the last record the head names (0: none yet).
        hash: that record's hash (:data:`GENESIS` for none).
        chain: the hash of the chain's first record (:data:`GENESIS` while it has none),
            or ``None`` for a head of an earlier form, which does not name its chain.
        form: which form the head file has (:data:`HEAD_V3` is what the sink writes).
    """

    seq: int
    hash: str
    chain: str | None
    form: int = HEAD_V3


@functools.lru_cache(maxsize=16)
def _head_key(key: bytes) -> bytes:
    # The head's own key, derived from the chain's (a slot tag is never a record hash).
    return hashlib.sha256(b"gateway-audit-head\0" + key).digest()


def _tag(body: bytes, key: bytes | None) -> bytes:
    # Keyed BLAKE2b: a MAC in one pass (the head is rewritten after every commit, and an
    # HMAC costs several times as much).
    if key is not None:
        mac = hashlib.blake2b(body, key=_head_key(key), digest_size=32)
    else:
        mac = hashlib.blake2b(body, digest_size=32)
    return mac.hexdigest().encode("ascii")


def encode_head(seq: int, digest: str, key: bytes | None = None, chain: str = GENESIS) -> bytes:
    """The head slot recording that a chain ends at record ``seq`` whose hash is ``digest``.

    ``chain`` is the hash of the chain's first record (:data:`GENESIS` while it has none):
    the slot is tagged with it, so it never reads as the head of another chain.
    """
    body = _HEAD_MAGIC + b"%020d %s %s " % (seq, chain.encode("ascii"), digest.encode("ascii"))
    slot = body + _tag(body, key) + b"\n"
    if len(slot) != HEAD_SLOT_SIZE:
        raise ValueError("head out of range")
    return slot


def decode_head_slots(raw: bytes, key: bytes | None = None) -> tuple[Head | None, ...]:
    """Each slot of a two-slot head file's bytes (``None``: not intact under ``key``).

    ``raw`` is of this version's form (:data:`HEAD_FILE_SIZE` bytes) or of the previous
    one's, whose slots do not name their chain (``Head.chain`` is ``None``).
    """
    current = len(raw) == HEAD_FILE_SIZE
    size, pattern = (HEAD_SLOT_SIZE, _HEAD_SLOT) if current else (_V2_SLOT_SIZE, _V2_SLOT)
    found: list[Head | None] = []
    for offset in (0, HEAD_SLOT_STRIDE):
        data = raw[offset : offset + size]
        slot = pattern.fullmatch(data)
        if slot is None or not hmac.compare_digest(
            data[-_TAG_TAIL:-1], _tag(data[:-_TAG_TAIL], key)
        ):
            found.append(None)
        elif current:
            found.append(Head(int(slot[1]), slot[3].decode("ascii"), slot[2].decode("ascii")))
        else:
            found.append(Head(int(slot[1]), slot[2].decode("ascii"), None, HEAD_V2))
    return tuple(found)


def head_slots(raw: bytes, key: bytes | None = None) -> tuple[tuple[int, str] | None, ...]:
    """The ``(seq, hash)`` of each slot of a two-slot head file's bytes (``None``: not intact)."""
    return tuple(
        None if slot is None else (slot.seq, slot.hash) for slot in decode_head_slots(raw, key)
    )


def _newest(slots: Iterable[Head | None]) -> Head:
    intact = [slot for slot in slots if slot is not None]
    if not intact:
        raise MalformedRecordError("no intact head slot (both torn or damaged)")
    return max(intact, key=lambda slot: (slot.seq, slot.hash))


def load_head(head: Path, key: bytes | None = None) -> Head:
    """What a head file says: its newest intact slot (or a head of an earlier form).

    ``key`` is the chain's: a slot is intact only if its tag verifies under that key. The
    two-slot, single-slot and ``[seq, hash]`` heads of earlier versions are read as they
    were written; they do not name their chain.

    Raises:
        MalformedRecordError: no slot is intact (a torn write damages only one; both
            damaged is tampering), or the file is no head at all.
        OSError: the head cannot be read.
    """
    raw = head.read_bytes()
    if len(raw) in (HEAD_FILE_SIZE, _V2_FILE_SIZE):
        return _newest(decode_head_slots(raw, key))
    if raw.startswith((_HEAD_MAGIC, _V2_MAGIC, _V1_MAGIC)):
        v1 = _V1_SLOT.fullmatch(raw)
        if v1 is None or int(v1[3], 16) != zlib.crc32(raw[: -len(v1[3]) - 1]):
            raise MalformedRecordError("torn or damaged head slot")
        return Head(int(v1[1]), v1[2].decode("ascii"), None, HEAD_V1)
    if len(raw) > 200:  # [19 digits, "64 hex"] with room to spare
        raise MalformedRecordError("expected [seq, hash]")
    value = decode(raw)
    if not (
        isinstance(value, list)
        and len(value) == 2
        and type(value[0]) is int
        and value[0] >= 0
        and isinstance(value[1], str)
        and _DIGEST.fullmatch(value[1]) is not None
    ):
        raise MalformedRecordError("expected [seq, hash]")
    return Head(value[0], value[1], None, HEAD_JSON)


def read_head(head: Path, key: bytes | None = None) -> tuple[int, str]:
    """The ``seq`` and hash a head file holds: its newest intact slot (or an older head).

    As :func:`load_head`, without the chain it names.

    Raises:
        MalformedRecordError: no slot is intact, or the file is no head at all.
        OSError: the head cannot be read.
    """
    found = load_head(head, key)
    return found.seq, found.hash


def first_hash(chain: Path) -> str | None:
    """The hash of the first record of the chain whose active file is ``chain``.

    :data:`GENESIS` when the chain has no record; ``None`` when its first line is not a
    record 1 (the verifier reports that line). Reads one line.

    Raises:
        OSError: a file cannot be read.
    """
    for path in trail_files(chain):
        with path.open("rb") as handle:
            line = handle.readline()
        if not line:
            continue
        if not line.endswith(b"\n"):
            return None
        try:
            record = decode(line[:-1])
        except MalformedRecordError:
            return None
        if not isinstance(record, dict) or _field_problem(record) is not None:
            return None
        return str(record["hash"]) if record["seq"] == 1 else None
    return GENESIS


@dataclass(slots=True)
class _Seen:
    # What the verifier keeps of a chain to compare with its head: record 1 and record
    # ``wanted`` (the head's), their hashes and where they are.
    wanted: int
    first: str = GENESIS
    first_at: tuple[Path, int] | None = None
    held: str = GENESIS
    held_at: tuple[Path, int] | None = None


def _check_head(  # noqa: PLR0911 - one early return per way a head can disagree
    head: Path,
    named: Head,
    count: int,
    seen: _Seen,
    *,
    last_line: tuple[Path, int] | None,
    key: bytes | None,
) -> str | None:
    if key is not None and named.form < HEAD_V2:
        # The earlier head forms carry no tag: anyone could write one naming an earlier
        # end, so under a key they prove nothing. A writer of this version rewrites the
        # head in the keyed form when it opens the trail.
        return (
            f"{head}: head of an earlier, unkeyed form (it cannot show that nothing was cut "
            "from the end; opening the trail for writing rewrites it, or verify without "
            "the head)"
        )
    if named.seq == 0:
        if named.hash != GENESIS or named.chain not in (None, GENESIS):
            return f"{head}: the head names no record but not the genesis hash (not a head)"
        return None
    # The head trails the chain by at most one batch after a crash, so a chain that ends
    # before the head, another record at the head's seq or another first record than the
    # head's is tampering. Each message names where the first bad record is (or should be).
    if named.chain is not None and seen.first_at is not None and named.chain != seen.first:
        path, number = seen.first_at
        return (
            f"{path}:{number}: record 1 is not the first record of the chain the head {head} "
            "names (the head is another chain's, or the chain was replaced)"
        )
    if named.seq > count:
        path, number = last_line if last_line is not None else (head, 0)
        return (
            f"{path}:{number + 1}: record {count + 1} is missing: the trail ends at record "
            f"{count} but the head {head} says {named.seq} (records were truncated)"
        )
    if seen.held_at is not None and not hmac.compare_digest(named.hash, seen.held):
        path, number = seen.held_at
        cause = (
            "the last record was replaced"
            if named.seq == count
            else "a record was replaced, or the head is another chain's"
        )
        return f"{path}:{number}: record {named.seq} does not match the head {head} ({cause})"
    return None


def verify(
    paths: Iterable[Path], *, key: bytes | None = None, head: Path | None = None
) -> VerifyResult:
    """Verify one chain given as its files in order.

    With ``head``, the chain must hold the record the head names, with the head's hash, and
    (for a head of this version) begin with the first record the head names: a chain cut
    below its head, or given another chain's head, fails. Never raises for what the files
    hold: every malformed record or head is a failed result naming it.

    Args:
        paths: the files, oldest first.
        key: the HMAC key, when the chain was written with one.
        head: the head file to compare the chain with (truncation check).

    Raises:
        OSError: a file cannot be read.
    """
    files = list(paths)
    named: Head | None = None
    problem: str | None = None
    if head is not None and head.exists():
        try:
            named = load_head(head, key)
        except MalformedRecordError as exc:
            problem = f"{head}: unreadable head ({exc})"
    seen = _Seen(named.seq if named is not None else -1)
    prev = GENESIS
    count = 0
    # Where the last line read is: a missing record is named as the line after it.
    last_line: tuple[Path, int] | None = (files[0], 0) if files else None
    for path, number, line in _lines(files):
        last_line = (path, number)
        bad, digest = _check(line, count + 1, prev, key)
        if bad is not None:
            return VerifyResult(False, count, f"{path}:{number}: {bad}", count, prev)
        prev = digest
        count += 1
        if count == 1:
            seen.first, seen.first_at = digest, last_line
        if count == seen.wanted:
            seen.held, seen.held_at = digest, last_line
    if named is not None and head is not None:
        problem = _check_head(head, named, count, seen, last_line=last_line, key=key)
    if problem is not None:
        return VerifyResult(False, count, problem, count, prev)
    return VerifyResult(True, count, None, count, prev, None if named is None else named.seq)


def verify_chain(path: Path, *, key: bytes | None = None) -> VerifyResult:
    """Verify the chain whose active file is ``path``: its segments, the file, its head."""
    return verify(trail_files(path), key=key, head=head_path(path))


def _has_files(chain: Path) -> bool:
    return chain.exists() or head_path(chain).exists() or bool(trail_files(chain))


def trail_exists(path: Path) -> bool:
    """Whether any file of the trail configured as ``path`` (any writer's chain) exists."""
    return any(_has_files(chain) for chain in writer_chains(path))


_WRITER_NAME: Final = re.compile(r"(.+)\.w[1-9][0-9]*(\.[^.]*)?")


def trail_base(chain: Path) -> Path:
    """The trail ``chain`` is a writer's chain of: ``audit.jsonl`` for ``audit.w2.jsonl``."""
    match = _WRITER_NAME.fullmatch(chain.name)
    return chain.with_name(match.group(1) + (match.group(2) or "")) if match else chain


def _writers(path: Path, *, key: bytes | None, head: bool) -> list[tuple[Path, VerifyResult]]:
    chains = writer_chains(path)
    results: list[tuple[Path, VerifyResult]] = []
    for number, chain in enumerate(chains, start=1):
        if _has_files(chain):
            results.append(
                (
                    chain,
                    verify(trail_files(chain), key=key, head=head_path(chain) if head else None),
                )
            )
        elif number < len(chains) or chain != writer_path(path, number):
            # Writer n+1 only ever starts while writer n holds its chain, whose file it made
            # at once: a missing chain below the last was deleted.
            results.append(
                (
                    chain,
                    VerifyResult(False, 0, f"{chain}: this writer's chain is missing (deleted)"),
                )
            )
    return results


def verify_trail(
    path: Path, *, key: bytes | None = None, head: bool = True
) -> list[tuple[Path, VerifyResult]]:
    """Verify every chain of a trail: each writer's of ``path``, or every one in a folder.

    For a trail configured as ``audit.jsonl``: its chain, ``audit.w2.jsonl``'s and so on,
    each with its rotated segments and its head (unless ``head`` is false). A writer's chain
    missing below the last one's fails. Never raises for what the files hold.

    Raises:
        OSError: a file cannot be read.
    """
    if not path.is_dir():
        return _writers(path, key=key, head=head)
    bases = {trail_base(chain) for chain in folder_chains(path)}
    return [result for base in sorted(bases) for result in _writers(base, key=key, head=head)]
