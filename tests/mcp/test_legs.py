"""The correlation of an MCP execution with the model-path call it executes (sidecar/exchange/legs.py)."""

from __future__ import annotations

from sidecar.exchange.legs import Ambiguous, Execute, FinalRefusal, LegIndex, Repeat
from sidecar.exchange.state import EarlierLeg
from sidecar.model import Session, SessionSource, Verdict, VerdictKind


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def leg(session: str = "s", call_id: str = "c1", at: float = 1000.0) -> EarlierLeg:
    return EarlierLeg(Session(session, SessionSource.HEADER), call_id, "refund", "h1", at)


def test_a_delivered_call_is_executed_once_then_repeated() -> None:
    index = LegIndex(60, clock=Clock())
    index.delivered(leg())
    first = index.match("refund", "h1", None)
    assert isinstance(first, Execute) and first.leg.call_id == "c1"
    assert index.match("refund", "h1", None) == Repeat(leg())  # claimed: a second execution is a repeat
    assert index.match("refund", "other-args", None) is None


def test_a_released_claim_can_be_executed_again() -> None:
    index = LegIndex(60, clock=Clock())
    index.delivered(leg())
    found = index.match("refund", "h1", None)
    assert isinstance(found, Execute)
    index.release(found)  # refused on the MCP leg, never ran
    assert isinstance(index.match("refund", "h1", None), Execute)


def test_a_final_refusal_is_returned_as_it_was() -> None:
    index = LegIndex(60, clock=Clock())
    denied = Verdict(VerdictKind.DENY, "denied", reasons=["no"])
    index.refused(leg(), denied)
    assert index.match("refund", "h1", None) == FinalRefusal(leg(), denied)


def test_two_sessions_are_ambiguous_unless_the_request_names_one() -> None:
    index = LegIndex(60, clock=Clock())
    index.delivered(leg("a", "c1"))
    index.delivered(leg("b", "c2"))
    assert index.match("refund", "h1", None) == Ambiguous(2)
    named = index.match("refund", "h1", "b")
    assert isinstance(named, Execute) and named.leg.call_id == "c2"


def test_the_window_and_the_bound() -> None:
    clock = Clock()
    index = LegIndex(60, max_entries=2, clock=clock)
    index.delivered(leg(at=clock.now))
    clock.now += 61
    assert index.match("refund", "h1", None) is None  # older than the window
    for n in range(3):
        index.delivered(EarlierLeg(Session("s", SessionSource.HEADER), f"c{n}", f"tool{n}", "h", clock.now))
    assert len(index) == 2 and index.match("tool0", "h", None) is None  # the oldest went first
