"""Declarations are read once per distinct tool list (sidecar/dialects/base.py): a request that
re-declares the same tools gets the same read-only `ToolList`, any change to the list is read
afresh, and a list too large to keep is read every time (never a shared one)."""

from __future__ import annotations

import copy

import pytest

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, base
from sidecar.dialects.base import Dialect
from sidecar.model import ToolList

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
    assert isinstance(first, ToolList) and again is first  # read once, one object per list
    for edit in (lambda d: d.pop("search"), lambda d: d.update({}), lambda d: d.__setitem__("x", d["search"])):
        with pytest.raises(TypeError, match="shared"):
            edit(again)
    assert set(again) == {"search"}
    copied = copy.deepcopy(again)  # a copy is a plain dict its owner may edit
    copied.pop("search")
    assert type(copied) is dict and set(again) == {"search"}
    changed = copy.deepcopy(TOOLS[kind])
    schema = changed[0].get("input_schema") or changed[0].get("parameters") or changed[0]["function"]["parameters"]
    schema["required"] = ["q"]
    updated = dialect.declarations({"tools": changed})
    assert updated["search"].schema["required"] == ["q"]
    assert updated["search"].schema_hash != first["search"].schema_hash
    assert updated is not first


@pytest.mark.parametrize("kind", list(TOOLS))
def test_a_list_too_large_to_keep_is_read_each_time_and_never_shared(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "DECLARATION_CACHE_BYTES", 10)
    dialect: Dialect = DIALECTS[kind]
    tools = copy.deepcopy(TOOLS[kind])
    (tools[0].get("function") or tools[0])["description"] = "a list no earlier test declared"
    first = dialect.declarations({"tools": copy.deepcopy(tools)})
    again = dialect.declarations({"tools": copy.deepcopy(tools)})
    assert set(first) == set(again) == {"search"}
    assert not isinstance(first, ToolList) and again is not first


def test_chat_legacy_functions_are_part_of_the_key() -> None:
    function = {"name": "lookup", "parameters": {"type": "object"}}
    tools = copy.deepcopy(TOOLS["chat"])
    assert set(OPENAI_CHAT.declarations({"tools": tools})) == {"search"}
    assert set(OPENAI_CHAT.declarations({"tools": tools, "functions": [function]})) == {"search", "lookup"}
