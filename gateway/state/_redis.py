"""The Redis state backend: several replicas share sessions, counters and records.

Every read and every reservation is one Lua script, so it is atomic on the server and
costs one round trip; the window index comes from the server's clock (``TIME``), so all
replicas agree on window boundaries whatever their own clocks say. Every key expires:
counters one window after their window ends, sessions ``session_ttl_s`` after their last
call, records with their time to live. Scripts build counter keys from their arguments, so
the backend needs a single Redis (a primary, with replicas if wanted), not Redis Cluster.

Nothing is retried: a command that timed out may still have run on the server, and a
retried reservation could count one call twice. A failure of any kind (connection refused,
timeout, a reply of the wrong shape) is :class:`StateUnavailableError`, whose message never
carries the client's text. When that happens after a reservation was sent, the server may
have counted a call that does not run: quotas err towards refusing, never towards an
execution over the limit, and labels towards being attached.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Final

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.state._store import (
    RUNNING,
    HistoryEntry,
    Reservation,
    Reserved,
    SessionView,
    Snapshot,
    StateQuery,
    StateUnavailableError,
    check_record_ttl,
)

_LOG: Final = logging.getLogger("gateway.state")
#: How long one Redis command may take before the call fails closed (seconds).
DEFAULT_TIMEOUT_S: Final = 0.5
DEFAULT_PREFIX: Final = "gateway:"

# KEYS: meta, labels, tools, history, outcomes (five session keys; placeholders without one)
# ARGV: has_session, prefix, n_windows, windows..., n_counters, counter ids...
_READ: Final = """
local now = tonumber(redis.call('TIME')[1])
local out = {}
if ARGV[1] == '1' then
  local meta = redis.call('HMGET', KEYS[1], 'v', 'calls')
  out[1] = meta[1] or '0'
  out[2] = meta[2] or '0'
  out[3] = redis.call('SMEMBERS', KEYS[2])
  out[4] = redis.call('HGETALL', KEYS[3])
  out[5] = redis.call('LRANGE', KEYS[4], 0, -1)
  out[6] = redis.call('HGETALL', KEYS[5])
else
  out[1] = '0'; out[2] = '0'; out[3] = {}; out[4] = {}; out[5] = {}; out[6] = {}
