"""`Dialect.request_results` / `replace_results` on the recorded requests of the three
protocols: every tool result is found (history included), in the order `read_request` reads
the latest ones, and a rewrite replaces exactly one result's content, never the input."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, Dialect
from sidecar.dialects.openai_chat import legacy_history_id
from sidecar.inspection import MarkerSet, ResultInspector, ToolProfile
from tests.helpers.strategies import WIRE_JSON, mutated
from tests.helpers.wire import wire_json

RECORDED = [
    (ANTHROPIC, "anthropic-request-thinking-tool-result.json"),
    (ANTHROPIC, "anthropic-request-tool-result-parallel.json"),
    (OPENAI_CHAT, "openai-chat-request-tool-message.json"),
    (OPENAI_CHAT, "openai-chat-request-tool-messages-parallel.json"),
    (OPENAI_RESPONSES, "openai-responses-request-function-call-output.json"),
]


@pytest.mark.parametrize(("dialect", "name"), RECORDED, ids=[n for _, n in RECORDED])
def test_every_result_is_found_and_the_latest_are_the_last(dialect: Dialect, name: str) -> None:
    body = wire_json(name)
    found = dialect.request_results(body)
    latest = dialect.read_request(body).results
    assert found and latest
    assert found[-len(latest) :] == latest


@pytest.mark.parametrize(("dialect", "name"), RECORDED, ids=[n for _, n in RECORDED])
def test_replacing_one_result_changes_that_result_only(dialect: Dialect, name: str) -> None:
    body = wire_json(name)
    pristine = copy.deepcopy(body)
    results = dialect.request_results(body)
    last = len(results) - 1
    rewritten = dialect.replace_results(body, {last: '{"status":"withheld"}'})
    assert body == pristine  # the agent's body is untouched
    after = dialect.request_results(rewritten)
    assert [r.call_id for r in after] == [r.call_id for r in results]
    assert after[last].content == '{"status":"withheld"}'
    assert [r.content for r in after[:last]] == [r.content for r in results[:last]]
    # Nothing else moved: put the old content back and the bodies are equal again.
    assert dialect.replace_results(rewritten, {last: results[last].content}) == pristine
    # The rewritten body reads as the same conversation (ids, calls, declarations).
    view, again = dialect.read_request(rewritten), dialect.read_request(body)
    assert [r.call_id for r in view.results] == [r.call_id for r in again.results]
    assert view.echoed_calls == again.echoed_calls and view.declarations == again.declarations


SECRET = "AKIAIOSFODNN7EXAMPLE"


def _redacted(dialect: Dialect, body: dict[str, Any]) -> dict[str, Any]:
    """Inspect every result and write the redactions back, as the result policy does."""
    inspector = ResultInspector()
    contents = {}
    for position, result in enumerate(dialect.request_results(body)):
        found = inspector.inspect(result.content, result.size, ToolProfile(), MarkerSet.from_data(None))
        if found.spans:
            contents[position] = inspector.redact(result.content, found)
    return dialect.replace_results(body, contents)


def test_anthropic_string_and_block_list_contents() -> None:
    body = wire_json("anthropic-request-tool-result-parallel.json")
    [first, second] = [i for i, _ in enumerate(ANTHROPIC.request_results(body))]
    blocks = [
        {"type": "text", "text": f"key {SECRET} here"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    ]
    body = ANTHROPIC.replace_results(body, {first: f"id={SECRET}", second: blocks})
    out = _redacted(ANTHROPIC, body)
    assert SECRET not in orjson.dumps(out).decode()
    [a, b] = ANTHROPIC.request_results(out)
    assert a.content == "id=[REDACTED: secret_in_result]"
    assert b.content == [{**blocks[0], "text": "key [REDACTED: secret_in_result] here"}, blocks[1]]


def test_anthropic_history_results_are_found_in_every_user_turn() -> None:
    body = {
        "model": "claude-test",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "a", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "old"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "a", "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "tool_result", "tool_use_id": "t2"}]},
        ],
    }
    assert [(r.call_id, r.content) for r in ANTHROPIC.request_results(body)] == [("t1", "old"), ("t2", "")]
    rewritten = ANTHROPIC.replace_results(body, {0: "notice", 1: "notice 2"})
    assert rewritten["messages"][2]["content"][0]["content"] == "notice"
    assert rewritten["messages"][4]["content"][1] == {"type": "tool_result", "tool_use_id": "t2", "content": "notice 2"}
    assert rewritten["messages"][1] is body["messages"][1]  # only the paths to the results are copied


def test_chat_tool_parts_and_legacy_function_messages() -> None:
    body = {
        "model": "gpt-test",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": "{}"}},
            {"role": "function", "name": "lookup", "content": f"token {SECRET}"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": f"aws={SECRET}"}]},
        ],
    }
    results = OPENAI_CHAT.request_results(body)
    assert [r.call_id for r in results] == [legacy_history_id(1), "c1"]
    assert OPENAI_CHAT.read_request(body).results == results[1:]
    out = _redacted(OPENAI_CHAT, body)
    assert SECRET not in orjson.dumps(out).decode()
    assert out["messages"][2]["content"] == "token [REDACTED: secret_in_result]"
    assert out["messages"][4]["content"] == [{"type": "text", "text": "aws=[REDACTED: secret_in_result]"}]


def test_responses_string_and_part_list_outputs() -> None:
    body = {
        "model": "gpt-test",
        "input": [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": f"k={SECRET}"},
            {"type": "function_call", "call_id": "c2", "name": "a", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": SECRET}]},
            {"type": "custom_tool_call", "call_id": "c3", "name": "run", "input": "ls"},
            {"type": "custom_tool_call_output", "call_id": "c3", "output": f"env: AWS={SECRET}"},
        ],
    }
    assert [r.call_id for r in OPENAI_RESPONSES.request_results(body)] == ["c1", "c2", "c3"]
    assert OPENAI_RESPONSES.read_request(body).results == OPENAI_RESPONSES.request_results(body)[2:]
    out = _redacted(OPENAI_RESPONSES, body)
    assert SECRET not in orjson.dumps(out).decode()
    assert out["input"][2]["output"] == "k=[REDACTED: secret_in_result]"
    assert out["input"][4]["output"] == [{"type": "input_text", "text": "[REDACTED: secret_in_result]"}]
    assert out["input"][6]["output"] == "env: AWS=[REDACTED: secret_in_result]"
    assert OPENAI_RESPONSES.request_results({"model": "m", "input": "just text"}) == []


@pytest.mark.parametrize("dialect", [ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES], ids=lambda d: d.name)
def test_any_body_gives_results_the_inspector_reads_and_a_rewrite_leaves_the_rest(dialect: Dialect) -> None:
    """Random JSON mixed into requests that carry results: finding, inspecting, redacting and
    replacing never raise, and the rewrite touches the results only."""
    base = {
        ANTHROPIC.name: wire_json("anthropic-request-tool-result-parallel.json"),
        OPENAI_CHAT.name: wire_json("openai-chat-request-tool-messages-parallel.json"),
        OPENAI_RESPONSES.name: wire_json("openai-responses-request-function-call-output.json"),
    }[dialect.name]
    inspector = ResultInspector()
    markers = MarkerSet.from_data(None)

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(body=mutated(base, WIRE_JSON))
    def run(body: dict[str, Any]) -> None:
        pristine = copy.deepcopy(body)
        results = dialect.request_results(body)
        contents = {}
        for position, result in enumerate(results):
            found = inspector.inspect(result.content, result.size, ToolProfile(untrusted=True), markers)
            contents[position] = inspector.redact(result.content, found) if found.spans else "withheld"
        rewritten = dialect.replace_results(body, contents)
        assert body == pristine
        assert [r.content for r in dialect.request_results(rewritten)] == list(contents.values())
        restored = dialect.replace_results(rewritten, {i: r.content for i, r in enumerate(results)})
        assert restored == pristine

    run()
