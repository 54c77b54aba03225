"""The state contract, run identically against memory, SQLite and Redis."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from sidecar.model import canonical_json, sha256_hex
from sidecar.state import (
    Approval,
    ApprovalConflict,
    ApprovalNotFound,
    CallRecord,
    HeldCall,
    HeldState,
    StateStore,
)
from tests.state.conftest import MakeStore


def call(
    call_id: str,
    args: dict[str, object] | None = None,
    *,
    session: str = "s1",
    tool: str = "transfer",
    at: float | None = None,
) -> CallRecord:
    args = {"amount": 10} if args is None else args
    args_hash = sha256_hex(canonical_json(args))
    key = sha256_hex(f"{session}|{tool}|".encode() + canonical_json(args))
    return CallRecord(session, call_id, tool, args_hash, key, time.time() if at is None else at)


def approval(
    approval_id: str,
    *,
    session: str = "s1",
    tool: str = "transfer",
    args_hash: str = "h1",
    group: str = "finance",
    created: float | None = None,
    ttl: float = 60.0,
) -> Approval:
    created = time.time() if created is None else created
    return Approval(
        approval_id,
        session,
        tool,
        {"amount": 10, "note": []},
        args_hash,
        group,
        ["amount over limit"],
        created,
        created + ttl,
    )


# -- ledger ------------------------------------------------------------------------------------


async def test_replay_found_and_counted(store: StateStore) -> None:
    first = call("c1")
    await store.record_call(first)
    assert await store.find_replay("s1", call("x", {"amount": 11}).replay_key) is None
    assert await store.find_replay("s2", first.replay_key) is None  # scoped by session

    found = await store.find_replay("s1", first.replay_key)
    assert found is not None
    assert (found.call_id, found.count, found.first_seen) == ("c1", 1, first.delivered_at)

    assert await store.note_replay("s1", first.replay_key) == 2  # answered from the ledger
    await store.record_call(call("c2"))  # a repeat that was allowed through
    found = await store.find_replay("s1", first.replay_key)
    assert found is not None and (found.call_id, found.count) == ("c1", 3)
    assert await store.note_replay("s1", "unknown") == 0


async def test_one_replay_key_in_two_sessions(make_store: MakeStore) -> None:
    """A replay key is the session's own even when another session records the same one (a
    caller whose keys do not hash the session): each session finds its own delivery, also
    after the other one's is gone."""
    store = await make_store(max_per_session=2)
    first = call("a1", session="a")
    shared = first.replay_key
    await store.record_call(first)
    await store.record_call(replace(call("b1", session="b"), replay_key=shared))
    for session, call_id in (("a", "a1"), ("b", "b1")):
        found = await store.find_replay(session, shared)
        assert found is not None and (found.session, found.call_id, found.count) == (session, call_id, 1)
    for n in (2, 3):  # a1 leaves: two per session
        await store.record_call(call(f"a{n}", {"n": n}, session="a"))
    assert await store.find_replay("a", shared) is None
    assert await store.note_replay("b", shared) == 2
    await store.record_call(replace(call("b2", session="b"), replay_key=shared))  # a replay, counted
    found = await store.find_replay("b", shared)
    assert found is not None and (found.call_id, found.count) == ("b1", 3)


async def test_result_matching_and_duplicates(store: StateStore) -> None:
    await store.record_call(call("c1"))
    assert await store.get_call("s1", "nope") is None
    assert await store.get_call("s2", "c1") is None
    assert await store.record_result("s1", "c1", '{"ok": true}', False, 5.0)
    assert not await store.record_result("s1", "c1", "again", True, 6.0)  # duplicate result
    assert not await store.record_result("s1", "unknown", "x", False, 6.0)
    rec = await store.get_call("s1", "c1")
    assert rec is not None
    assert (rec.result, rec.result_is_error, rec.result_at, rec.result_truncated) == ('{"ok": true}', False, 5.0, False)
    replay = await store.find_replay("s1", rec.replay_key)
    assert replay is not None and replay.result == '{"ok": true}'


