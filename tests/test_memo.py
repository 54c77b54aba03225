"""`ShortMemo`: a dict that keeps values of short texts only, and empties itself when full."""

from __future__ import annotations

from sidecar.memo import ShortMemo


def test_short_texts_are_kept_long_ones_only_returned() -> None:
    memo: ShortMemo[str, int] = ShortMemo(max_entries=3, max_length=4)
    assert memo.keep("abcd", 1, len("abcd")) == 1
    assert memo.keep("abcde", 2, len("abcde")) == 2
    assert memo == {"abcd": 1}
    assert memo.get("abcde") is None


def test_a_full_memo_is_emptied_before_the_next_entry() -> None:
    memo: ShortMemo[int, int] = ShortMemo(max_entries=3, max_length=10)
    for i in range(3):
        memo.keep(i, i, 1)
    assert len(memo) == 3
    memo.keep(3, 3, 1)
    assert memo == {3: 3}
    for i in range(100):
        memo.keep(i, i, 1)
        assert len(memo) <= 3
