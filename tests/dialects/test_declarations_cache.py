"""Declarations are read once per distinct tool list (sidecar/dialects/base.py): a request that
re-declares the same tools shares them, any change to the list is read afresh, and the caller
gets a dict of its own."""

from __future__ import annotations

import copy

import pytest

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES
from sidecar.dialects.base import Dialect

TOOLS = {
    "anthropic": [{"name": "search", "description": "d", "input_schema": {"type": "object"}}],
    "chat": [
        {"type": "function", "function": {"name": "search", "description": "d", "parameters": {"type": "object"}}}
    ],
    "responses": [{"type": "function", "name": "search", "description": "d", "parameters": {"type": "object"}}],
}
DIALECTS = {"anthropic": ANTHROPIC, "chat": OPENAI_CHAT, "responses": OPENAI_RESPONSES}


@pytest.mark.parametrize("kind", list(TOOLS))
def test_same_tools_share_declarations_changed_tools_do_not(kind: str) -> None:
    dialect: Dialect = DIALECTS[kind]
    first = dialect.declarations({"tools": copy.deepcopy(TOOLS[kind])})
    again = dialect.declarations({"tools": copy.deepcopy(TOOLS[kind])})
    assert again == first and again is not first
    assert again["search"] is first["search"]  # read once
    again.pop("search")
    assert "search" in dialect.declarations({"tools": copy.deepcopy(TOOLS[kind])})  # the cache kept its own
    changed = copy.deepcopy(TOOLS[kind])
    schema = changed[0].get("input_schema") or changed[0].get("parameters") or changed[0]["function"]["parameters"]
    schema["required"] = ["q"]
    updated = dialect.declarations({"tools": changed})
    assert updated["search"].schema["required"] == ["q"]
    assert updated["search"].schema_hash != first["search"].schema_hash


def test_chat_legacy_functions_are_part_of_the_key() -> None:
    function = {"name": "lookup", "parameters": {"type": "object"}}
    tools = copy.deepcopy(TOOLS["chat"])
    assert set(OPENAI_CHAT.declarations({"tools": tools})) == {"search"}
    assert set(OPENAI_CHAT.declarations({"tools": tools, "functions": [function]})) == {"search", "lookup"}
