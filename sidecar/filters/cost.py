"""The cost filter: tokens per tool (`sidecar_tool_tokens_total{tool,direction}`), an estimate.

It sizes every tool call and result the agent's request carries (the dialect's `tool_spans`,
a walk over what was already parsed; each payload is written with orjson to count its
characters) and names each by the call it answers. Every reply, the agent's and each repair
round's, has its usage shared out (sidecar/telemetry/tokens.py): its output tokens among the
calls it makes, its input tokens among the spans of the prompt. A repair round re-sends the
agent's request, so its spans are counted again at the sizes estimated for the agent's own
request; what the round adds (the refused call and the sidecar's answer) is not attributed as
input.

The request is sized in `on_sent`, once it went upstream, while the provider works on it and
its objects are most likely still in the CPU's caches. The sharing is done after `on_done`,
once the agent has its answer. The filter only observes, so the agent waits for neither. Ended
exchanges are attributed in batches, and before every read of the metrics, so a scrape or
`/v1/status` never misses one (sidecar/telemetry/batched.py).
A batch's tokens are added up per (tool, direction) and counted once per batch: an exchange
attributes tokens to a dozen pairs or more, and each count is a label lookup, an increment
held for the next read (sidecar/telemetry/pending.py) and a share of the per-tool totals' lock.

Why the sizing is not in the batch too: there it walked the request long after it was parsed,
most likely from memory the other exchanges had since evicted from the caches (callgrind's
cache simulation, first and last level only, does not show it: bench/README.md). Whole
Anthropic replies at c=64, py-spy's share of all samples, two runs each (bench/README.md):
sizing 4.5% in the batch against 2.8-3.1% in `on_sent`, and the whole filter 9.7-9.8% against
5.5-6.1%.

Not attributed as input: requests that continue a conversation the provider holds
(`previous_response_id`, `conversation`): their input tokens cover history the body does not
carry, so no share of the body says what a span costs. Replies that did not complete (an
error mid-stream) are not counted either.

Best-effort, after the results filter (it names results by the ledger's call when the
request does not echo the call).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sidecar.exchange.filters import Filter
from sidecar.exchange.state import End, Exchange, ExchangeKey
from sidecar.model import Reply, SpanKind, TokenUsage, ToolSpan
from sidecar.telemetry.batched import Batched
from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.tokens import Direction, Written, output_tokens, span_tokens, split_input

log = logging.getLogger("sidecar.cost")


@dataclass(slots=True)
class _Prompt:
    """The agent's request as the input split needs it: the characters of its spans summed per
    (tool, new) group, and the first reply's tokens per group.

    A span's input tokens are the reply's input tokens times its share of the request's
    characters, and the split by direction is linear in them with rates that depend only on
    whether the span is new: so a group is sized and split once, as the sum of its spans."""

    groups: dict[tuple[str | None, bool], int]
    size: int  # the request's characters (`span_tokens` shares out at least the spans' sum)
    tokens: list[float] | None = None


@dataclass(slots=True)
class _Heard:
    """What the exchange showed the filter, kept for `on_done`."""

    prompt: _Prompt | None = None  # the agent's request as it went upstream, sized
    replies: list[Reply] = field(default_factory=list)  # the complete ones, in order


class _Read(NamedTuple):
    """A complete reply as the shares need it: its usage, and the items it wrote when it
    called a tool of the agent's (None: no output to share among tools)."""

    usage: TokenUsage
    written: list[Written] | None


@dataclass(slots=True)
class _Ended:
    """An exchange to attribute in the batch: what `on_done` read of it, not the exchange, so
    the exchange (its parsed request and replies) is freed when it ends, not in the batch
    (sidecar/telemetry/batched.py)."""

    exchange_id: str
    prompt: _Prompt | None
    replies: list[_Read]


_HEARD: ExchangeKey[_Heard] = ExchangeKey("cost.heard")


def body_characters(body: bytes) -> int:
    """The request's length in characters (spans are measured in characters too)."""
    return len(body) if body.isascii() else len(body.decode("utf-8", "replace"))


# Enum members read once per span or item, as module names (cheaper on Python 3.11, as in
# sidecar/telemetry/tokens.py).
_CALL = SpanKind.CALL
_OUTPUT = Direction.OUTPUT


def span_tools(spans: list[ToolSpan], ledger: dict[str, str | None]) -> list[str | None]:
    """Each span's tool: a call's own name; a result by the call it answers (echoed in the
    request, else known to the ledger), else the name the result itself carries."""
    called = {s.call_id: s.name for s in spans if s.kind is _CALL}
    return [s.name if s.kind is _CALL else called.get(s.call_id) or ledger.get(s.call_id) or s.name for s in spans]


