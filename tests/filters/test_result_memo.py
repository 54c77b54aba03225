"""The result memo (sidecar/filters/result_policy.py): what it keeps, for how long, and what
it forgets first."""

from __future__ import annotations

from sidecar.filters.result_policy import ResultMemo, ResultOutcome, memo_key
from sidecar.inspection import AnomalyKind, Inspection
from sidecar.inspection.findings import Span
from sidecar.policy.engine import ResultAction


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def outcome(spans: int = 0) -> ResultOutcome:
    kind = AnomalyKind.SECRET
    found = Inspection([kind], [Span(0, n, n + 4, kind, "aws_key") for n in range(spans)])
    return ResultOutcome(ResultAction.REDACT if spans else ResultAction.ALLOW, (kind,), inspection=found)


def test_least_recently_used_leaves_first_by_weight() -> None:
    memo = ResultMemo(size=4, ttl_s=60, clock=Clock())
    a, b, c = outcome(), outcome(), outcome(spans=2)  # weights 1, 1, 3
    memo.put(b"a", a)
    memo.put(b"b", b)
    assert memo.get(b"a") is a  # a is now the most recently used
    memo.put(b"c", c)  # 1 + 1 + 3 > 4: b goes, a stays
    assert (memo.get(b"a"), memo.get(b"b"), memo.get(b"c")) == (a, None, c)
    assert len(memo) == 2


def test_an_outcome_heavier_than_the_memo_is_never_kept() -> None:
    memo = ResultMemo(size=2, ttl_s=60, clock=Clock())
    memo.put(b"small", small := outcome())
    memo.put(b"big", outcome(spans=5))
    assert memo.get(b"big") is None and memo.get(b"small") is small
    empty = ResultMemo(size=0, ttl_s=60, clock=Clock())
    empty.put(b"x", outcome())
    assert empty.get(b"x") is None and len(empty) == 0


def test_kept_for_ttl_from_when_it_was_decided() -> None:
    clock = Clock()
    memo = ResultMemo(size=10, ttl_s=60, clock=clock)
    memo.put(b"k", kept := outcome())
    clock.now += 59
    assert memo.get(b"k") is kept  # a read does not extend it
    clock.now += 1
    assert memo.get(b"k") is None and len(memo) == 0


def test_put_again_replaces_and_reweighs() -> None:
    memo = ResultMemo(size=3, ttl_s=60, clock=Clock())
    memo.put(b"k", outcome(spans=2))
    memo.put(b"k", light := outcome())
    memo.put(b"other", other := outcome())
    memo.put(b"third", third := outcome())  # 1 + 1 + 1: nothing leaves
    assert (memo.get(b"k"), memo.get(b"other"), memo.get(b"third")) == (light, other, third)
    memo.clear()
    assert len(memo) == 0 and memo.get(b"k") is None
    memo.put(b"a", a := outcome(spans=2))  # the weight went with clear()
    assert memo.get(b"a") is a


def test_key_keeps_session_call_and_content_apart() -> None:
    base = memo_key("s1", "call_1", "text")
    assert base == memo_key("s1", "call_1", "text") and len(base) == 16
    assert (
        len(
            {base, memo_key("s1c", "all_1", "text"), memo_key("s1", "call_1t", "ext"), memo_key("s2", "call_1", "text")}
        )
        == 4
    )
    assert memo_key("s1", "call_1", [{"type": "text", "text": "x"}]) != memo_key("s1", "call_1", "x")