async def test_result_truncated_on_character_boundary(make_store: MakeStore) -> None:
    store = await make_store(max_result_bytes=5)
    await store.record_call(call("c1"))
    assert await store.record_result("s1", "c1", "abcdé€xyz", True, 1.0)
    rec = await store.get_call("s1", "c1")
    assert rec is not None
    assert (rec.result, rec.result_truncated, rec.result_is_error) == ("abcd", True, True)


async def test_ttl_expiry(make_store: MakeStore) -> None:
    store = await make_store(ttl_s=0.3)
    old = call("old", {"n": 1}, at=time.time() - 1)  # delivered before the window
    await store.record_call(old)
    assert await store.find_replay("s1", old.replay_key) is None
    assert await store.get_call("s1", "old") is None

    fresh = call("fresh", {"n": 2})
    await store.record_call(fresh)
    assert await store.find_replay("s1", fresh.replay_key) is not None
    assert (await store.session_counts("s1"))[0] >= 1
    await asyncio.sleep(0.4)
    assert await store.find_replay("s1", fresh.replay_key) is None
    assert await store.get_call("s1", "fresh") is None
    assert not await store.record_result("s1", "fresh", "late", False, 1.0)
    assert await store.session_counts("s1") == (0, {})
    # after expiry the same call starts a new replay window
    again = call("again", {"n": 2})
    await store.record_call(again)
    found = await store.find_replay("s1", again.replay_key)
    assert found is not None and (found.call_id, found.count) == ("again", 1)
    assert await store.session_counts("s1") == (1, {"transfer": 1})


async def test_look_up_call_answers_find_replay_and_get_call_at_once(make_store: MakeStore) -> None:
    """The replay guard's one lookup per call: the replay key's first delivery and the call
    id's own, each as the two separate questions answer it."""
    store = await make_store(ttl_s=1.0)

    async def both(replay_key: str, call_id: str, session: str = "s1") -> tuple[object, object]:
        facts = await store.look_up_call(session, replay_key, call_id)
        assert facts == (await store.find_replay(session, replay_key), await store.get_call(session, call_id))
        return (facts.first.call_id if facts.first else None, facts.same_id.call_id if facts.same_id else None)

    first = call("c1")
    assert await both(first.replay_key, "c1") == (None, None)  # nothing recorded yet
    await store.record_call(first)
    await store.record_call(call("c2", {"amount": 11}))
    assert await both(first.replay_key, "c1") == ("c1", "c1")  # the delivered call itself
    assert await both(first.replay_key, "c9") == ("c1", None)  # a replay under a new id
    assert await both(call("x", {"amount": 12}).replay_key, "c2") == (None, "c2")  # a reused id
    assert await both(first.replay_key, "c1", session="s2") == (None, None)  # scoped by session
    await store.record_result("s1", "c1", "done", False, 1.0)
    facts = await store.look_up_call("s1", first.replay_key, "c1")
    assert facts.first is not None and facts.first.result == "done"
    assert facts.same_id is not None and facts.same_id.result == "done"
    await asyncio.sleep(1.1)  # past the TTL: neither is live
    assert await both(first.replay_key, "c1") == (None, None)


async def test_get_calls_answers_get_call_for_each(make_store: MakeStore) -> None:
    """The calls a request's results answer, in one read: the live ones found, by id."""
    store = await make_store(ttl_s=1.0)
    await store.record_call(call("old", {"i": 0}, at=time.time() - 2))  # expired
    await store.record_call(call("c1", {"i": 1}))
    await store.record_call(call("c2", {"i": 2}))
    await store.record_call(call("c3", {"i": 3}, session="s2"))
    assert await store.record_result("s1", "c2", "done", False, time.time())
    ids = ["c1", "c2", "c3", "old", "never", "c1"]  # another session's, expired, unknown, repeated
    found = await store.get_calls("s1", ids)
    assert sorted(found) == ["c1", "c2"]
    for call_id in ids:
        assert found.get(call_id) == await store.get_call("s1", call_id)
    assert found["c2"].result == "done"
    assert await store.get_calls("s1", []) == {}
    assert await store.get_calls("nobody", ["c1"]) == {}


