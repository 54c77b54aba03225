"""SQLite state: one pod, survives a restart.

sqlite3 blocks, so every statement runs on one dedicated worker thread that owns the
connection; the event loop only awaits. Writes take `BEGIN IMMEDIATE`, which holds the write
lock from the first read, so read-check-write steps (decide, consume, record_result) are
atomic even against another process using the same file. Live-entry counts are kept by
triggers so the LRU bounds never need a COUNT(*) over the table.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from functools import partial
from typing import Any, TypeVar

from sidecar.state.base import (
    Approval,
    CallFacts,
    CallRecord,
    Decision,
    HeldState,
    Limits,
    StateUnavailable,
    approval_retention,
    check_decidable,
    consumable,
    decided,
    matches,
    one_session,
)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    session TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL, args_hash TEXT NOT NULL,
    replay_key TEXT NOT NULL, delivered_at REAL NOT NULL, result TEXT, result_is_error INTEGER,
    result_at REAL, result_truncated INTEGER NOT NULL, count INTEGER NOT NULL,
    is_first INTEGER NOT NULL, expires REAL NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (session, call_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS calls_replay ON calls (session, replay_key, seq) WHERE is_first = 1;
CREATE INDEX IF NOT EXISTS calls_lru ON calls (seq);
CREATE INDEX IF NOT EXISTS calls_session_lru ON calls (session, seq);
CREATE INDEX IF NOT EXISTS calls_expires ON calls (expires);
CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY, live INTEGER NOT NULL, expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_expires ON sessions (expires);
CREATE TABLE IF NOT EXISTS tool_counts (
    session TEXT NOT NULL, tool TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (session, tool)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO meta VALUES ('live', 0), ('seq', 0);
CREATE TRIGGER IF NOT EXISTS calls_added AFTER INSERT ON calls BEGIN
    UPDATE meta SET v = v + 1 WHERE k = 'live';
    INSERT INTO sessions VALUES (new.session, 1, new.expires) ON CONFLICT (session)
        DO UPDATE SET live = live + 1, expires = max(expires, excluded.expires);
END;
CREATE TRIGGER IF NOT EXISTS calls_removed AFTER DELETE ON calls BEGIN
    UPDATE meta SET v = v - 1 WHERE k = 'live';
    UPDATE sessions SET live = live - 1 WHERE session = old.session;
END;
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, session TEXT NOT NULL, tool TEXT NOT NULL, args_hash TEXT NOT NULL,
    grp TEXT NOT NULL, created REAL NOT NULL, status TEXT NOT NULL, retain_until REAL NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_call ON approvals (session, tool, args_hash, created);
CREATE INDEX IF NOT EXISTS approvals_status ON approvals (status);
CREATE TABLE IF NOT EXISTS held (
    key TEXT PRIMARY KEY, body BLOB NOT NULL, expires REAL NOT NULL, seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS held_lru ON held (seq);
"""

_RECORD_COLUMNS = ", ".join(f.name for f in fields(CallRecord))


def _record(row: tuple[Any, ...]) -> CallRecord:
    rec = CallRecord(*row)
    rec.result_is_error = None if rec.result_is_error is None else bool(rec.result_is_error)
    rec.result_truncated = bool(rec.result_truncated)
    return rec


