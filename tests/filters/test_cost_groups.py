"""The cost filter sizes and splits a request's spans per (tool, new) group: the same tokens per
(tool, direction) as sizing and splitting every span on its own and adding them up, because a
span's tokens are linear in its characters and the split is linear in its tokens."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.filters.cost import CostFilter, _Prompt
from sidecar.model import TokenUsage
from sidecar.telemetry.tokens import Direction, span_tokens, split_input

Spent = dict[tuple[str | None, Direction], float]

spans = st.lists(
    st.tuples(st.sampled_from(["grep", "read_file", "run_tests", None]), st.integers(0, 5_000), st.booleans()),
    max_size=12,
)
usages = st.builds(
    TokenUsage,
    input=st.integers(0, 200_000),
    cache_read=st.integers(0, 200_000),
    cache_write=st.integers(0, 50_000),
    output=st.integers(0, 4_000),
)


def per_span(listed: list[tuple[str | None, int, bool]], request: int, usage: TokenUsage, first: TokenUsage) -> Spent:
    """The definition: every span's tokens from the agent's reply (`first`), split on its own."""
    tokens = span_tokens(first.input, [size for _, size, _ in listed], request)
    new = [is_new for _, _, is_new in listed] if usage is first else [False] * len(listed)
    spent: defaultdict[tuple[str | None, Direction], float] = defaultdict(float)
    for (tool, _, _), directions in zip(listed, split_input(usage, tokens, new), strict=True):
        for direction, amount in directions.items():
            spent[(tool, direction)] += amount
    return dict(spent)


def grouped(listed: list[tuple[str | None, int, bool]], request: int, replies: list[TokenUsage]) -> list[Spent]:
    groups: defaultdict[tuple[str | None, bool], int] = defaultdict(int)
    for tool, size, is_new in listed:
        groups[(tool, is_new)] += size
    prompt = _Prompt(dict(groups), request)
    out = []
    for usage in replies:
        spent: defaultdict[tuple[str | None, Direction], float] = defaultdict(float)
        CostFilter._input(prompt, usage, spent)
        out.append(dict(spent))
    return out


def same(got: Spent, want: Spent) -> None:
    assert got.keys() == want.keys()
    for pair, amount in want.items():
        assert got[pair] == pytest.approx(amount, rel=1e-9, abs=1e-9), pair


@settings(max_examples=300, deadline=None)
@given(spans, st.integers(0, 60_000), usages, usages)
def test_groups_give_what_every_span_alone_gives(
    listed: list[tuple[str | None, int, bool]], request: int, agent: TokenUsage, repair: TokenUsage
) -> None:
    agents_reply, repair_round = grouped(listed, request, [agent, repair])
    same(agents_reply, per_span(listed, request, agent, agent))
    # A repair round: the agent's request is history, at the sizes of the agent's reply.
    same(repair_round, per_span(listed, request, repair, agent))
