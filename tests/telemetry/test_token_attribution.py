"""Token attribution (sidecar/telemetry/tokens.py, the cost filter's arithmetic) against the usage
in recorded transcripts: exact where the usage pins the answer, and the measured error of the
estimate where it does not, the same numbers docs/cost.md states (checked here, row by row)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, Dialect
from sidecar.dialects.sse import SSEParser
from sidecar.filters.cost import body_characters, span_tools
from sidecar.model import Reply, SpanKind, TokenUsage
from sidecar.telemetry.tokens import Direction, Written, output_tokens, span_tokens, split_input
from tests.helpers.wire import WIRE, wire_bytes

DOC = Path(__file__).resolve().parents[2] / "docs" / "cost.md"


def dialect_of(name: str) -> Dialect:
    base = name.rsplit("/", 1)[-1]
    if base.startswith("anthropic-"):
        return ANTHROPIC
    return OPENAI_CHAT if base.startswith("openai-chat-") else OPENAI_RESPONSES


def read_reply(name: str) -> Reply:
    dialect, data = dialect_of(name), wire_bytes(name)
    if not name.endswith(".sse"):
        return dialect.read_reply(json.loads(data))
    assembler, parser = dialect.assembler(), SSEParser()
    for event in parser.feed(data) + parser.flush():
        assembler.feed(event)
    return assembler.reply()


def usage_of(name: str) -> TokenUsage:
    usage = dialect_of(name).usage(read_reply(name).envelope)
    assert usage is not None, name
    return usage


def call_output(name: str) -> list[tuple[str, float]]:
    """(tool, output tokens) per call of a recorded reply, as the cost filter attributes them."""
    dialect, reply = dialect_of(name), read_reply(name)
    items = [
        Written(
            i.call.name if i.call and i.call.kind.runs_on_client else None,
            dialect.output_size(i),
            dialect.is_reasoning(i),
        )
        for i in reply.items
    ]
    shares = output_tokens(usage_of(name), items)
    return [(item.tool, tokens) for item, tokens in zip(items, shares, strict=True) if item.tool is not None]


# ------------------------------------------------------------------------------ the arithmetic


def test_one_call_and_nothing_else_gets_every_output_token() -> None:
    assert output_tokens(TokenUsage(output=40), [Written("t", 25)]) == [40.0]


def test_reported_reasoning_belongs_to_the_reasoning_items() -> None:
    usage = TokenUsage(output=100, reasoning=60)
    assert output_tokens(usage, [Written(None, 500, reasoning=True), Written("t", 10)]) == [0.0, 40.0]


def test_unreported_reasoning_is_shared_like_text() -> None:
    assert output_tokens(TokenUsage(output=100), [Written(None, 30, reasoning=True), Written("t", 10)]) == [75.0, 25.0]


def test_output_is_shared_by_characters_written() -> None:
    shares = output_tokens(TokenUsage(output=90), [Written(None, 20), Written("a", 30), Written("b", 10)])
    assert shares == [30.0, 45.0, 15.0]


def test_nothing_written_attributes_nothing() -> None:
    assert output_tokens(TokenUsage(output=9), [Written(None, 0)]) == [0.0]


def test_spans_get_their_share_of_the_request_and_never_more_than_all_of_it() -> None:
    assert span_tokens(1000, [100, 300], 1000) == [100.0, 300.0]
    assert span_tokens(1000, [600, 600], 1000) == [500.0, 500.0]  # sizes beyond the request: scaled down
    assert span_tokens(0, [5], 0) == [0.0]


def test_without_a_cache_every_input_token_is_base_rate() -> None:
    [split] = split_input(TokenUsage(input=1000), [200.0], [True])
    assert split == {Direction.INPUT: 200.0, Direction.INPUT_CACHED: 0.0, Direction.INPUT_CACHE_WRITE: 0.0}


def test_cache_reads_go_to_history_first_and_new_spans_are_written() -> None:
    # 1000 tokens: 700 read, 250 written, 50 base. A new span (sent for the first time) of 200
    # cannot be a read; the history (800) holds all 700 reads.
    usage = TokenUsage(input=1000, cache_read=700, cache_write=250)
    old, new = split_input(usage, [100.0, 200.0], [False, True])
    assert old[Direction.INPUT_CACHED] == pytest.approx(100 * 700 / 800)
    assert new[Direction.INPUT_CACHED] == 0.0
    assert new[Direction.INPUT_CACHE_WRITE] == pytest.approx(200 * 250 / 300)
    assert new[Direction.INPUT] == pytest.approx(200 * 50 / 300)
    for split, tokens in ((old, 100.0), (new, 200.0)):
        assert sum(split.values()) == pytest.approx(tokens)


def test_reads_beyond_the_history_go_to_the_new_spans() -> None:
    # An agent repeating a request: more is read than the history holds.
    usage = TokenUsage(input=1000, cache_read=950)
    old, new = split_input(usage, [100.0, 400.0], [False, True])
    assert old[Direction.INPUT_CACHED] == pytest.approx(100.0)
    assert new[Direction.INPUT_CACHED] == pytest.approx(400 * (950 - 600) / 400)


# ------------------------------------------------------------------------------ output, recorded


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # One tool_use and nothing else: all 74 output tokens.
        ("anthropic-message-tool-use.json", [("get_weather", 74.0)]),
        # `content: null` beside the call: all 17.
        ("openai-chat-response-tool-call.json", [("lookup_population", 17.0)]),
        ("conversations/openai-chat-response-chain-1.json", [("can_have_dragons", 18.0)]),
        ("openai-responses-stream-function-call.sse", [("multiply", 23.0)]),
        # A thinking block and a call: 92 output tokens, 53 of them thinking (reported): 39.
        ("anthropic-stream-thinking-tool-use.sse", [("fixed_version", 39.0)]),
    ],
)
def test_exact_where_the_usage_pins_it(name: str, expected: list[tuple[str, float]]) -> None:
    assert call_output(name) == expected


@pytest.mark.parametrize(
    ("name", "calls", "total"),
    [
        ("anthropic-stream-tool-use-parallel-empty-input.sse", 2, 62),
        ("openai-chat-stream-tool-calls-parallel.sse", 2, 60),
        ("openai-chat-stream-tool-calls-parallel-empty-args.sse", 2, 40),
        ("openai-chat-response-tool-calls-parallel.json", 2, 60),
        # A reasoning item and five calls: 119 output tokens, 17 of them reasoning.
        ("openai-responses-response-function-calls-parallel.json", 5, 119 - 17),
    ],
)
def test_parallel_calls_without_text_share_exactly_the_visible_output(name: str, calls: int, total: int) -> None:
    """Their sum is exact; how it divides between the calls is the estimate (by characters)."""
    got = call_output(name)
    assert len(got) == calls
    assert sum(tokens for _, tokens in got) == pytest.approx(total)


# Replies with text beside their calls: a call's share is an estimate (no usage splits it): the
# output tokens times the characters the model wrote for it (name and arguments) over all it wrote.
TEXT = "I'll check the current weather in Paris for you."
WEATHER = len("get_weather") + len('{"location": "Paris"}')
PARALLEL_TEXT = 156  # the preamble before the four calls
ENTITIES = [len("retrieve_entity_info") + len(f'{{"name":"{who}"}}') for who in ("Alice", "Bob", "Charlie", "Daisy")]
SEARCH = len("Let me search for a tool that can provide current exchange rate information.")
SERVER_CALL = len("tool_search_tool_bm25") + len('{"query":"USD EUR exchange rate currency conversion"}')
FOUND = len("I found the right tool! Let me fetch the current USD to EUR exchange rate for you.")
RATE = len("get_exchange_rate") + len('{"from_currency": "USD", "to_currency": "EUR"}')
ESTIMATED_OUTPUT = {
    "anthropic-stream-tool-use.sse": (65, [("get_weather", 65 * WEATHER / (len(TEXT) + WEATHER))]),
    "anthropic-message-tool-use-parallel.json": (
        202,
        [("retrieve_entity_info", 202 * size / (PARALLEL_TEXT + sum(ENTITIES))) for size in ENTITIES],
    ),
    # The server tool's call is written by the model too (its name and query), the search result is not.
    "anthropic-stream-server-tool-and-client-tool.sse": (
        175,
        [("get_exchange_rate", 175 * RATE / (SEARCH + SERVER_CALL + FOUND + RATE))],
    ),
}


@pytest.mark.parametrize("name", sorted(ESTIMATED_OUTPUT))
def test_calls_beside_text_get_their_share_of_the_characters(name: str) -> None:
    total, expected = ESTIMATED_OUTPUT[name]
    assert usage_of(name).output == total
    got = call_output(name)
    assert [tool for tool, _ in got] == [tool for tool, _ in expected]
    assert [tokens for _, tokens in got] == pytest.approx([tokens for _, tokens in expected])


# ------------------------------------------------------------------------------ input, recorded

# Consecutive (request, reply) turns of one conversation (SOURCES.md, "Conversations").
CONVERSATIONS: dict[str, list[tuple[str, str]]] = {
    "anthropic parallel": [
        ("conversations/anthropic-request-first-parallel.json", "anthropic-stream-tool-use-parallel-empty-input.sse"),
        (
            "anthropic-request-tool-result-parallel.json",
            "conversations/anthropic-stream-after-tool-result-parallel.sse",
        ),
    ],
    "anthropic thinking": [
        ("conversations/anthropic-request-first-thinking.json", "anthropic-stream-thinking-tool-use.sse"),
        (
            "anthropic-request-thinking-tool-result.json",
            "conversations/anthropic-stream-after-thinking-tool-result.sse",
        ),
    ],
    "chat basic": [
        ("conversations/openai-chat-request-first-tool-call.json", "openai-chat-stream-tool-call.sse"),
        ("openai-chat-request-tool-message.json", "conversations/openai-chat-stream-after-tool-message.sse"),
    ],
    "chat chain": [
        ("conversations/openai-chat-request-chain-0.json", "openai-chat-response-tool-call.json"),
        ("conversations/openai-chat-request-chain-1.json", "conversations/openai-chat-response-chain-1.json"),
        ("conversations/openai-chat-request-chain-2.json", "conversations/openai-chat-response-chain-2.json"),
    ],
    "responses basic": [
        (
            "conversations/openai-responses-request-first-function-call.json",
            "openai-responses-stream-function-call.sse",
        ),
        (
            "openai-responses-request-function-call-output.json",
            "conversations/openai-responses-stream-after-function-call-output.sse",
        ),
    ],
    "responses reasoning": [
        *(
            (
                f"conversations/openai-responses-request-interleaved-{i}.json",
                f"conversations/openai-responses-response-interleaved-{i}.json",
            )
            for i in range(3)
        ),
        (
            "conversations/openai-responses-request-interleaved-3.json",
            "openai-responses-response-function-calls-parallel.json",
        ),
    ],
}


@dataclass(frozen=True)
class Step:
    """One request after the first: what the estimate gives its newest calls and results, and
    how much the prompt really grew since the previous request (exact, from the usage)."""

    conversation: str
    number: int
    characters: int
    input_tokens: int
    estimate: float  # tokens attributed to the calls and results of the newest turn
    growth: int  # input tokens of this request minus those of the previous one

    def row(self) -> str:
        error = (self.estimate - self.growth) / self.growth * 100
        return (
            f"| {self.conversation} | {self.number} | {self.characters} | {self.input_tokens} "
            f"| {self.estimate:.1f} | {self.growth} | {error:+.0f}% |"
        )


def steps() -> list[Step]:
    out = []
    for conversation, turns in CONVERSATIONS.items():
        previous: TokenUsage | None = None
        for number, (request, reply) in enumerate(turns):
            dialect, body = dialect_of(request), wire_bytes(request)
            usage = usage_of(reply)
            spans = dialect.tool_spans(json.loads(body))
            tokens = span_tokens(usage.input, [s.size for s in spans], body_characters(body))
            newest = sum(t for t, s in zip(tokens, spans, strict=True) if s.latest)
            if previous is not None:
                out.append(
                    Step(conversation, number, body_characters(body), usage.input, newest, usage.input - previous.input)
                )
            previous = usage
    return out


def test_the_recorded_conversations_are_consecutive_turns() -> None:
    """Each request repeats the previous one's messages and adds the model's turn and results."""
    for turns in CONVERSATIONS.values():
        for (before, _), (after, _) in itertools.pairwise(turns):
            key = "messages" if "messages" in json.loads(wire_bytes(before)) else "input"
            old, new = json.loads(wire_bytes(before))[key], json.loads(wire_bytes(after))[key]
            assert new[: len(old)] == old and len(new) > len(old), (before, after)


def test_every_request_is_sized_and_its_results_named_by_their_calls() -> None:
    for turns in CONVERSATIONS.values():
        for request, _ in turns[1:]:
            spans = dialect_of(request).tool_spans(json.loads(wire_bytes(request)))
            assert {s.kind for s in spans} == {SpanKind.CALL, SpanKind.RESULT}
            assert all(tool for tool in span_tools(spans, {})), request
            assert sum(s.size for s in spans) < body_characters(wire_bytes(request))


def test_docs_state_the_measured_error_on_every_recorded_conversation() -> None:
    """docs/cost.md's table is what this code measures on these transcripts, row for row."""
    doc = DOC.read_text()
    missing = [step.row() for step in steps() if step.row() not in doc]
    assert missing == [], "update the table in docs/cost.md:\n" + "\n".join(missing)


def test_the_conversation_files_are_all_used() -> None:
    used = {name for turns in CONVERSATIONS.values() for pair in turns for name in pair}
    on_disk = {f"conversations/{p.name}" for p in (WIRE / "conversations").iterdir()}
    assert on_disk <= used