async def test_record_calls_is_record_call_for_each_in_order(make_store: MakeStore) -> None:
    """One turn's calls in one step: the same ledger as recording them one by one (a replay
    within the batch counted on the first, the per-session bound applied after each)."""
    store = await make_store(max_per_session=3)
    turn = [call("c1"), call("c2"), call("c3", {"amount": 11}), call("c4", {"amount": 12})]  # c2 replays c1
    await store.record_calls(turn)
    for rec in turn:
        await store.record_call(
            replace(rec, session="s2", call_id=f"s2-{rec.call_id}", replay_key=f"s2-{rec.replay_key}")
        )

    async def ledger(session: str, prefix: str) -> list[object]:
        seen: list[object] = []
        for rec in turn:
            got = await store.get_call(session, prefix + rec.call_id)
            first = await store.find_replay(session, prefix + rec.replay_key)
            seen.append((got and got.count, first and (first.call_id.removeprefix(prefix), first.count)))
        return seen

    batched = await ledger("s1", "")
    assert batched == await ledger("s2", "s2-")
    assert sum(1 for got, _ in batched if got is not None) == 3  # the bound applied: c1 evicted
    assert batched[0] == (None, None) and batched[1] == (1, None)  # c2 never held the replay key
    assert await store.session_counts("s1") == await store.session_counts("s2") == (4, {"transfer": 4})
    await store.record_calls([])  # nothing to record
    with pytest.raises(ValueError, match="one session"):
        await store.record_calls([call("x1"), call("x2", session="s3")])


async def test_a_full_session_drops_expired_calls_before_live_ones(make_store: MakeStore) -> None:
    """An expired call touched after the live ones (its result came late) is no reason to
    evict a live call: the live call's replay would go unseen."""
    store = await make_store(ttl_s=1.0, max_per_session=3)
    await store.record_call(call("old", {"i": 0}, at=time.time() - 0.7))  # expires in 0.3 s
    for i in (1, 2):
        await store.record_call(call(f"c{i}", {"i": i}))
    assert await store.record_result("s1", "old", "late", False, time.time())  # the most recently used now
    await asyncio.sleep(0.4)  # "old" has expired; c1 and c2 live on
    await store.record_call(call("c3", {"i": 3}))  # one over the bound
    for live in ("c1", "c2", "c3"):
        assert await store.get_call("s1", live) is not None, live
    assert await store.find_replay("s1", call("c1", {"i": 1}).replay_key) is not None
    assert await store.get_call("s1", "old") is None


async def test_a_full_ledger_drops_expired_calls_before_live_ones(make_store: MakeStore) -> None:
    """The total bound too: an expired call used after a live one leaves first."""
    store = await make_store(ttl_s=0.5, max_total=3)
    await store.record_call(call("a1", {"i": 1}, session="a"))
    await store.record_call(call("a-old", {"i": 0}, session="a", at=time.time() - 0.2))  # expires in 0.3 s
    assert await store.record_result("a", "a-old", "late", False, time.time())  # used after a1
    await store.record_call(call("b1", {"i": 1}, session="b"))
    await asyncio.sleep(0.4)
    await store.record_call(call("b2", {"i": 2}, session="b"))  # one over the bound
    for session, live in (("a", "a1"), ("b", "b1"), ("b", "b2")):
        assert await store.get_call(session, live) is not None, live


async def test_lru_per_session(make_store: MakeStore) -> None:
    store = await make_store(max_per_session=3)
    for i in range(3):
        await store.record_call(call(f"c{i}", {"i": i}))
    await store.note_replay("s1", call("c0", {"i": 0}).replay_key)  # c0 becomes recent
    await store.record_call(call("c3", {"i": 3}))  # evicts c1, the least recently used
    await store.record_call(call("other", session="s2"))  # another session is unaffected
    assert await store.get_call("s1", "c1") is None
    assert await store.find_replay("s1", call("c1", {"i": 1}).replay_key) is None
    for kept in ("c0", "c2", "c3"):
        assert await store.get_call("s1", kept) is not None
    assert await store.get_call("s2", "other") is not None