class SQLiteStore:
    """State in one SQLite file (WAL), used from a single worker thread."""

    name = "sqlite"

    def __init__(self, path: str, limits: Limits | None = None) -> None:
        self.path = path
        self.limits = limits or Limits()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sidecar-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._pruned_at = 0.0

    # -- plumbing ----------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=5.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    def _tx(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        conn = self._connection()
        if not write:
            return fn(conn)
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return out

    async def _run(self, fn: Callable[[sqlite3.Connection], T], write: bool = True) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, partial(self._tx, fn, write))
        except sqlite3.OperationalError as exc:  # locked past the timeout, disk full, I/O
            raise StateUnavailable(f"sqlite {self.path}: {exc}") from exc

    @staticmethod
    def _next_seq(c: sqlite3.Connection) -> int:
        row = c.execute("UPDATE meta SET v = v + 1 WHERE k = 'seq' RETURNING v").fetchone()
        return int(row[0])

    def _first(self, c: sqlite3.Connection, session: str, replay_key: str) -> CallRecord | None:
        row = c.execute(
            f"SELECT {_RECORD_COLUMNS} FROM calls WHERE session = ? AND replay_key = ? "
            "AND is_first = 1 AND expires > ? ORDER BY seq DESC LIMIT 1",
            (session, replay_key, self.limits.clock()),
        ).fetchone()
        return _record(row) if row else None

    def _get(self, c: sqlite3.Connection, session: str, call_id: str) -> CallRecord | None:
        row = c.execute(
            f"SELECT {_RECORD_COLUMNS} FROM calls WHERE session = ? AND call_id = ? AND expires > ?",
            (session, call_id, self.limits.clock()),
        ).fetchone()
        return _record(row) if row else None

    # -- ledger ------------------------------------------------------------------------------

    async def record_call(self, rec: CallRecord) -> None:
        await self._run(lambda c: self._insert_call(c, rec))

    async def record_calls(self, records: Sequence[CallRecord]) -> None:
        if not records:
            return
        one_session(records)

        def op(c: sqlite3.Connection) -> None:
            for rec in records:
                self._insert_call(c, rec)

        await self._run(op)  # one transaction: all of them, or none

    def _insert_call(self, c: sqlite3.Connection, rec: CallRecord) -> None:
        lim = self.limits
        now = lim.clock()
        if not self._pruned_at <= now < self._pruned_at + 1.0:
            # at most once a second: reads filter expired rows anyway, this frees space
            self._pruned_at = now
            c.execute("DELETE FROM calls WHERE expires <= ?", (now,))
            c.execute(
                "DELETE FROM tool_counts WHERE session IN (SELECT session FROM sessions WHERE expires <= ?)", (now,)
            )
            c.execute("DELETE FROM sessions WHERE expires <= ?", (now,))
        lapsed = c.execute("SELECT 1 FROM sessions WHERE session = ? AND expires <= ?", (rec.session, now)).fetchone()
        if lapsed:  # the session's window closed: its counts start again from zero
            for table in ("calls", "tool_counts", "sessions"):
                c.execute(f"DELETE FROM {table} WHERE session = ?", (rec.session,))
        c.execute("DELETE FROM calls WHERE session = ? AND call_id = ?", (rec.session, rec.call_id))
        first = self._first(c, rec.session, rec.replay_key)
        if first is not None:
            c.execute(
                "UPDATE calls SET count = count + 1, seq = ? WHERE session = ? AND call_id = ?",
                (self._next_seq(c), first.session, first.call_id),
            )
        c.execute(
            "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, NULL, 0, 1, ?, ?, ?)",
            (
                rec.session,
                rec.call_id,
                rec.tool,
                rec.args_hash,
                rec.replay_key,
                rec.delivered_at,
                int(first is None),
                lim.expires_at(rec),
                self._next_seq(c),
            ),
        )
        c.execute(
            "INSERT INTO tool_counts VALUES (?, ?, 1) ON CONFLICT (session, tool) DO UPDATE SET n = n + 1",
            (rec.session, rec.tool),
        )
        # Over a bound, expired calls leave first (they may be more recently used than live
        # ones: a late result touches them), then the least recently used live ones.
        (live,) = c.execute("SELECT live FROM sessions WHERE session = ?", (rec.session,)).fetchone()
        if live > lim.max_per_session:
            c.execute("DELETE FROM calls WHERE session = ? AND expires <= ?", (rec.session, now))
            (live,) = c.execute("SELECT live FROM sessions WHERE session = ?", (rec.session,)).fetchone()
        if live > lim.max_per_session:
            c.execute(
                "DELETE FROM calls WHERE session = ? AND call_id IN (SELECT call_id "
                "FROM calls WHERE session = ? ORDER BY seq LIMIT ?)",
                (rec.session, rec.session, live - lim.max_per_session),
            )
        (total,) = c.execute("SELECT v FROM meta WHERE k = 'live'").fetchone()
        if total > lim.max_total:
            c.execute("DELETE FROM calls WHERE expires <= ?", (now,))
            (total,) = c.execute("SELECT v FROM meta WHERE k = 'live'").fetchone()
        if total > lim.max_total:
            c.execute(
                "DELETE FROM calls WHERE (session, call_id) IN (SELECT session, call_id "
                "FROM calls ORDER BY seq LIMIT ?)",
                (total - lim.max_total,),
            )

    async def find_replay(self, session: str, replay_key: str) -> CallRecord | None:
        return await self._run(lambda c: self._first(c, session, replay_key), write=False)

    async def note_replay(self, session: str, replay_key: str) -> int:
        def op(c: sqlite3.Connection) -> int:
            first = self._first(c, session, replay_key)
            if first is None:
                return 0
            c.execute(
                "UPDATE calls SET count = count + 1, seq = ? WHERE session = ? AND call_id = ?",
                (self._next_seq(c), session, first.call_id),
            )
            return first.count + 1

        return await self._run(op)

    async def get_call(self, session: str, call_id: str) -> CallRecord | None:
        return await self._run(lambda c: self._get(c, session, call_id), write=False)

    async def get_calls(self, session: str, call_ids: Sequence[str]) -> dict[str, CallRecord]:
        def op(c: sqlite3.Connection) -> dict[str, CallRecord]:
            found = {call_id: self._get(c, session, call_id) for call_id in call_ids}
            return {call_id: rec for call_id, rec in found.items() if rec is not None}

        return await self._run(op, write=False)

    async def look_up_call(self, session: str, replay_key: str, call_id: str) -> CallFacts:
        def op(c: sqlite3.Connection) -> CallFacts:
            return CallFacts(self._first(c, session, replay_key), self._get(c, session, call_id))

        return await self._run(op, write=False)

    async def record_result(self, session: str, call_id: str, result: str, is_error: bool, at: float) -> bool:
        text, truncated = self.limits.truncate(result)

        def op(c: sqlite3.Connection) -> bool:
            rec = self._get(c, session, call_id)
            if rec is None or rec.result_at is not None:
                return False
            c.execute(
                "UPDATE calls SET result = ?, result_is_error = ?, result_at = ?, "
                "result_truncated = ?, seq = ? WHERE session = ? AND call_id = ?",
                (text, int(is_error), at, int(truncated), self._next_seq(c), session, call_id),
            )
            return True

        return await self._run(op)

    async def session_counts(self, session: str) -> tuple[int, dict[str, int]]:
        def op(c: sqlite3.Connection) -> dict[str, int]:
            rows = c.execute(
                "SELECT t.tool, t.n FROM tool_counts t JOIN sessions s USING (session) "
                "WHERE t.session = ? AND s.expires > ?",
                (session, self.limits.clock()),
            ).fetchall()
            return {tool: n for tool, n in rows}

        counts = await self._run(op, write=False)
        return sum(counts.values()), counts

    # -- approvals ---------------------------------------------------------------------------

    @staticmethod
    def _approval(c: sqlite3.Connection, approval_id: str) -> Approval | None:
        row = c.execute("SELECT body FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        return Approval.from_json(row[0]) if row else None

    @staticmethod
    def _save(c: sqlite3.Connection, a: Approval) -> None:
        c.execute("UPDATE approvals SET status = ?, body = ? WHERE id = ?", (a.status, a.to_json(), a.id))

    async def create_approval(self, a: Approval) -> None:
        retain = approval_retention(a, self.limits)
        await self._run(
            lambda c: c.execute(
                "INSERT INTO approvals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (a.id, a.session, a.tool, a.args_hash, a.group, a.created, a.status, retain, a.to_json()),
            )
        )

    async def get_approval(self, approval_id: str) -> Approval | None:
        a = await self._run(lambda c: self._approval(c, approval_id), write=False)
        return a.effective(self.limits.clock()) if a else None

    async def list_approvals(
        self,
        status: str | None = "pending",
        group: str | None = None,
        tool: str | None = None,
        session: str | None = None,
    ) -> list[Approval]:
        wanted: list[str] = []
        params: list[Any] = []
        for column, value in (("grp", group), ("tool", tool), ("session", session)):
            if value is not None:
                wanted.append(f"{column} = ?")
                params.append(value)
        where = " WHERE " + " AND ".join(wanted) if wanted else ""
        rows = await self._run(
            lambda c: c.execute(f"SELECT body FROM approvals{where} ORDER BY created", params).fetchall(),
            write=False,
        )
        now = self.limits.clock()
        found = (Approval.from_json(body).effective(now) for (body,) in rows)
        return [a for a in found if matches(a, status, group, tool, session)]

    async def decide_approval(
        self, approval_id: str, status: Decision, decided_by: str, comment: str | None, now: float
    ) -> Approval:
        def op(c: sqlite3.Connection) -> Approval:
            a = check_decidable(self._approval(c, approval_id), approval_id, now)
            d = decided(a, status, decided_by, comment, now)
            self._save(c, d)
            return d

        return await self._run(op)

    async def find_approval(self, session: str, tool: str, args_hash: str) -> Approval | None:
        row = await self._run(
            lambda c: c.execute(
                "SELECT body FROM approvals WHERE session = ? AND tool = ? AND args_hash = ? "
                "ORDER BY created DESC LIMIT 1",
                (session, tool, args_hash),
            ).fetchone(),
            write=False,
        )
        return Approval.from_json(row[0]).effective(self.limits.clock()) if row else None

    async def consume_approval(self, approval_id: str, now: float) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            a = self._approval(c, approval_id)
            if a is None or not consumable(a, now):
                return False
            a.status = "consumed"
            self._save(c, a)
            return True

        return await self._run(op)

    async def expire_approvals(self, now: float) -> list[Approval]:
        def op(c: sqlite3.Connection) -> list[Approval]:
            c.execute("DELETE FROM approvals WHERE retain_until <= ?", (now,))
            rows = c.execute("SELECT body FROM approvals WHERE status = 'pending'").fetchall()
            expired = []
            for (body,) in rows:
                a = Approval.from_json(body)
                if now >= a.expires:
                    a.status = "expired"
                    self._save(c, a)
                    expired.append(a)
            return expired

        return await self._run(op)

    # -- what providers hold ------------------------------------------------------------------

    async def remember_held(self, key: str, state: HeldState) -> None:
        lim = self.limits

        def op(c: sqlite3.Connection) -> None:
            now = lim.clock()
            c.execute("DELETE FROM held WHERE expires <= ?", (now,))
            c.execute(
                "INSERT OR REPLACE INTO held VALUES (?, ?, ?, ?)",
                (key, state.to_json(), now + lim.ttl_s, self._next_seq(c)),
            )
            (count,) = c.execute("SELECT count(*) FROM held").fetchone()
            if count > lim.max_total:  # least recently written first
                c.execute(
                    "DELETE FROM held WHERE key IN (SELECT key FROM held ORDER BY seq LIMIT ?)",
                    (count - lim.max_total,),
                )

        await self._run(op)

    async def held(self, key: str) -> HeldState | None:
        row = await self._run(
            lambda c: c.execute(
                "SELECT body FROM held WHERE key = ? AND expires > ?", (key, self.limits.clock())
            ).fetchone(),
            write=False,
        )
        return HeldState.from_json(row[0]) if row else None

    async def forget_held(self, key: str) -> None:
        await self._run(lambda c: c.execute("DELETE FROM held WHERE key = ?", (key,)))

    async def healthy(self) -> bool:
        try:
            await self._run(lambda c: c.execute("SELECT 1").fetchone(), write=False)
        except StateUnavailable:
            return False
        return True

    async def close(self) -> None:
        def shut(_: sqlite3.Connection | None = None) -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._pool, shut)
        self._pool.shutdown(wait=True)