class CostFilter(Filter):
    name = "cost"

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._ended: Batched[_Ended] = Batched(metrics, self._attribute, self._failed, self._count)
        # The batch's tokens so far, by (tool, direction): each exchange's, once attributed whole.
        self._spent: defaultdict[tuple[str | None, Direction], float] = defaultdict(float)

    async def on_sent(self, ex: Exchange) -> None:
        # Only the model path sends this (tokens are a model's: an MCP request spends none).
        ex.setdefault(_HEARD, _Heard).prompt = self._prompt(ex, ex.request)

    async def on_reply(self, ex: Exchange, reply: Reply) -> None:
        if reply.complete:
            ex.setdefault(_HEARD, _Heard).replies.append(reply)

    async def on_done(self, ex: Exchange, end: End) -> None:
        heard = ex.get(_HEARD)
        if heard is None or not heard.replies:
            return
        dialect = ex.model_dialect
        read = []
        for reply in heard.replies:
            usage = dialect.usage(reply.envelope)
            if usage is not None:
                read.append(_Read(usage, self._written(ex, reply)))
        if read:
            self._ended.add(_Ended(ex.id, heard.prompt, read))

    def _failed(self, ended: _Ended) -> None:
        log.exception("token attribution failed for exchange %s", ended.exchange_id)
        self.metrics.filter_error(self.name, "on_done", critical=False)

    def _attribute(self, ended: _Ended) -> None:
        prompt = ended.prompt
        spent: defaultdict[tuple[str | None, Direction], float] = defaultdict(float)
        for usage, written in ended.replies:
            if written is not None:
                self._output(usage, written, spent)
            if prompt is not None:
                self._input(prompt, usage, spent)
        batch = self._spent
        for pair, tokens in spent.items():
            if tokens >= 0:  # a NaN or a negative share is never counted (nor summed with others)
                batch[pair] += tokens

    def _count(self) -> None:
        """The batch's tokens, to the metrics (`Batched`'s finish)."""
        spent, self._spent = self._spent, defaultdict(float)
        try:
            # str() of a StrEnum is its value, in C (`.value` is a property written in Python).
            self.metrics.tool_tokens_spent((tool, str(d), tokens) for (tool, d), tokens in spent.items())
        except Exception:
            log.exception("counting the tokens of %d (tool, direction) pairs failed", len(spent))
            self.metrics.filter_error(self.name, "on_done", critical=False)

    @staticmethod
    def _prompt(ex: Exchange, request: dict[str, Any]) -> _Prompt | None:
        """The request's spans, named and sized; None when no share of the body can be said."""
        dialect = ex.model_dialect
        if dialect.history_at_provider(request):
            return None
        spans = dialect.tool_spans(request)
        if not spans:
            return None
        ledger = {r.call_id: r.tool for r in ex.results}
        repeated = {r.call_id for r in ex.results if r.resent}  # the agent sends a request again
        groups: defaultdict[tuple[str | None, bool], int] = defaultdict(int)
        for tool, span in zip(span_tools(spans, ledger), spans, strict=True):
            groups[(tool, span.latest and span.call_id not in repeated)] += span.size
        return _Prompt(groups, body_characters(ex.body))

    @staticmethod
    def _written(ex: Exchange, reply: Reply) -> list[Written] | None:
        """The reply's items as the output share sees them; None when it calls no tool of the
        agent's (its output tokens go to no tool)."""
        if not reply.client_calls:
            return None
        dialect = ex.model_dialect
        # A server call's characters share the output like text: no tool of the agent's wrote them.
        return [
            Written(
                item.call.name if item.call and item.call.kind.runs_on_client else None,
                dialect.output_size(item),
                dialect.is_reasoning(item),
            )
            for item in reply.items
        ]

    @staticmethod
    def _output(
        usage: TokenUsage, items: list[Written], spent: defaultdict[tuple[str | None, Direction], float]
    ) -> None:
        for item, tokens in zip(items, output_tokens(usage, items), strict=True):
            if item.tool is not None:
                spent[(item.tool, _OUTPUT)] += tokens

    @staticmethod
    def _input(prompt: _Prompt, usage: TokenUsage, spent: defaultdict[tuple[str | None, Direction], float]) -> None:
        groups = prompt.groups
        if prompt.tokens is None:  # the agent's own request
            prompt.tokens = span_tokens(usage.input, list(groups.values()), prompt.size)
            new = [is_new for _, is_new in groups]
        else:  # a repair round: the agent's request is the history of its prompt
            new = [False] * len(groups)
        split = split_input(usage, prompt.tokens, new)
        for (tool, _), directions in zip(groups, split, strict=True):
            for direction, tokens in directions.items():
                spent[(tool, direction)] += tokens
