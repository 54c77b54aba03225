"""Hiding tools (policy `visible_tools`) keeps every request valid for its provider."""

from __future__ import annotations

import pytest

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES

SCHEMA = {"type": "object", "properties": {}}
CASES = {
    "anthropic": (
        ANTHROPIC,
        [
            {"name": "a", "input_schema": SCHEMA},
            {"name": "b", "input_schema": SCHEMA},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
        {"type": "tool", "name": "b"},
    ),
    "chat": (
        OPENAI_CHAT,
        [
            {"type": "function", "function": {"name": "a", "parameters": SCHEMA}},
            {"type": "function", "function": {"name": "b", "parameters": SCHEMA}},
        ],
        {"type": "function", "function": {"name": "b"}},
    ),
    "responses": (
        OPENAI_RESPONSES,
        [
            {"type": "function", "name": "a", "parameters": SCHEMA},
            {"type": "function", "name": "b", "parameters": SCHEMA},
            {"type": "web_search"},
        ],
        {"type": "function", "name": "b"},
    ),
}


@pytest.mark.parametrize("kind", CASES)
def test_hidden_tool_and_the_choice_forcing_it_are_removed(kind):
    dialect, tools, forced = CASES[kind]
    body = {"model": "m", "tools": tools, "tool_choice": forced, "parallel_tool_calls": False}
    out = dialect.hide_tools(body, {"b"})
    assert set(dialect.declarations(out)) == {"a"}
    assert "tool_choice" not in out
    assert len(out["tools"]) == len(tools) - 1  # server tools stay
    assert body["tools"] == tools  # the agent's body is not mutated


@pytest.mark.parametrize("kind", CASES)
def test_choice_of_a_visible_tool_is_kept(kind):
    dialect, tools, forced = CASES[kind]
    out = dialect.hide_tools({"tools": tools, "tool_choice": forced}, {"a"})
    assert out["tool_choice"] == forced


@pytest.mark.parametrize("kind", ["anthropic", "chat"])
def test_no_tool_left_means_no_tool_fields(kind):
    dialect, tools, forced = CASES[kind]
    client_only = [t for t in tools if dialect.client_tool_name(t)]
    out = dialect.hide_tools({"tools": client_only, "tool_choice": forced, "parallel_tool_calls": True}, {"a", "b"})
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(out)
