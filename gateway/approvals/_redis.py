"""Approvals in Redis: one store for every replica, on the Redis the session state uses.

Each approval is a JSON string under ``<prefix>approval:<id>``; ``<prefix>approvals`` is a
sorted set of the ids by creation time (for listing), and ``<prefix>approval-key:<digest>``
the ids of the approvals bound to one exact call (for claiming and finding them). Every
change is an optimistic transaction (``WATCH`` the approval, read it, apply the change,
``MULTI``/``EXEC``), so of two replicas that claim one approval at once exactly one gets it,
and a change never overwrites another it did not see. Keys expire a day after the approval
does. Redis down or too slow refuses the approval step (``approval_store_unavailable``),
never lets a call through.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import Any, Final

import redis

from gateway.approvals._store import (
    APPROVED,
    PENDING,
    USED,
    Approval,
    ApprovalError,
    ApprovalKey,
    Change,
)

_KEEP_S: Final = 86_400
_ATTEMPTS: Final = 16


def _unavailable() -> ApprovalError:
    return ApprovalError("approval_store_unavailable", "the approval store cannot be reached")


def _key_digest(key: ApprovalKey) -> str:
    text = "\0".join((key.tool, key.arguments_digest, key.caller_digest))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class RedisApprovalStore:
    """:class:`~gateway.approvals.ApprovalStore` on Redis, shared by every replica.

    Args:
        client: a ``redis.Redis`` client (its timeouts bound every step).
        prefix: the prefix of every key (the session state's ``key_prefix``).
        clock: seconds since the epoch (for the keys' expiry).
    """

    def __init__(self, client: redis.Redis, *, prefix: str, clock: Callable[[], float]) -> None:
        self._redis = client
        self._prefix = prefix
        self._clock = clock

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str, timeout_s: float, clock: Callable[[], float]
    ) -> RedisApprovalStore:
        """A store on the Redis at ``url``, every command bounded by ``timeout_s``."""
        client = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        return cls(client, prefix=prefix, clock=clock)

    def _item(self, approval_id: str) -> str:
        return f"{self._prefix}approval:{approval_id}"

    def _index(self, key: ApprovalKey) -> str:
        return f"{self._prefix}approval-key:{_key_digest(key)}"

    def _ttl(self, approval: Approval) -> int:
        return max(1, int(approval.expires_at - self._clock()) + _KEEP_S)

    @staticmethod
    def _decode(raw: Any) -> Approval:
        try:
            value = json.loads(raw)
        except (TypeError, ValueError):
            raise ApprovalError(
                "approval_store_corrupt", "an approval record is malformed"
            ) from None
        return Approval.from_json(value)

    def add(self, approval: Approval) -> None:
        """Store a new approval."""
        ttl = self._ttl(approval)
        try:
            with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(self._item(approval.id), json.dumps(approval.to_json()), ex=ttl)
                pipe.zadd(f"{self._prefix}approvals", {approval.id: approval.created_at})
                pipe.sadd(self._index(approval.key), approval.id)
                pipe.expire(self._index(approval.key), ttl)
                pipe.execute()
        except redis.RedisError:
            raise _unavailable() from None

    def get(self, approval_id: str) -> Approval | None:
        """The approval with this id, if any."""
        try:
            raw = self._redis.get(self._item(approval_id))
        except redis.RedisError:
            raise _unavailable() from None
        return None if raw is None else self._decode(raw)

    def all(self) -> list[Approval]:
        """Every approval kept, oldest first (ids whose record expired are dropped)."""
        try:
            ids = [_text(i) for i in self._redis.zrange(f"{self._prefix}approvals", 0, -1)]
            raws = self._redis.mget([self._item(i) for i in ids]) if ids else []
            gone = [i for i, raw in zip(ids, raws, strict=True) if raw is None]
            if gone:
                self._redis.zrem(f"{self._prefix}approvals", *gone)
        except redis.RedisError:
            raise _unavailable() from None
        found = [self._decode(raw) for raw in raws if raw is not None]
        return sorted(found, key=lambda a: a.created_at)

    def update(self, approval_id: str, change: Change) -> Approval:
        """Apply ``change`` atomically (raises ``approval_not_found`` when there is none)."""
        item = self._item(approval_id)
        try:
            with self._redis.pipeline(transaction=True) as pipe:
                for _ in range(_ATTEMPTS):
                    try:
                        pipe.watch(item)  # type: ignore[no-untyped-call]
                        raw = pipe.get(item)
                        if raw is None:
                            raise ApprovalError("approval_not_found", "no such approval")
                        new = change(self._decode(raw))
                        pipe.multi()
                        pipe.set(item, json.dumps(new.to_json()), ex=self._ttl(new))
                        pipe.execute()
                    except redis.WatchError:
                        continue
                    else:
                        return new
        except redis.RedisError:
            raise _unavailable() from None
        raise _unavailable()

    def _ids_for(self, key: ApprovalKey) -> list[str]:
        return sorted(_text(i) for i in self._redis.smembers(self._index(key)))

    def claim(self, key: ApprovalKey, now: float) -> Approval | None:
        """Mark the approved, unexpired approval for ``key`` used and return it."""

        def used(approval: Approval) -> Approval:
            if approval.key != key or approval.status != APPROVED or approval.expired(now):
                raise _NotClaimableError
            return _replace_used(approval, now)

        try:
            ids = self._ids_for(key)
        except redis.RedisError:
            raise _unavailable() from None
        for approval_id in ids:
            try:
                return self.update(approval_id, used)
            except _NotClaimableError:
                continue
            except ApprovalError as exc:
                if exc.code == "approval_not_found":
                    continue
                raise
        return None

    def find_pending(self, key: ApprovalKey, now: float) -> Approval | None:
        """The pending, unexpired approval for ``key``, if any."""
        try:
            ids = self._ids_for(key)
            raws = self._redis.mget([self._item(i) for i in ids]) if ids else []
        except redis.RedisError:
            raise _unavailable() from None
        for raw in raws:
            if raw is None:
                continue
            approval = self._decode(raw)
            if approval.key == key and approval.status == PENDING and not approval.expired(now):
                return approval
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _NotClaimableError(Exception):
    pass


def _replace_used(approval: Approval, now: float) -> Approval:
    return dataclasses.replace(approval, status=USED, used_at=now)
