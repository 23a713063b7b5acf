"""Approval requests and where they are kept.

An :class:`Approval` is bound to one exact call: the tool, the digest of its canonical
arguments, the digest of the caller's context and the policy revision that asked for it.
It is pending until an approver decides, it expires, and an approved one is used at most
once. :class:`ApprovalStore` is the storage protocol (one process: :class:`FileApprovalStore`,
durable; several replicas: a shared store with the same atomic ``update``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Final, Protocol, runtime_checkable

from gateway._errors import GatewayError

PENDING: Final = "pending"
APPROVED: Final = "approved"
REJECTED: Final = "rejected"
USED: Final = "used"
VOID: Final = "void"
STATUSES: Final = frozenset({PENDING, APPROVED, REJECTED, USED, VOID})
#: The tenant of a stored approval that names none (kept before tenants were): no approver's.
UNKNOWN_TENANT: Final = ""
#: How long a finished (used, rejected, void or expired) approval stays listed.
KEEP_FINISHED_S: Final = 86400.0
_FORMAT: Final = 1


class ApprovalError(GatewayError):
    """An approval step that cannot be taken; ``code`` says why (never quoting a value)."""

    code: ClassVar[str] = "approval_error"
    prefix: ClassVar[str] = "approval"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{self.prefix}: {message}")
        self.code = code  # type: ignore[misc]  # instance refinement of the class code


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalKey:
    """What an approval is bound to: the tool, the arguments and the caller."""

    tool: str
    arguments_digest: str
    caller_digest: str


@dataclasses.dataclass(frozen=True, slots=True)
class Approval:
    """One approval request and what became of it.

    Attributes:
        id: the approval's id (random, unguessable).
        key: the exact call it is bound to.
        revision: the policy revision of the decision that asked for it.
        role: the role an approver must hold.
        subject: who asked (the caller's ``subject``), for the approver to see.
        tenant: the tenant of the caller who asked (``None``: a caller with no tenant); only
            an approver of the same tenant sees or decides it. A stored record from before
            tenants were kept reads as :data:`UNKNOWN_TENANT`, which no approver matches.
        message: the policy's public text about why approval is needed.
        created_at: when it was asked for (seconds since the epoch).
        expires_at: after this, it can be neither decided nor used.
        status: ``pending``, ``approved``, ``rejected``, ``used`` or ``void``.
        decided_by: the approver's subject, once decided.
        decided_roles: the approver's roles, once decided.
        decided_at: when it was decided.
        used_at: when the approved call ran.
    """

    id: str
    key: ApprovalKey
    revision: str | None
    role: str
    subject: str | None
    message: str | None
    created_at: float
    expires_at: float
    status: str = PENDING
    decided_by: str | None = None
    decided_roles: tuple[str, ...] = ()
    decided_at: float | None = None
    used_at: float | None = None
    tenant: str | None = None

    def expired(self, now: float) -> bool:
        """Whether it is past its expiry."""
        return now >= self.expires_at

    def state(self, now: float) -> str:
        """The status as a caller sees it: ``expired`` once a live approval has expired."""
        if self.status in (PENDING, APPROVED) and self.expired(now):
            return "expired"
        return self.status

    def to_json(self) -> dict[str, Any]:
        """The stored form (plain JSON)."""
        value = dataclasses.asdict(self)
        value["decided_roles"] = list(self.decided_roles)
        return value

    @classmethod
    def from_json(cls, value: Any) -> Approval:
        """Read the stored form back.

        Raises:
            ApprovalError: not an approval record (code ``approval_store_corrupt``).
        """
        try:
            key = ApprovalKey(**value["key"])
            fields = {k: v for k, v in value.items() if k != "key"}
            fields["decided_roles"] = tuple(fields.get("decided_roles", ()))
            fields.setdefault("tenant", UNKNOWN_TENANT)
            approval = cls(key=key, **fields)
        except (KeyError, TypeError, AttributeError):
            raise ApprovalError(
                "approval_store_corrupt", "an approval record is malformed"
            ) from None
        if not _well_typed(approval):
            raise ApprovalError("approval_store_corrupt", "an approval record is malformed")
        return approval

    def public(self, now: float) -> dict[str, Any]:
        """What the HTTP API and the CLI show: no argument values, only their digest."""
        return {
            "id": self.id,
            "tool": self.key.tool,
            "arguments_digest": self.key.arguments_digest,
            "subject": self.subject,
            "tenant": self.tenant,
            "role": self.role,
            "message": self.message,
            "revision": self.revision,
            "status": self.state(now),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at,
            "used_at": self.used_at,
        }


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: object, *, optional: bool = False) -> bool:
    return isinstance(value, str) or (optional and value is None)


def _well_typed(approval: Approval) -> bool:
    key = approval.key
    return (
        isinstance(approval.status, str)
        and approval.status in STATUSES
        and all(_text(v) for v in (approval.id, key.tool, key.arguments_digest, approval.role))
        and _text(key.caller_digest)
        and all(_text(v, optional=True) for v in (approval.revision, approval.subject))
        and _text(approval.tenant, optional=True)
        and all(_text(v, optional=True) for v in (approval.message, approval.decided_by))
        and _number(approval.created_at)
        and _number(approval.expires_at)
        and all(v is None or _number(v) for v in (approval.decided_at, approval.used_at))
        and all(_text(role) for role in approval.decided_roles)
    )


Change = Callable[[Approval], Approval]


@runtime_checkable
class ApprovalStore(Protocol):
    """Where approvals are kept. Every method is atomic with respect to every other.

    ``update`` reads one approval, applies ``change`` (which may raise to refuse) and stores
    the result, as one step: two concurrent updates of one approval never both see the old
    state. ``claim`` is the single-use step: it finds the approved, unexpired approval for
    ``key`` and marks it used, in one step.
    """

    def add(self, approval: Approval) -> None:
        """Store a new approval."""
        ...

    def get(self, approval_id: str) -> Approval | None:
        """The approval with this id, if any."""
        ...

    def all(self) -> list[Approval]:
        """Every approval kept, oldest first."""
        ...

    def update(self, approval_id: str, change: Change) -> Approval:
        """Apply ``change`` atomically; raises :class:`ApprovalError` (``approval_not_found``)."""
        ...

    def claim(self, key: ApprovalKey, now: float) -> Approval | None:
        """Mark the approved, unexpired approval for ``key`` used and return it (or ``None``)."""
        ...

    def find_pending(self, key: ApprovalKey, now: float) -> Approval | None:
        """The pending, unexpired approval for ``key``, if any."""
        ...


def _claimable(approval: Approval, key: ApprovalKey, now: float) -> bool:
    return approval.key == key and approval.status == APPROVED and not approval.expired(now)


def _used(approval: Approval, now: float) -> Approval:
    return dataclasses.replace(approval, status=USED, used_at=now)


class MemoryApprovalStore:
    """Approvals in this process's memory (lost on restart; for tests and embedding)."""

    def __init__(self) -> None:
        self._items: dict[str, Approval] = {}
        self._lock = threading.Lock()

    def add(self, approval: Approval) -> None:
        """Store a new approval."""
        with self._lock:
            self._items[approval.id] = approval

    def get(self, approval_id: str) -> Approval | None:
        """The approval with this id, if any."""
        with self._lock:
            return self._items.get(approval_id)

    def all(self) -> list[Approval]:
        """Every approval kept, oldest first."""
        with self._lock:
            return sorted(self._items.values(), key=lambda a: a.created_at)

    def update(self, approval_id: str, change: Change) -> Approval:
        """Apply ``change`` atomically."""
        with self._lock:
            current = self._items.get(approval_id)
            if current is None:
                raise ApprovalError("approval_not_found", "no such approval")
            new = change(current)
            self._items[approval_id] = new
            return new

    def claim(self, key: ApprovalKey, now: float) -> Approval | None:
        """Mark the approved approval for ``key`` used and return it."""
        with self._lock:
            for approval in self._items.values():
                if _claimable(approval, key, now):
                    used = _used(approval, now)
                    self._items[approval.id] = used
                    return used
        return None

    def find_pending(self, key: ApprovalKey, now: float) -> Approval | None:
        """The pending, unexpired approval for ``key``, if any."""
        with self._lock:
            for approval in self._items.values():
                if approval.key == key and approval.status == PENDING and not approval.expired(now):
                    return approval
        return None


class FileApprovalStore:
    """Approvals in one JSON file, durable across restarts and shared by processes on a host.

    Every operation takes an exclusive ``flock`` on ``<path>.lock``, reads the file, and
    (when it changes anything) writes a new file, fsyncs it and renames it into place, so a
    crash leaves the old or the new state, never a torn one, and ``gateway approvals`` run
    beside a server sees and makes the same changes. Finished approvals are dropped a day
    after they expire (``clock`` gives seconds since the epoch).

    Raises:
        ApprovalError: the file cannot be read as an approval file (code
            ``approval_store_corrupt``); the gateway then refuses approval steps rather than
            guessing.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Callable[[], float]) -> None:
        self._path = Path(path)
        self._lock_path = self._path.with_name(self._path.name + ".lock")
        self._clock = clock
        self._thread_lock = threading.Lock()
        # The last state read, by the file's identity: every write renames a new file into
        # place, so an unchanged (inode, size, mtime) is an unchanged state.
        self._seen: tuple[tuple[int, int, int], dict[str, Approval]] | None = None

    @property
    def path(self) -> Path:
        """The approval file."""
        return self._path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Approval]]:
        # Yields the approvals; a change to the dict is written back when the block ends.
        with self._thread_lock:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                items = self._read()
                before = dict(items)
                yield items
                if items != before:
                    self._write(items)
            finally:
                os.close(fd)

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _snapshot(self) -> dict[str, Approval]:
        # The state as last written, without the lock: for the look-ups every call makes,
        # which take the lock only when there is something to change.
        identity = self._identity()
        if identity is None:
            return {}
        seen = self._seen
        if seen is not None and seen[0] == identity:
            return seen[1]
        with self._thread_lock:
            return self._read()

    def _read(self) -> dict[str, Approval]:
        # Always from the file: what is decided under the lock never rests on the cache
        # (a cache that missed a change could only make a look-up miss an approval).
        identity = self._identity()
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            document = json.loads(raw)
        except ValueError:
            raise ApprovalError("approval_store_corrupt", "the approval file is not JSON") from None
        if not isinstance(document, dict) or document.get("format") != _FORMAT:
            raise ApprovalError("approval_store_corrupt", "the approval file has another format")
        records = document.get("approvals")
        if not isinstance(records, list):
            raise ApprovalError("approval_store_corrupt", "the approval file has no approvals")
        approvals = (Approval.from_json(record) for record in records)
        items = {approval.id: approval for approval in approvals}
        if identity is not None:
            self._seen = (identity, dict(items))
        return items

    def _write(self, items: dict[str, Approval]) -> None:
        now = self._clock()
        kept = [
            a
            for a in sorted(items.values(), key=lambda a: a.created_at)
            if a.expires_at + KEEP_FINISHED_S > now
        ]
        data = json.dumps(
            {"format": _FORMAT, "approvals": [a.to_json() for a in kept]}, sort_keys=True
        ).encode("utf-8")
        temporary = self._path.with_name(self._path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self._path)
        identity = self._identity()
        if identity is not None:
            self._seen = (identity, {a.id: a for a in kept})
        directory = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def add(self, approval: Approval) -> None:
        """Store a new approval (durably, before returning)."""
        with self._locked() as items:
            items[approval.id] = approval

    def get(self, approval_id: str) -> Approval | None:
        """The approval with this id, if any."""
        with self._locked() as items:
            return items.get(approval_id)

    def all(self) -> list[Approval]:
        """Every approval kept, oldest first."""
        with self._locked() as items:
            return sorted(items.values(), key=lambda a: a.created_at)

    def update(self, approval_id: str, change: Change) -> Approval:
        """Apply ``change`` atomically (durably, before returning)."""
        with self._locked() as items:
            current = items.get(approval_id)
            if current is None:
                raise ApprovalError("approval_not_found", "no such approval")
            new = change(current)
            items[approval_id] = new
            return new

    def claim(self, key: ApprovalKey, now: float) -> Approval | None:
        """Mark the approved approval for ``key`` used (durably) and return it."""
        if not any(_claimable(a, key, now) for a in self._snapshot().values()):
            return None  # the common case: no lock, no read unless the file changed
        with self._locked() as items:
            for approval in items.values():
                if _claimable(approval, key, now):
                    used = _used(approval, now)
                    items[approval.id] = used
                    return used
        return None

    def find_pending(self, key: ApprovalKey, now: float) -> Approval | None:
        """The pending, unexpired approval for ``key``, if any."""
        for approval in self._snapshot().values():
            if approval.key == key and approval.status == PENDING and not approval.expired(now):
                return approval
        return None