async def test_lru_total(make_store: MakeStore) -> None:
    store = await make_store(max_total=4)
    for session in ("a", "b", "c"):
        for i in range(2):
            await store.record_call(call(f"{session}{i}", {"i": i}, session=session))
    remaining = {
        cid
        for s, cid in [("a", "a0"), ("a", "a1"), ("b", "b0"), ("b", "b1"), ("c", "c0"), ("c", "c1")]
        if await store.get_call(s, cid) is not None
    }
    assert remaining == {"b0", "b1", "c0", "c1"}


async def test_session_counts(store: StateStore) -> None:
    assert await store.session_counts("s1") == (0, {})
    await store.record_call(call("c1", {"a": 1}))
    await store.record_call(call("c2", {"a": 2}))
    await store.record_call(call("c3", tool="search"))
    await store.record_call(call("c4", session="s2"))
    assert await store.session_counts("s1") == (3, {"transfer": 2, "search": 1})
    assert await store.session_counts("s2") == (1, {"transfer": 1})


async def test_held_records(store: StateStore) -> None:
    """What providers hold: one record per key, replaced whole, forgotten on demand."""
    assert await store.held("turn:resp_1") is None
    calls = [HeldCall("fc_1", "transfer", '{"amount":10}')]
    first = HeldState(root="resp_0", withheld={"fc_1": '{"status":"denied"}'}, calls=calls, session="derived:ab")
    await store.remember_held("turn:resp_1", first)
    assert await store.held("turn:resp_1") == first
    thread = HeldState(
        root="msg_1", tools=[{"name": "transfer", "input_schema": {"type": "object"}}], system="Be brief"
    )
    await store.remember_held("thread:msg_1", thread)
    await store.remember_held("turn:resp_1", HeldState(root="resp_0", continue_from="resp_2"))
    assert await store.held("turn:resp_1") == HeldState(root="resp_0", continue_from="resp_2")
    assert await store.held("thread:msg_1") == thread
    await store.forget_held("thread:msg_1")
    assert await store.held("thread:msg_1") is None


async def test_held_records_follow_the_ledger_bound(make_store: MakeStore) -> None:
    store = await make_store(max_total=2)
    for n in range(3):
        await store.remember_held(f"turn:r{n}", HeldState(root="r0"))
    assert await store.held("turn:r0") is None  # over the bound: the oldest written goes first
    assert await store.held("turn:r2") == HeldState(root="r0")


async def test_held_records_follow_the_ledger_ttl(make_store: MakeStore) -> None:
    store = await make_store(ttl_s=0.2)
    await store.remember_held("turn:r1", HeldState(root="r1"))
    await asyncio.sleep(0.3)  # past the TTL (Redis expires by its own clock)
    assert await store.held("turn:r1") is None


async def test_healthy(store: StateStore) -> None:
    assert await store.healthy()


# -- approvals ---------------------------------------------------------------------------------


async def test_approval_create_get_list_filters(store: StateStore) -> None:
    now = time.time()
    await store.create_approval(approval("a1", created=now))
    await store.create_approval(approval("a2", created=now + 1, group="ops", tool="deploy"))
    await store.create_approval(approval("a3", created=now + 2, session="s2"))
    got = await store.get_approval("a1")
    assert got == approval("a1", created=now)
    assert await store.get_approval("missing") is None
    assert [a.id for a in await store.list_approvals()] == ["a1", "a2", "a3"]
    assert [a.id for a in await store.list_approvals(group="ops")] == ["a2"]
    assert [a.id for a in await store.list_approvals(tool="transfer")] == ["a1", "a3"]
    assert [a.id for a in await store.list_approvals(session="s2")] == ["a3"]
    await store.decide_approval("a1", "approved", "alice", "ok", now)
    assert [a.id for a in await store.list_approvals()] == ["a2", "a3"]
    assert [a.id for a in await store.list_approvals(status="approved")] == ["a1"]
    assert len(await store.list_approvals(status=None)) == 3


