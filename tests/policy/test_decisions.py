"""One decision table, run against every engine: embedded regorus, the OPA engine over the
OPA Data API stub, and OPA's own evaluator (its Go library, tests/helpers/opa_go.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from sidecar.policy import Decision, PolicyEngine, apply_mode, build_engine
from sidecar.policy.loader import read_bundle
from tests.helpers.opa_go import OpaGoEngine
from tests.policy.cases import DECISIONS, RESULTS, VISIBLE
from tests.policy.conftest import POLICIES, settings, start_stub

ENGINES = ["embedded", "opa_stub", "opa_go"]


@pytest.fixture(params=ENGINES)
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[PolicyEngine]:
    kind = request.param
    stub = None
    if kind == "embedded":
        built: PolicyEngine = build_engine(settings(), POLICIES)
    elif kind == "opa_stub":
        stub = await start_stub()
        built = build_engine(settings(engine="opa", opa_url=stub.url, opa_timeout_s=2), None)
    else:
        built = OpaGoEngine(request.getfixturevalue("opa_bindings"), read_bundle(POLICIES))
    yield built
    await built.close()
    if stub is not None:
        await stub.runner.cleanup()


async def test_decision_table(engine: PolicyEngine) -> None:
    for name, doc, expected in DECISIONS:
        decision = await engine.decide(doc)
        assert decision.to_dict() == expected, name
        assert decision.error is None
    assert engine.health()["ok"] is True


async def test_visible_tools_table(engine: PolicyEngine) -> None:
    for name, doc, expected in VISIBLE:
        assert await engine.visible_tools(doc) == expected, name


async def test_result_table(engine: PolicyEngine) -> None:
    for name, doc, expected in RESULTS:
        result = await engine.result_decision(doc)
        assert (None if result is None else result.to_dict()) == expected, name


def test_decision_outcome_labels() -> None:
    assert Decision(True).outcome == "allow"
    assert Decision(False).outcome == "deny"
    assert Decision(False, require_approval={"group": "g", "ttl_s": 1}).outcome == "approval"
    assert Decision(True, error="boom").outcome == "error"


@pytest.mark.parametrize(
    ("mode", "allow", "expect_allow", "expect_flag"),
    [
        ("enforce", False, False, False),
        ("enforce", True, True, False),
        ("shadow", False, True, True),
        ("shadow", True, True, False),
        ("off", False, True, False),
    ],
)
def test_apply_mode(mode: str, allow: bool, expect_allow: bool, expect_flag: bool) -> None:
    approval: dict[str, Any] | None = None if allow else {"group": "g", "ttl_s": 5}
    decided = Decision(allow, ["r"], approval, True)
    effective, flagged = apply_mode(decided, mode)
    assert (effective.allow, flagged) == (expect_allow, expect_flag)
    if expect_allow:
        assert effective.require_approval is None


async def test_packaged_default_without_directory() -> None:
    """No --policies: the packaged default. Undeclared tools refused, every tool side-effecting
    (replays refused), no approvals, every tool visible, and its data reaches the tool traits."""
    from tests.policy.cases import call

    engine = build_engine(settings(), None)
    assert (await engine.decide(call("anything"))).rule == "unlisted"
    assert (await engine.decide(call("x", tool={"declared": False}))).allow is False
    replayed = await engine.decide(call("x", replay={"count": 1}))
    assert (replayed.allow, replayed.rule) == (False, "replay")
    big = await engine.decide(call("payments_refund", {"amount": 10**9}))
    assert big.allow is True and big.require_approval is None
    assert await engine.visible_tools({"tools": ["a"]}) == ["a"]
    assert await engine.result_decision(call("x")) is None
    assert engine.data["sidecar"]["unlisted_tool"]["side_effects"] is True
    await engine.close()


async def test_embedded_engine_used_from_another_thread() -> None:
    """regorus engines are thread-bound; the engine recompiles instead of panicking.

    The thread's own copy is dropped on that thread when it ends (regorus refuses a drop on
    another one), so the thread here ends before the engine goes away."""
    import threading

    from tests.policy.cases import call

    engine = build_engine(settings(), POLICIES)
    assert hasattr(engine, "decide_sync")
    decided = []
    worker = threading.Thread(target=lambda: decided.append(engine.decide_sync(call("support_tickets_search"))))  # type: ignore[union-attr]
    worker.start()
    worker.join()
    [decision] = decided
    assert decision.allow is True and decision.error is None
    await engine.close()
