"""Redis state: shared by several sidecar replicas.

Layout (prefix `sidecar:`, `<s>` = first 32 hex digits of sha256(session), so a session id
can never forge another session's key):

    call:<s>:<call id>        hash, one delivered call; PEXPIREAT delivered_at + ttl
    replay:<s>:<replay key>   string, call id of the key's first delivery; same expiry
    lru:<s>                   zset call id -> use sequence (per-session LRU bound)
    lru                       zset "<s>/<call id>" -> use sequence (total LRU bound)
    exp:<s>, exp              the same members -> when the call expires (ms): over a bound,
                              expired calls leave first (they may be more recently used
                              than live ones, and would hold their places)
    counts:<s>                hash tool -> calls delivered (session_counts)
    seq                       the use sequence
    approval:<id>             hash body (JSON), status, expires
    approvals                 zset id -> retention deadline (listing)
    approvals:pending         zset id -> expires (expire_approvals)
    approval_for:<digest>     string, newest approval id for (session, tool, args hash)
    held:<k>                  string, what a provider holds under one key (JSON); PX ttl
    held                      zset <k> -> use sequence (total bound)

`<k>` = first 32 hex digits of sha256(key) for what providers hold (keys carry ids the agent
sends). Every multi-key step is one Lua script, so it is atomic across replicas. The scripts touch
keys they compute themselves (eviction), so this targets a single Redis (or Sentinel), not
Redis Cluster. Connection errors and timeouts (0.5 s) become StateUnavailable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import BusyLoadingError, ReadOnlyError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sidecar.model import canonical_json, sha256_hex
from sidecar.state.base import (
    Approval,
    ApprovalConflict,
    CallFacts,
    CallRecord,
    Decision,
    HeldState,
    Limits,
    StateUnavailable,
    approval_retention,
    check_decidable,
    decided,
    matches,
    one_session,
)

_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, BusyLoadingError, ReadOnlyError, OSError, TimeoutError)

# Shared Lua helpers; ARGV[1] is always the key prefix, ARGV[2] the session digest.
_PRELUDE = """
local P, S = ARGV[1], ARGV[2]
local function call_key(s, cid) return P .. 'call:' .. s .. ':' .. cid end
local function touch(s, cid)
  local seq = redis.call('INCR', P .. 'seq')
  redis.call('ZADD', P .. 'lru:' .. s, seq, cid)
  redis.call('ZADD', P .. 'lru', seq, s .. '/' .. cid)
end
local function forget(s, cid)
  local ck = call_key(s, cid)
  local rk = redis.call('HGET', ck, 'replay_key')
  if rk then
    local rkey = P .. 'replay:' .. s .. ':' .. rk
    if redis.call('GET', rkey) == cid then redis.call('DEL', rkey) end
  end
  redis.call('DEL', ck)
  redis.call('ZREM', P .. 'lru:' .. s, cid)
  redis.call('ZREM', P .. 'lru', s .. '/' .. cid)
  redis.call('ZREM', P .. 'exp:' .. s, cid)
  redis.call('ZREM', P .. 'exp', s .. '/' .. cid)
end
local function forget_member(m) forget(string.sub(m, 1, 32), string.sub(m, 34)) end
local function now_ms()
  local t = redis.call('TIME')  -- the clock the calls' PEXPIREAT is read by
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function extend(key, ms)
  local cur = redis.call('PEXPIRETIME', key)
  if cur == -1 or (cur >= 0 and cur < ms) then redis.call('PEXPIREAT', key, ms) end
end
local function first_of(rk)
  local cid = redis.call('GET', P .. 'replay:' .. S .. ':' .. rk)
  if cid and redis.call('EXISTS', call_key(S, cid)) == 1 then return cid end
  return nil
end
"""

# ARGV: P, S, max/session, max total, then per call (_RECORD_ITEMS each): call id, replay key,
# tool, expires ms, and its hash's 7 field/value pairs. The calls of one session, recorded in
# order as one atomic step (`record_calls`; `record_call` is one of them).
_RECORD_ITEMS = 18
_RECORD = (
    _PRELUDE
    + f"""