async def test_decide_and_conflict(store: StateStore) -> None:
    now = time.time()
    await store.create_approval(approval("a1", created=now))
    d = await store.decide_approval("a1", "denied", "bob", "too much", now + 1)
    assert (d.status, d.decided_by, d.comment, d.decided_at) == ("denied", "bob", "too much", now + 1)
    assert await store.get_approval("a1") == d
    with pytest.raises(ApprovalConflict) as err:
        await store.decide_approval("a1", "approved", "alice", None, now + 2)
    assert err.value.status == "denied"
    with pytest.raises(ApprovalNotFound):
        await store.decide_approval("nope", "approved", "alice", None, now)


async def test_concurrent_approve_and_deny_exactly_one_wins(make_store: MakeStore) -> None:
    first, second = await make_store(), await make_store()  # two instances, one backing store
    now = time.time()
    for i in range(5):
        await first.create_approval(approval(f"race{i}", created=now))
        results = await asyncio.gather(
            first.decide_approval(f"race{i}", "approved", "alice", None, now),
            second.decide_approval(f"race{i}", "denied", "bob", None, now),
            first.decide_approval(f"race{i}", "denied", "carol", None, now),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, Approval)]
        losers = [r for r in results if isinstance(r, ApprovalConflict)]
        assert len(winners) == 1 and len(losers) == 2, results
        stored = await second.get_approval(f"race{i}")
        assert stored is not None and stored.status == winners[0].status


async def test_expiry_is_lazy_then_swept_once(make_store: MakeStore) -> None:
    store, other = await make_store(), await make_store()
    now = time.time()
    await store.create_approval(approval("old", created=now - 10, ttl=5))
    await store.create_approval(approval("live", created=now, ttl=60, args_hash="h2"))
    old = await store.get_approval("old")
    assert old is not None and old.status == "expired"
    found = await store.find_approval("s1", "transfer", "h1")
    assert found is not None and found.status == "expired"
    assert [a.id for a in await store.list_approvals()] == ["live"]
    assert [a.id for a in await store.list_approvals(status="expired")] == ["old"]
    with pytest.raises(ApprovalConflict) as err:
        await store.decide_approval("old", "approved", "alice", None, now)
    assert err.value.status == "expired"

    swept = await asyncio.gather(store.expire_approvals(now), other.expire_approvals(now))
    assert sorted(a.id for batch in swept for a in batch) == ["old"]  # reported exactly once
    assert await store.expire_approvals(now) == []
    stored = await other.get_approval("old")
    assert stored is not None and stored.status == "expired"


async def test_find_newest_and_consume_once(make_store: MakeStore) -> None:
    store, other = await make_store(), await make_store()
    now = time.time()
    assert await store.find_approval("s1", "transfer", "h1") is None
    await store.create_approval(approval("older", created=now - 1))
    await store.create_approval(approval("newer", created=now))
    found = await store.find_approval("s1", "transfer", "h1")
    assert found is not None and found.id == "newer"
    assert await store.find_approval("s1", "transfer", "other-args") is None

    assert not await store.consume_approval("newer", now)  # still pending
    await store.decide_approval("newer", "approved", "alice", None, now)
    results = await asyncio.gather(*(s.consume_approval("newer", now) for s in (store, other, store, other)))
    assert sorted(results) == [False, False, False, True]
    consumed = await store.get_approval("newer")
    assert consumed is not None and consumed.status == "consumed"
    assert not await store.consume_approval("missing", now)


async def test_approved_but_expired_cannot_be_consumed(store: StateStore) -> None:
    now = time.time()
    await store.create_approval(approval("a1", created=now, ttl=5))
    await store.decide_approval("a1", "approved", "alice", None, now)
    assert not await store.consume_approval("a1", now + 6)
    assert await store.consume_approval("a1", now + 1)
