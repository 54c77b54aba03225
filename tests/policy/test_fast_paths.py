"""The engine's per-call helpers have fast paths (sidecar/policy/reads.py `projector`,
sidecar/policy/_regorus.py `to_plain`); each must give exactly what the plain version it
replaced gave, for any value: these compare them, on generated values, with a copy of that
plain version kept here as the reference."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.policy._regorus import to_plain
from sidecar.policy.reads import Shape, project, projector

KEYS = st.sampled_from(["tool", "name", "call", "args", "session", "calls_by_tool", "replay", "count", "x"])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
DOCUMENTS: st.SearchStrategy[Any] = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4), max_leaves=20
)
SHAPES: st.SearchStrategy[Shape] = st.recursive(
    st.just({}), lambda inner: st.dictionaries(KEYS, inner, max_size=3), max_leaves=8
)


def _reference_project(document: dict[str, Any], shape: Shape) -> dict[str, Any]:
    """project as it was written before the projector: the shape walked on every call."""
    out: dict[str, Any] = {}
    for key, deeper in shape.items():
        if key in document:
            value = document[key]
            out[key] = _reference_project(value, deeper) if deeper and isinstance(value, dict) else value
    return out


@settings(max_examples=300, deadline=None)  # equivalence, not timing: a loaded machine must not fail it
@given(st.dictionaries(KEYS, DOCUMENTS, max_size=5), SHAPES)
def test_a_projector_cuts_as_the_plain_walk_does(document: dict[str, Any], shape: Shape) -> None:
    assert projector(shape)(document) == _reference_project(document, shape)
    assert project(document, shape) == _reference_project(document, shape)


def _reference(value: Any) -> Any:
    """to_plain as it was written before its fast path."""
    if isinstance(value, (set, frozenset)):
        items = [_reference(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
    if isinstance(value, dict):
        return {k: _reference(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_reference(v) for v in value]
    return value


class _Dict(dict):  # type: ignore[type-arg]
    """A subclass: the fast path checks exact types, the fallback must still convert it."""


HASHABLE = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=4)
REGO_VALUES: st.SearchStrategy[Any] = st.recursive(
    SCALARS | st.frozensets(HASHABLE, max_size=4) | st.sets(HASHABLE, max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=2).map(_Dict)
        | st.tuples(inner)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)  # equivalence, not timing: a loaded machine must not fail it
@given(REGO_VALUES)
def test_to_plain_gives_what_the_plain_walk_gives(value: Any) -> None:
    converted = to_plain(value)
    assert converted == _reference(value)
    assert type(converted) is type(_reference(value))