local max_s, max_t = tonumber(ARGV[3]), tonumber(ARGV[4])
for at = 5, #ARGV, {_RECORD_ITEMS} do
  local cid, rk, tool, exp = ARGV[at], ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3])
  local ck = call_key(S, cid)
  if redis.call('EXISTS', ck) == 1 then forget(S, cid) end
  local first = first_of(rk)
  if first then
    redis.call('HINCRBY', call_key(S, first), 'count', 1)
    touch(S, first)
  else
    redis.call('SET', P .. 'replay:' .. S .. ':' .. rk, cid, 'PXAT', exp)
  end
  redis.call('HSET', ck, unpack(ARGV, at + 4, at + {_RECORD_ITEMS} - 1))
  redis.call('PEXPIREAT', ck, exp)
  touch(S, cid)
  redis.call('ZADD', P .. 'exp:' .. S, exp, cid)
  redis.call('ZADD', P .. 'exp', exp, S .. '/' .. cid)
  extend(P .. 'lru:' .. S, exp)
  extend(P .. 'exp:' .. S, exp)
  redis.call('HINCRBY', P .. 'counts:' .. S, tool, 1)
  extend(P .. 'counts:' .. S, exp)
  -- Over a bound, expired calls leave first: at most as many as the bound is over, so one
  -- write never sweeps a backlog (after a quiet night, say) in one go.
  local over = redis.call('ZCARD', P .. 'lru:' .. S) - max_s
  if over > 0 then
    for _, c in ipairs(redis.call('ZRANGEBYSCORE', P .. 'exp:' .. S, '-inf', now_ms(), 'LIMIT', 0, over)) do
      forget(S, c)
    end
  end
  while redis.call('ZCARD', P .. 'lru:' .. S) > max_s do
    forget(S, redis.call('ZRANGE', P .. 'lru:' .. S, 0, 0)[1])
  end
  over = redis.call('ZCARD', P .. 'lru') - max_t
  if over > 0 then
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', P .. 'exp', '-inf', now_ms(), 'LIMIT', 0, over)) do
      forget_member(m)
    end
  end
  while redis.call('ZCARD', P .. 'lru') > max_t do
    forget_member(redis.call('ZRANGE', P .. 'lru', 0, 0)[1])
  end
end
return 1
"""
)

# ARGV: P, S, replay key -> the first delivery's fields (flat), or nil
_FIND = (
    _PRELUDE
    + """
local cid = first_of(ARGV[3])
if not cid then return nil end
return redis.call('HGETALL', call_key(S, cid))
"""
)

# ARGV: P, S, replay key, call id -> {the replay key's first delivery, the call id's}: two
# HGETALL replies, empty when there is none (`look_up_call`: one round trip, not two)
_LOOK_UP = (
    _PRELUDE
    + """
local cid = first_of(ARGV[3])
local first = {}
if cid then first = redis.call('HGETALL', call_key(S, cid)) end
return {first, redis.call('HGETALL', call_key(S, ARGV[4]))}
"""
)

# ARGV: P, S, replay key -> new count, 0 if unknown
_NOTE = (
    _PRELUDE
    + """
local cid = first_of(ARGV[3])
if not cid then return 0 end
touch(S, cid)
return redis.call('HINCRBY', call_key(S, cid), 'count', 1)
"""
)

# ARGV: P, S, call id, field, value... -> 1 if stored, 0 if unknown or already answered
_RESULT = (
    _PRELUDE
    + """
local ck = call_key(S, ARGV[3])
if redis.call('EXISTS', ck) == 0 or redis.call('HEXISTS', ck, 'result_at') == 1 then
  return 0
