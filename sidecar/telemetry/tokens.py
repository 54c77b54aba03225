"""What each tool costs in tokens: the reply's usage shared out among the tools (an estimate).

No provider reports tokens per tool call or per tool result; usage comes per reply, as totals.
The sidecar shares those totals out, and the metric says so in its help text:

- **output** (the model writing a call): the reply's output tokens, minus the reasoning tokens
  when the provider reports them, are shared among the reply's items by the characters the
  model wrote for each (a call: its name and arguments; text: its text; a thinking block, when
  reasoning tokens are not reported: its text). A reply whose only items are one call gives it
  every (non-reasoning) output token: exact.
- **input** (a call or result re-sent in later requests): each call and result of the request
  gets the request's input tokens times its share of the request's characters, on every
  request that carries it. Cache reads (`input_cached`) and Anthropic cache writes
  (`input_cache_write`) are split out: a cache holds prefixes of earlier prompts, so a span sent
  for the first time (in or after the latest model turn, at the end of the prompt) is not
  expected in it; the cache reads go to the history spans first (at the rate the reply reports
  for the part of the prompt that is not new), and only reads beyond what the history holds to
  the new ones (an agent repeating a request); what is not read is split between base-rate input
  and cache writes in the reply's proportion.

docs/cost.md states the method and the error measured on the recorded transcripts.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import NamedTuple

from sidecar.model import TokenUsage


class Direction(StrEnum):
    """`sidecar_tool_tokens_total{direction}`: which tokens, billed at which rate."""

    OUTPUT = "output"  # written by the model: the tool's calls
    INPUT = "input"  # its calls and results in the prompt, at the base input rate
    INPUT_CACHED = "input_cached"  # the same, read from the provider's prompt cache
    INPUT_CACHE_WRITE = "input_cache_write"  # the same, written to the cache (Anthropic)


DIRECTIONS = tuple(Direction)
INPUT_DIRECTIONS = (Direction.INPUT, Direction.INPUT_CACHED, Direction.INPUT_CACHE_WRITE)
# The members as module names: on Python 3.11 reading `Direction.INPUT` costs several times a
# global's lookup, and `split_input` reads three per span of every request.
_INPUT, _INPUT_CACHED, _INPUT_CACHE_WRITE = INPUT_DIRECTIONS


class Written(NamedTuple):
    """One item of a reply, as the output split sees it: the tool it calls (None: not a call),
    the characters the model wrote for it, and whether it is reasoning. (A named tuple: one per
    item of every reply.)"""

    tool: str | None
    size: int
    reasoning: bool = False


def output_tokens(usage: TokenUsage, items: Sequence[Written]) -> list[float]:
    """Output tokens per item (0 for items that are not calls is still returned, in order).

    Reasoning tokens, when reported, belong to the reasoning items alone; the rest is shared by
    characters among the other items. Unreported reasoning is shared like text."""
    reported = usage.reasoning > 0
    visible = max(0, usage.output - usage.reasoning) if reported else usage.output
    weights = [0 if reported and item.reasoning else max(0, item.size) for item in items]
    total = sum(weights)
    if total == 0:
        return [0.0] * len(items)
    return [visible * weight / total for weight in weights]


def span_tokens(input_tokens: int, sizes: Sequence[int], request_size: int) -> list[float]:
    """Input tokens per span: its share of the request's characters times the input tokens.
    The shares never add up to more than the whole request."""
    whole = max(request_size, sum(sizes), 1)
    return [input_tokens * size / whole for size in sizes]


def split_input(usage: TokenUsage, tokens: Sequence[float], new: Sequence[bool]) -> list[dict[Direction, float]]:
    """Each span's tokens by direction (see the module docstring): cache reads go to the spans
    re-sent from history first, then to the new ones; the rest splits like the reply's own."""
    fresh = sum(t for t, is_new in zip(tokens, new, strict=True) if is_new)
    history = max(0.0, usage.input - fresh)  # the prompt minus what is new in it
    read = float(min(usage.cache_read, usage.input))
    history_rate = min(1.0, read / history) if history > 0 else 0.0
    new_rate = min(1.0, max(0.0, read - history) / fresh) if fresh > 0 else 0.0
    not_read = usage.uncached + usage.cache_write
    write_share = usage.cache_write / not_read if not_read else 0.0
    out = []
    for amount, is_new in zip(tokens, new, strict=True):
        cached = amount * (new_rate if is_new else history_rate)
        rest = amount - cached
        out.append(
            {
                _INPUT: rest * (1 - write_share),
                _INPUT_CACHED: cached,
                _INPUT_CACHE_WRITE: rest * write_share,
            }
        )
    return out
