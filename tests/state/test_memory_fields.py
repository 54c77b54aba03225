"""The in-memory ledger's record fields (sidecar/state/memory.py): a remembered field is the
field made afresh, the memory of them stays within its bound, and reading a field back gives
the string (digests as their 32 bytes, anything else as UTF-8 with its length)."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.state import memory

_DIGESTS = st.binary(min_size=1, max_size=64).map(lambda b: hashlib.sha256(b).hexdigest())
_TEXTS = st.one_of(_DIGESTS, _DIGESTS.map(str.upper), st.text(max_size=80))


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXTS, min_size=1, max_size=6))
def test_a_remembered_field_is_the_field_and_reads_back(texts: list[str]) -> None:
    for text in texts * 2:  # the second time, from memory
        field = memory._field(text)
        assert field == memory._make_field(text)
        assert memory._read_field(b"\x00" + field + b"\x01", 1) == (text, 1 + len(field))
        assert memory._field_end(field, 0) == len(field)
    digest = hashlib.sha256(b"x").hexdigest()
    assert len(memory._field(digest)) == 33  # a lower-case digest takes its 32 bytes


def test_the_memory_of_fields_stays_within_its_bound() -> None:
    for i in range(3 * memory._FIELDS_MAX):
        memory._field(f"toolu_{i}")
        assert len(memory._fields) <= memory._FIELDS_MAX
    long = "x" * (memory._FIELD_TEXT_MAX + 1)  # a call id as long as a model or agent likes
    assert memory._field(long) == memory._make_field(long)
    assert long not in memory._fields
    assert all(len(text) <= memory._FIELD_TEXT_MAX for text in memory._fields)