end
redis.call('HSET', ck, unpack(ARGV, 4))
touch(S, ARGV[3])
return 1
"""
)

# KEYS: approval, pending index. ARGV: from, to, now, new body or '', 'live' | 'lapsed'.
# 'live' requires now < expires (decide, consume); 'lapsed' requires now >= expires (expire).
_CAS = """
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 'missing' end
if st ~= ARGV[1] then return st end
local lapsed = tonumber(ARGV[3]) >= tonumber(redis.call('HGET', KEYS[1], 'expires'))
if ARGV[5] == 'live' and lapsed then return 'expired' end
if ARGV[5] == 'lapsed' and not lapsed then return st end
redis.call('HSET', KEYS[1], 'status', ARGV[2])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'body', ARGV[4]) end
if ARGV[1] == 'pending' then redis.call('ZREM', KEYS[2], redis.call('HGET', KEYS[1], 'id')) end
return 'ok'
"""


# KEYS: record, index. ARGV: digest, body, ttl ms, max total, prefix. Writes one record and
# keeps the index within the bound (oldest written first).
_HELD = """
local seq = redis.call('INCR', ARGV[5] .. 'seq')
redis.call('SET', KEYS[1], ARGV[2], 'PX', tonumber(ARGV[3]))
redis.call('ZADD', KEYS[2], seq, ARGV[1])
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[4]) do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  redis.call('ZREM', KEYS[2], oldest)
  redis.call('DEL', ARGV[5] .. 'held:' .. oldest)
