"""`redact` against the plain recursive definition of what it does.

A mapping's keys and values take shortcuts (one remembered plan per key, plain strings and
numbers without a call): whatever the value, the shortcuts must give what the definition
gives: every key written redacted by shape, a credential-named key's value (not a null, a flag
or a token count) replaced whole, every string redacted by shape, at any depth.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.telemetry.redact import DEFAULT_KEY_PATTERNS, REDACTED, KeyMatcher, key_matcher, redact, redact_text


class _Outcome(enum.StrEnum):
    OK = "ok"


class _Level(enum.IntEnum):
    HIGH = 3


def _definition(value: Any, matcher: KeyMatcher, depth: int = 0) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, (bool, int, float, type(None))):
        return value
    if depth >= 64 and isinstance(value, (Mapping, list, tuple)):
        return REDACTED
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            text = k if isinstance(k, str) else str(k)
            written = redact_text(text) if isinstance(k, str) else k
            sensitive = v is not None and not isinstance(v, bool)
            sensitive = sensitive and not (isinstance(v, int) and text.lower().endswith("tokens"))
            out[written] = REDACTED if matcher(text) and sensitive else _definition(v, matcher, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_definition(v, matcher, depth + 1) for v in value]
    return value


_SECRETS = ["Bearer abcdefgh12345678", "sk-ant-api03-abcdefghijklmnop", "AKIAABCDEFGHIJKLMNOP", "hunter2"]
_KEYS = st.one_of(
    st.sampled_from(["session", "password", "api_key", "X-Api-Key", "max_tokens", "token", "Bearer abcdefgh12345678"]),
    st.text(max_size=12),
    st.integers(-3, 3),
    st.just(_Outcome.OK),
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.sampled_from(_SECRETS),
    st.just(_Outcome.OK),
    st.just(_Level.HIGH),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_KEYS, inner, max_size=5),
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=8))
def test_redact_is_the_definition(fields: dict[Any, Any]) -> None:
    matcher = key_matcher(DEFAULT_KEY_PATTERNS)
    assert redact(fields, matcher) == _definition(fields, matcher)
    assert redact(fields, matcher) == _definition(fields, matcher)  # the remembered plans agree


def test_a_log_lines_fields() -> None:
    fields = {
        "session": "s-1",
        "outcome": _Outcome.OK,
        "password": "hunter2",
        "max_tokens": 100,
        "api_key": None,
        "token": True,
        "error": "upstream said Bearer abcdefgh12345678",
        3: "sk-ant-api03-abcdefghijklmnop",
    }
    assert redact(fields) == {
        "session": "s-1",
        "outcome": "ok",
        "password": REDACTED,
        "max_tokens": 100,
        "api_key": None,
        "token": True,
        "error": "upstream said [REDACTED]",
        3: REDACTED,
    }


def test_only_short_keys_are_remembered() -> None:
    matcher = KeyMatcher(DEFAULT_KEY_PATTERNS)
    long_key = "password_" + "x" * 300
    assert redact({long_key: "hunter2", "session": "s"}, matcher) == {long_key: REDACTED, "session": "s"}
    assert matcher.plan(long_key) == (long_key, True)
    assert long_key not in matcher._answers and "session" in matcher._answers
