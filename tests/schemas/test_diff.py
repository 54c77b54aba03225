"""The declaration diff: what a reviewer must see, and never an empty diff for a real change."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.model import ToolDeclaration, canonical_json
from sidecar.schemas.diff import ChangeKind, diff_declarations, diff_tool_sets

BASE = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Words to look for"},
        "status": {"type": "string", "enum": ["open", "closed"], "description": "Ticket state"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        "customer": {
            "type": "object",
            "properties": {"email": {"type": "string", "format": "email"}},
            "required": ["email"],
        },
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    },
    "required": ["query"],
}


def decl(schema: dict[str, Any], description: str = "Find tickets") -> ToolDeclaration:
    return ToolDeclaration.create("tickets_search", schema, description)


def changed(**props: Any) -> dict[str, Any]:
    return {**BASE, "properties": {**BASE["properties"], **props}}


def lines(before: dict[str, Any], after: dict[str, Any], **kw: Any) -> list[str]:
    return [c.text() for c in diff_declarations(decl(before), decl(after, **kw))]


def test_identical_and_reordered_declarations_have_no_diff() -> None:
    assert lines(BASE, BASE) == []
    reordered = {k: BASE[k] for k in reversed(list(BASE))}
    assert lines(BASE, reordered) == []


def test_renamed_parameter() -> None:
    props = dict(BASE["properties"])
    props["text"] = props.pop("query")
    after = {**BASE, "properties": props, "required": ["text"]}
    [change] = diff_declarations(decl(BASE), decl(after))
    assert change.kind is ChangeKind.FIELD_RENAMED
    assert change.text() == "~ tickets_search: query renamed to text (same schema)"


def test_renamed_and_retyped_is_a_removal_and_an_addition() -> None:
    props = dict(BASE["properties"])
    del props["limit"]
    props["max_results"] = {"type": "string"}
    assert lines(BASE, {**BASE, "properties": props}) == [
        "- tickets_search limit: integer",
        "+ tickets_search max_results: string, optional",
    ]


def test_added_and_removed_enum_members() -> None:
    after = changed(status={"type": "string", "enum": ["open", "pending"], "description": "Ticket state"})
    assert lines(BASE, after) == [
        '~ tickets_search status: enum + "pending"',
        '~ tickets_search status: enum - "closed"',
    ]
    reordered = changed(status={"type": "string", "enum": ["closed", "open"], "description": "Ticket state"})
    [change] = diff_declarations(decl(BASE), decl(reordered))
    assert change.keyword == "enum order"


def test_changed_types_also_through_nullable_unions() -> None:
    assert lines(BASE, changed(limit={"type": "number", "minimum": 1, "maximum": 100})) == [
        "~ tickets_search limit: type integer -> number"
    ]
    nullable = changed(query={"anyOf": [{"type": "string"}, {"type": "null"}], "description": "Words to look for"})
    assert lines(BASE, nullable) == ["~ tickets_search query: type string -> [null, string]"]


def test_descriptions_required_and_keywords() -> None:
    after = changed(
        query={"type": "string", "description": "Words to find"},
        limit={"type": "integer", "minimum": 1, "maximum": 50},
    )
    after["required"] = ["query", "limit"]
    assert lines(BASE, after, description="Find support tickets") == [
        '~ tickets_search: description "Find tickets" -> "Find support tickets"',
        '~ tickets_search query: description "Words to look for" -> "Words to find"',
        "~ tickets_search limit: now required",
        "~ tickets_search limit: maximum 100 -> 50",
    ]


def test_nested_fields_are_named_by_path() -> None:
    after = changed(
        customer={"type": "object", "properties": {"email": {"type": "string"}}, "required": []},
        items={"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "integer"}}}},
    )
    assert lines(BASE, after) == [
        "~ tickets_search customer.email: now optional",
        '~ tickets_search customer.email: format "email" -> (none)',
        "~ tickets_search items[*].sku: type string -> integer",
    ]


def test_definitions() -> None:
    before = {"type": "object", "properties": {"c": {"$ref": "#/$defs/C"}}, "$defs": {"C": {"type": "string"}}}
    after = {**before, "$defs": {"C": {"type": "integer"}, "D": {"type": "string"}}}
    assert lines(before, after) == [
        "~ tickets_search /$defs/C: type string -> integer",
        '~ tickets_search /$defs/D: definition (none) -> {"type":"string"}',
    ]


def test_tool_sets() -> None:
    a, b = decl(BASE), ToolDeclaration.create("payments_refund", {"type": "object", "properties": {}}, "Refund")
    changes = diff_tool_sets({"tickets_search": a}, {"payments_refund": b})
    assert [c.text() for c in changes] == ["- tool tickets_search", "+ tool payments_refund"]
    assert diff_tool_sets({"tickets_search": a}, {"tickets_search": a}) == []


def test_changes_serialise_with_their_text() -> None:
    [change] = diff_declarations(decl(BASE), decl(changed(limit={"type": "number", "minimum": 1, "maximum": 100})))
    assert change.to_json() == {
        "tool": "tickets_search",
        "kind": "type",
        "field": "limit",
        "pointer": "/properties/limit",
        "before": ["integer"],
        "after": ["number"],
        "text": "~ tickets_search limit: type integer -> number",
    }


_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["string", "integer", "a", "B"]))
_KEYS = st.sampled_from(["type", "description", "enum", "minimum", "format", "items", "required", "title", "x"])
_SCHEMA = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(_KEYS, inner, max_size=4),
        st.dictionaries(st.just("properties"), st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _SCHEMA, max_size=4), st.dictionaries(_KEYS, _SCHEMA, max_size=4))
def test_a_diff_is_empty_exactly_when_the_schemas_are_equal(before: dict[str, Any], after: dict[str, Any]) -> None:
    changes = diff_declarations(decl(before), decl(after))
    assert bool(changes) == (canonical_json(before) != canonical_json(after))
    assert all(c.text() for c in changes)