end
return 1
"""


def _ms(t: float) -> int:
    return int(t * 1000)


def _session_digest(session: str) -> str:
    return sha256_hex(session.encode())[:32]


def _pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _record(session: str, h: Mapping[str, str]) -> CallRecord:
    is_error = h.get("result_is_error")
    result_at = h.get("result_at")
    return CallRecord(
        session=session,
        call_id=h["call_id"],
        tool=h["tool"],
        args_hash=h["args_hash"],
        replay_key=h["replay_key"],
        delivered_at=float(h["delivered_at"]),
        result=h.get("result"),
        result_is_error=None if is_error is None else is_error == "1",
        result_at=None if result_at is None else float(result_at),
        result_truncated=h.get("result_truncated") == "1",
        count=int(h["count"]),
    )


def _approval(h: Mapping[str, str]) -> Approval | None:
    if "body" not in h:
        return None
    a = Approval.from_json(h["body"])
    a.status = h["status"]  # type: ignore[assignment]  # the hash field is authoritative
    return a


class RedisStore:
    """State in Redis (`redis.asyncio`), visible to every replica using the same server."""

    name = "redis"

    def __init__(
        self,
        url: str,
        limits: Limits | None = None,
        prefix: str = "sidecar:",
        timeout_s: float = 0.5,
    ) -> None:
        self.url = url
        self.limits = limits or Limits()
        self.prefix = prefix
        self._r: aioredis.Redis = aioredis.Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._record = self._r.register_script(_RECORD)
        self._find = self._r.register_script(_FIND)
        self._look_up = self._r.register_script(_LOOK_UP)
        self._note = self._r.register_script(_NOTE)
        self._result = self._r.register_script(_RESULT)
        self._cas_script = self._r.register_script(_CAS)
        self._held_script = self._r.register_script(_HELD)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except _UNAVAILABLE as exc:
            raise StateUnavailable(f"redis {self.url}: {exc}") from exc

    async def _do(self, aw: Awaitable[Any]) -> Any:
        """Await a redis-py call; its replies are typed loosely, so callers annotate them."""
        with self._guard():
            return await aw

    async def _hash(self, key: str) -> dict[str, str]:
        h: dict[str, str] = await self._do(self._r.hgetall(key))
        return h

    def _k(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # -- ledger ------------------------------------------------------------------------------

    def _live(self, session: str, h: Mapping[str, str]) -> CallRecord | None:
        """A call's hash as its record; None when there is none (an empty hash) or it expired."""
        if not h:
            return None
        rec = _record(session, h)
        return rec if self.limits.alive(rec) else None

    async def record_call(self, rec: CallRecord) -> None:
        await self.record_calls([rec])

    async def record_calls(self, records: Sequence[CallRecord]) -> None:
        if not records:
            return
        session = one_session(records)
        lim = self.limits
        args: list[str | int] = [self.prefix, _session_digest(session), lim.max_per_session, lim.max_total]
        for rec in records:
            args += [
                rec.call_id,
                rec.replay_key,
                rec.tool,
                _ms(lim.expires_at(rec)),
                "call_id",
                rec.call_id,
                "session",
                rec.session,
                "tool",
                rec.tool,
                "args_hash",
                rec.args_hash,
                "replay_key",
                rec.replay_key,
                "delivered_at",
                repr(rec.delivered_at),
                "count",
                "1",
            ]
        await self._do(self._record(args=args))

    async def find_replay(self, session: str, replay_key: str) -> CallRecord | None:
        args = [self.prefix, _session_digest(session), replay_key]
        flat: list[str] | None = await self._do(self._find(args=args))
        return self._live(session, _pairs(flat or []))

    async def note_replay(self, session: str, replay_key: str) -> int:
        return int(await self._do(self._note(args=[self.prefix, _session_digest(session), replay_key])))

    async def get_call(self, session: str, call_id: str) -> CallRecord | None:
        return self._live(session, await self._hash(self._k("call", _session_digest(session), call_id)))

    async def get_calls(self, session: str, call_ids: Sequence[str]) -> dict[str, CallRecord]:
        if not call_ids:
            return {}
        digest = _session_digest(session)
        with self._guard():
            pipe = self._r.pipeline(transaction=False)  # plain reads: one round trip, no script
            for call_id in call_ids:
                pipe.hgetall(self._k("call", digest, call_id))
            hashes: list[dict[str, str]] = await pipe.execute()
        found = (self._live(session, h) for h in hashes)
        return {rec.call_id: rec for rec in found if rec is not None}

    async def look_up_call(self, session: str, replay_key: str, call_id: str) -> CallFacts:
        args = [self.prefix, _session_digest(session), replay_key, call_id]
        first, same = await self._do(self._look_up(args=args))
        return CallFacts(self._live(session, _pairs(first)), self._live(session, _pairs(same)))

    async def record_result(self, session: str, call_id: str, result: str, is_error: bool, at: float) -> bool:
        text, truncated = self.limits.truncate(result)
        stored = await self._do(
            self._result(
                args=[
                    self.prefix,
                    _session_digest(session),
                    call_id,
                    "result",
                    text,
                    "result_is_error",
                    str(int(is_error)),
                    "result_at",
                    repr(at),
                    "result_truncated",
                    str(int(truncated)),
                ]
            )
        )
        return bool(stored)

    async def session_counts(self, session: str) -> tuple[int, dict[str, int]]:
        h = await self._hash(self._k("counts", _session_digest(session)))
        counts = {tool: int(n) for tool, n in h.items()}
        return sum(counts.values()), counts

    # -- approvals ---------------------------------------------------------------------------

    def _approval_for(self, session: str, tool: str, args_hash: str) -> str:
        return self._k("approval_for", sha256_hex(canonical_json([session, tool, args_hash])))

    async def _cas(
        self, approval_id: str, src: str, dst: str, now: float, body: bytes = b"", when: str = "live"
    ) -> str:
        keys = [self._k("approval", approval_id), self._k("approvals", "pending")]
        args: list[str | bytes] = [src, dst, repr(now), body, when]
        return str(await self._do(self._cas_script(keys=keys, args=args)))

    async def _load(self, approval_id: str) -> Approval | None:
        return _approval(await self._hash(self._k("approval", approval_id)))

    async def create_approval(self, a: Approval) -> None:
        retain = _ms(approval_retention(a, self.limits))
        key = self._k("approval", a.id)
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(key, mapping={"id": a.id, "body": a.to_json(), "status": a.status, "expires": repr(a.expires)})
        pipe.pexpireat(key, retain)
        pipe.zadd(self._k("approvals"), {a.id: retain})
        if a.status == "pending":
            pipe.zadd(self._k("approvals", "pending"), {a.id: a.expires})
        pipe.set(self._approval_for(a.session, a.tool, a.args_hash), a.id, pxat=retain)
        await self._do(pipe.execute())

    async def get_approval(self, approval_id: str) -> Approval | None:
        a = await self._load(approval_id)
        return a.effective(self.limits.clock()) if a else None

    async def list_approvals(
        self,
        status: str | None = "pending",
        group: str | None = None,
        tool: str | None = None,
        session: str | None = None,
    ) -> list[Approval]:
        index = self._k("approvals")
        now = self.limits.clock()
        with self._guard():
            await self._r.zremrangebyscore(index, "-inf", _ms(now))
            ids: list[str] = await self._do(self._r.zrange(index, 0, -1))
            pipe = self._r.pipeline(transaction=False)
            for approval_id in ids:
                pipe.hgetall(self._k("approval", approval_id))
            hashes: list[dict[str, str]] = await pipe.execute()
        found = [a.effective(now) for a in map(_approval, hashes) if a is not None]
        found = [a for a in found if matches(a, status, group, tool, session)]
        return sorted(found, key=lambda a: a.created)

    async def decide_approval(
        self, approval_id: str, status: Decision, decided_by: str, comment: str | None, now: float
    ) -> Approval:
        a = check_decidable(await self._load(approval_id), approval_id, now)
        d = decided(a, status, decided_by, comment, now)
        outcome = await self._cas(approval_id, "pending", status, now, d.to_json())
        if outcome == "missing":
            check_decidable(None, approval_id, now)
        if outcome != "ok":
            raise ApprovalConflict(outcome)
        return d

    async def find_approval(self, session: str, tool: str, args_hash: str) -> Approval | None:
        key = self._approval_for(session, tool, args_hash)
        approval_id: str | None = await self._do(self._r.get(key))
        return await self.get_approval(approval_id) if approval_id else None

    async def consume_approval(self, approval_id: str, now: float) -> bool:
        return await self._cas(approval_id, "approved", "consumed", now) == "ok"

    async def expire_approvals(self, now: float) -> list[Approval]:
        pending = self._k("approvals", "pending")
        ids: list[str] = await self._do(self._r.zrangebyscore(pending, "-inf", now))
        expired = []
        for approval_id in ids:
            outcome = await self._cas(approval_id, "pending", "expired", now, when="lapsed")
            if outcome == "ok" and (a := await self._load(approval_id)) is not None:
                expired.append(a)
            elif outcome == "missing":
                await self._do(self._r.zrem(pending, approval_id))
        return expired

    # -- what providers hold ------------------------------------------------------------------

    def _held_key(self, key: str) -> tuple[str, str]:
        digest = sha256_hex(key.encode())[:32]
        return digest, self._k("held", digest)

    async def remember_held(self, key: str, state: HeldState) -> None:
        digest, record = self._held_key(key)
        lim = self.limits
        args: list[str | bytes | int] = [digest, state.to_json(), _ms(lim.ttl_s), lim.max_total, self.prefix]
        await self._do(self._held_script(keys=[record, self._k("held")], args=args))

    async def held(self, key: str) -> HeldState | None:
        body: str | None = await self._do(self._r.get(self._held_key(key)[1]))
        return HeldState.from_json(body) if body else None

    async def forget_held(self, key: str) -> None:
        digest, record = self._held_key(key)
        pipe = self._r.pipeline(transaction=True)
        pipe.delete(record)
        pipe.zrem(self._k("held"), digest)
        await self._do(pipe.execute())

    async def healthy(self) -> bool:
        try:
            return bool(await self._do(self._r.ping()))
        except StateUnavailable:
            return False

    async def close(self) -> None:
        await self._r.aclose()
