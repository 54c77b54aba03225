"""What only some backends promise: persistence, sharing across processes, unavailability."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sidecar.config import StateSettings
from sidecar.state import (
    HeldState,
    Limits,
    MemoryStore,
    StateStore,
    StateUnavailable,
    build_store,
    may_proceed_without_state,
)
from sidecar.state.redis import RedisStore
from sidecar.state.sqlite import SQLiteStore
from tests.helpers.redis_server import run_redis_server
from tests.state.test_state import approval, call

ROOT = Path(__file__).resolve().parents[2]


async def _write_some(store: StateStore) -> None:
    await store.record_call(call("c1"))
    await store.record_result("s1", "c1", "done", False, 2.0)
    await store.note_replay("s1", call("c1").replay_key)
    await store.create_approval(approval("a1"))
    await store.decide_approval("a1", "approved", "alice", None, time.time())
    await store.remember_held("turn:resp_1", HeldState(root="resp_0", withheld={"fc_1": "denied"}))


async def _check_some(store: StateStore) -> None:
    rec = await store.find_replay("s1", call("c1").replay_key)
    assert rec is not None and (rec.call_id, rec.result, rec.count) == ("c1", "done", 2)
    assert await store.session_counts("s1") == (1, {"transfer": 1})
    a = await store.get_approval("a1")
    assert a is not None and (a.status, a.decided_by, a.arguments) == ("approved", "alice", {"amount": 10, "note": []})
    assert await store.held("turn:resp_1") == HeldState(root="resp_0", withheld={"fc_1": "denied"})


async def test_sqlite_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    first = SQLiteStore(path)
    await _write_some(first)
    await first.close()
    reopened = SQLiteStore(path)
    await _check_some(reopened)
    await reopened.close()
    assert (tmp_path / "state.db-wal").exists() or (tmp_path / "state.db").exists()


async def test_sqlite_uses_wal_and_does_not_block_the_loop(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "state.db"))
    loop_thread = threading.get_ident()
    seen: list[int] = []
    mode = await store._run(
        lambda c: (seen.append(threading.get_ident()), c.execute("PRAGMA journal_mode").fetchone()[0])[1]
    )
    assert mode == "wal" and seen[0] != loop_thread
    await store.close()


async def test_redis_survives_reopen(redis_url: str) -> None:
    first = RedisStore(redis_url, prefix="sidecar:reopen:")
    await _write_some(first)
    await first.close()
    second = RedisStore(redis_url, prefix="sidecar:reopen:")
    await _check_some(second)
    await second.close()


def test_redis_keys_are_namespaced(redis_url: str) -> None:
    import redis

    async def write() -> None:
        store = RedisStore(redis_url)
        await _write_some(store)
        await store.close()

    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        client.flushdb()
        asyncio.run(write())
        keys = client.keys("*")
        assert keys and all(k.startswith("sidecar:") for k in keys)
        assert not any("s1" in k for k in keys)  # session ids are hashed into keys
        assert client.pttl(next(k for k in keys if k.startswith("sidecar:call:"))) > 0


async def test_redis_drops_expired_calls_a_few_at_a_time(redis_url: str) -> None:
    """Over the total bound, expired calls leave before live ones (even when used more
    recently), but one write removes no more than the bound is over: a backlog of expired
    calls is never swept in one script."""
    import redis

    prefix = "sidecar:sweep:"
    store = RedisStore(redis_url, Limits(ttl_s=60.0, max_total=4), prefix=prefix)
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        for key in client.keys(prefix + "*"):
            client.delete(key)
        first = call("first", {"n": 0}, session="live")
        await store.record_call(first)  # the least recently used from here on
        for i in range(3):  # expire 0.3 s from now, used after `first`
            await store.record_call(call(f"old{i}", {"i": i}, session=f"s{i}", at=time.time() - 59.7))
            assert await store.record_result(f"s{i}", f"old{i}", "late", False, time.time())
        await asyncio.sleep(0.4)
        for n in (1, 2):
            await store.record_call(call(f"new{n}", {"n": n}, session="live"))
            assert client.zcard(prefix + "lru") == 4 and client.zcard(prefix + "exp") == 4  # one left per write
        for kept in ("first", "new1", "new2"):
            assert await store.get_call("live", kept) is not None, kept
    await store.close()


async def test_two_redis_stores_in_two_processes_share_state(redis_url: str) -> None:
    here = RedisStore(redis_url, prefix="sidecar:procs:")
    script = (
        "import asyncio, sys\n"
        "from sidecar.state.redis import RedisStore\n"
        "from tests.state.test_state import call\n"
        "async def main():\n"
        "    s = RedisStore(sys.argv[1], prefix='sidecar:procs:')\n"
        "    await s.record_call(call('from-other-process'))\n"
        "    print(await s.note_replay('s1', call('x').replay_key))\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, redis_url, cwd=ROOT, stdout=subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0 and out.strip() == b"2"
    rec = await here.find_replay("s1", call("x").replay_key)
    assert rec is not None and (rec.call_id, rec.count) == ("from-other-process", 2)
    await here.record_call(call("here"))  # a repeat delivered through this replica
    rec = await here.find_replay("s1", call("x").replay_key)
    assert rec is not None and rec.count == 3
    await here.close()


async def test_redis_down_raises_state_unavailable_fast() -> None:
    with run_redis_server() as url:
        store = RedisStore(url)
        await store.record_call(call("c1"))
        assert await store.healthy()
    # the server is gone now
    started = time.monotonic()
    with pytest.raises(StateUnavailable):
        await store.find_replay("s1", call("c1").replay_key)
    for op in (
        lambda: store.record_call(call("c2")),
        lambda: store.get_approval("a1"),
        lambda: store.list_approvals(),
        lambda: store.decide_approval("a1", "approved", "x", None, 0.0),
    ):
        with pytest.raises(StateUnavailable):
            await op()
    assert not await store.healthy()
    assert time.monotonic() - started < 5
    await store.close()


async def test_redis_unresponsive_times_out_in_about_half_a_second() -> None:
    """A server that accepts but never answers (hung, partitioned) is detected by timeout."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0")
    started = time.monotonic()
    with pytest.raises(StateUnavailable):
        await store.get_call("s1", "c1")
    assert time.monotonic() - started < 2
    assert not await store.healthy()
    await store.close()
    server.close()


@pytest.mark.parametrize(
    ("backend", "kind"),
    [("memory", MemoryStore), ("sqlite", SQLiteStore), ("redis", RedisStore)],
)
async def test_build_store(backend: str, kind: type, tmp_path: Path) -> None:
    settings = StateSettings(
        backend=backend,
        sqlite_path=str(tmp_path / "s.db"),
        ledger_ttl_s=60,
        max_entries_per_session=7,
        max_entries_total=70,
        max_result_bytes=9,
    )
    store = build_store(settings)
    assert isinstance(store.backend, kind) and store.name == backend  # behind the guard
    assert store.limits == Limits(60, 7, 70, 9)
    await store.close()


@pytest.mark.parametrize(
    ("policy", "side_effects", "proceed"),
    [("fail_closed", True, False), ("fail_closed", False, True), ("fail_open", True, True)],
)
def test_may_proceed_without_state(policy: str, side_effects: bool, proceed: bool) -> None:
    assert may_proceed_without_state(policy, side_effects) is proceed


def test_missing_redis_server_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers import redis_server

    monkeypatch.setattr(redis_server.shutil, "which", lambda name: None)
    with (
        pytest.raises(redis_server.RedisServerMissing, match="apt-get install"),
        run_redis_server(),
    ):
        pass