end
local prefix = ARGV[2]
local nw = tonumber(ARGV[3])
local nc = tonumber(ARGV[4 + nw])
local counts = {}
for c = 1, nc do
  local id = ARGV[4 + nw + c]
  for w = 1, nw do
    local window = tonumber(ARGV[3 + w])
    local key = prefix .. 'c:' .. id .. ':' .. window .. ':' .. math.floor(now / window)
    counts[#counts + 1] = redis.call('GET', key) or '0'
  end
end
out[7] = counts
return out
"""

# KEYS: meta, labels, tools, history, outcomes
# ARGV: has_session, prefix, expected_version ('' = unchecked), tool, history_max, ttl_s,
#       n_windows, windows..., n_counters, counter ids..., n_limits, (counter, window, limit)...,
#       n_labels, labels..., entry_tail (JSON after the seq member)
_RESERVE: Final = """
local now = tonumber(redis.call('TIME')[1])
local has_session = ARGV[1] == '1'
local prefix = ARGV[2]
if has_session and ARGV[3] ~= '' then
  local v = redis.call('HGET', KEYS[1], 'v') or '0'
  if v ~= ARGV[3] then return {'conflict', 0, 0} end
end
local tool = ARGV[4]
local history_max = tonumber(ARGV[5])
local ttl = tonumber(ARGV[6])
local i = 7
local nw = tonumber(ARGV[i]); i = i + 1
local windows = {}
for w = 1, nw do windows[w] = tonumber(ARGV[i]); i = i + 1 end
local nc = tonumber(ARGV[i]); i = i + 1
local counters = {}
for c = 1, nc do counters[c] = ARGV[i]; i = i + 1 end
local nl = tonumber(ARGV[i]); i = i + 1
for l = 1, nl do
  local id = ARGV[i]; local window = tonumber(ARGV[i + 1]); local limit = tonumber(ARGV[i + 2])
  i = i + 3
  local key = prefix .. 'c:' .. id .. ':' .. window .. ':' .. math.floor(now / window)
  local n = tonumber(redis.call('GET', key) or '0')
  if n >= limit then return {'quota', 0, l} end
end
for c = 1, nc do
  for w = 1, nw do
    local window = windows[w]
    local index = math.floor(now / window)
    local key = prefix .. 'c:' .. counters[c] .. ':' .. window .. ':' .. index
    redis.call('INCR', key)
    redis.call('EXPIREAT', key, (index + 2) * window)
  end
end
if not has_session then return {'ok', 0, 0} end
local nlabels = tonumber(ARGV[i]); i = i + 1
local added = 0
for l = 1, nlabels do
  added = added + redis.call('SADD', KEYS[2], ARGV[i]); i = i + 1
end
if added > 0 then redis.call('HINCRBY', KEYS[1], 'v', 1) end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HINCRBY', KEYS[1], 'calls', 1)
redis.call('HINCRBY', KEYS[3], tool .. '\\n' .. 'allowed', 1)
redis.call('RPUSH', KEYS[4], '{"seq":' .. seq .. ',' .. ARGV[i])
redis.call('LTRIM', KEYS[4], -history_max, -1)
if seq > history_max then redis.call('HDEL', KEYS[5], tostring(seq - history_max)) end
for k = 1, 5 do redis.call('EXPIRE', KEYS[k], ttl) end
return {'ok', seq, 0}
"""

# KEYS: meta, tools, history, outcomes; ARGV: seq, tool, outcome, history_max (the session's
# TTL is the meta key's: an expired session gets no outcome)
_OUTCOME: Final = """
local ttl = redis.call('TTL', KEYS[1])
if ttl <= 0 then return 0 end
local seq = tonumber(ARGV[1])
local top = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
redis.call('HINCRBY', KEYS[2], ARGV[2] .. '\\n' .. ARGV[3], 1)
redis.call('EXPIRE', KEYS[2], ttl)
if seq > top - tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
  redis.call('EXPIRE', KEYS[4], ttl)
end
return 1
"""

_UNAVAILABLE: Final = "the session and quota state could not be reached"


class RedisStateStore:
    """Sessions, counters and records in one Redis server, shared by every replica.

    Args:
        url: ``redis://host:port/db`` (or ``rediss://``, ``unix://``).
        timeout_s: the longest one command may take (connecting included) before the call
            fails closed.
        prefix: the prefix of every key.
        max_connections: connections kept open at most.
    """

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        prefix: str = DEFAULT_PREFIX,
        max_connections: int = 64,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        self._url = url
        self._timeout = timeout_s
        self._prefix = prefix
        self._max_connections = max_connections
        # One client per event loop (a client's connections belong to the loop they were
        # opened on; tests and the CLI run several loops in one process).
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, aioredis.Redis]] = {}

    def _client(self) -> aioredis.Redis:
        loop = asyncio.get_running_loop()
        known = self._clients.get(id(loop))
        if known is not None and known[0] is loop:
            return known[1]
        client = aioredis.Redis.from_url(
            self._url,
            socket_timeout=self._timeout,
            socket_connect_timeout=self._timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            max_connections=self._max_connections,
            decode_responses=False,
        )
        self._clients[id(loop)] = (loop, client)
        return client

    async def _run(self, script: str, keys: list[str], args: list[str | int]) -> Any:
        client = self._client()
        try:
            # The script body is sent only when the server does not know it yet.
            return await asyncio.wait_for(
                client.eval(script, len(keys), *keys, *args), self._timeout * 2
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the backend fails closed
            _LOG.warning("state: redis command failed (%s)", type(exc).__name__)
            raise StateUnavailableError(_UNAVAILABLE) from None

    def _session_keys(self, session: str | None) -> list[str]:
        base = f"{self._prefix}s:{session if session is not None else '-'}"
        return [base, f"{base}:l", f"{base}:t", f"{base}:h", f"{base}:o"]

    async def read(self, query: StateQuery) -> Snapshot:
        """The session and the counts, read by one script."""
        windows = list(query.windows)
        scopes = list(query.counters)
        args: list[str | int] = [
            "1" if query.session is not None else "0",
            self._prefix,
            len(windows),
            *windows,
            len(scopes),
            *(query.counters[scope] for scope in scopes),
        ]
        reply = await self._run(_READ, self._session_keys(query.session), args)
        try:
            return _snapshot(reply, query, scopes, windows)
        except (TypeError, ValueError, IndexError, KeyError, UnicodeDecodeError):
            _LOG.warning("state: redis read answered in an unexpected form")
            raise StateUnavailableError(_UNAVAILABLE) from None

    async def reserve(self, reservation: Reservation) -> Reserved:
        """Compare, check and write one allowed call in one script."""
        scopes = list(reservation.counters)
        labels = sorted(set(reservation.labels))
        tail = json.dumps(
            {"labels": labels, "tool": reservation.tool}, separators=(",", ":"), sort_keys=True
        )[1:]
        args: list[str | int] = [
            "1" if reservation.session is not None else "0",
            self._prefix,
            "" if reservation.expected_version is None else str(reservation.expected_version),
            reservation.tool,
            reservation.history_max,
            reservation.session_ttl_s,
            len(reservation.windows),
            *reservation.windows,
            len(scopes),
            *(reservation.counters[scope] for scope in scopes),
            len(reservation.limits),
        ]
        for scope, window, limit in reservation.limits:
            args += [reservation.counters[scope], window, limit]
        args += [len(labels), *labels, tail]
        reply = await self._run(_RESERVE, self._session_keys(reservation.session), args)
        try:
            status = _text(reply[0])
            if status == "ok":
                return Reserved("ok", seq=int(reply[1]))
            if status == "conflict":
                return Reserved("conflict")
            if status == "quota":
                return Reserved("quota", limit=reservation.limits[int(reply[2]) - 1])
        except (TypeError, ValueError, IndexError, UnicodeDecodeError):
            pass
        _LOG.warning("state: redis reservation answered in an unexpected form")
        raise StateUnavailableError(_UNAVAILABLE)

    async def record_outcome(
        self, session: str, seq: int, tool: str, outcome: str, history_max: int = 1 << 30
    ) -> None:
        """Set the history entry's outcome and count it for the tool."""
        meta, _labels, tools, history, outcomes = self._session_keys(session)
        await self._run(
            _OUTCOME, [meta, tools, history, outcomes], [seq, tool, outcome, history_max]
        )

    # records

    def _record_key(self, namespace: str, key: str) -> str:
        return f"{self._prefix}r:{len(namespace)}:{namespace}:{key}"

    async def _command(self, *args: Any) -> Any:
        client = self._client()
        try:
            return await asyncio.wait_for(
                client.execute_command(*args),  # type: ignore[no-untyped-call]
                self._timeout * 2,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the backend fails closed
            _LOG.warning("state: redis command failed (%s)", type(exc).__name__)
            raise StateUnavailableError(_UNAVAILABLE) from None

    async def put_record(self, namespace: str, key: str, value: bytes, ttl_s: float) -> None:
        """``SET key value PX ttl``."""
        ms = check_record_ttl(ttl_s)
        await self._command("SET", self._record_key(namespace, key), bytes(value), "PX", ms)

    async def add_record(self, namespace: str, key: str, value: bytes, ttl_s: float) -> bool:
        """``SET key value PX ttl NX``."""
        ms = check_record_ttl(ttl_s)
        reply = await self._command(
            "SET", self._record_key(namespace, key), bytes(value), "PX", ms, "NX"
        )
        return reply is not None and reply is not False

    async def get_record(self, namespace: str, key: str) -> bytes | None:
        """``GET key``."""
        reply = await self._command("GET", self._record_key(namespace, key))
        return bytes(reply) if reply is not None else None

    async def take_record(self, namespace: str, key: str) -> bytes | None:
        """``GETDEL key`` (at most one caller gets the record)."""
        reply = await self._command("GETDEL", self._record_key(namespace, key))
        return bytes(reply) if reply is not None else None

    async def delete_record(self, namespace: str, key: str) -> bool:
        """``DEL key``."""
        reply = await self._command("DEL", self._record_key(namespace, key))
        return bool(reply)

    async def close(self) -> None:
        """Close the clients of every loop still running; forget the others."""
        clients, self._clients = self._clients, {}
        current = asyncio.get_running_loop()
        for loop, client in clients.values():
            if loop is current:
                try:
                    await client.aclose()
                except Exception:  # noqa: BLE001 - closing a broken connection is fine
                    _LOG.debug("state: closing a redis client failed")


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _pairs(flat: list[Any]) -> list[tuple[str, str]]:
    return [(_text(flat[i]), _text(flat[i + 1])) for i in range(0, len(flat), 2)]


def _snapshot(reply: Any, query: StateQuery, scopes: list[str], windows: list[int]) -> Snapshot:
    counts_flat = reply[6]
    counts: dict[str, dict[int, int]] = {}
    position = 0
    for scope in scopes:
        counts[scope] = {}
        for window in windows:
            counts[scope][window] = int(counts_flat[position])
            position += 1
    if query.session is None:
        return Snapshot(None, counts)
    tools: dict[str, dict[str, int]] = {}
    for field, number in _pairs(reply[3]):
        tool, _, outcome = field.rpartition("\n")
        tools.setdefault(tool, {})[outcome] = int(number)
    outcomes = dict(_pairs(reply[5]))
    history: list[HistoryEntry] = []
    for raw in reply[4]:
        entry = json.loads(raw)
        seq = int(entry["seq"])
        history.append(
            HistoryEntry(
                seq,
                str(entry["tool"]),
                tuple(str(label) for label in entry["labels"]),
                outcomes.get(str(seq), RUNNING),
            )
        )
    view = SessionView(
        version=int(reply[0]),
        calls=int(reply[1]),
        labels=tuple(sorted(_text(label) for label in reply[2])),
        tools=tools,
        history=tuple(history),
    )
    return Snapshot(view, counts)
