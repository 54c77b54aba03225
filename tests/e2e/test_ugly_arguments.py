"""The ugly-argument set, through the SDK clients, for the three protocols, streaming and not.

Each case: the model sends one bad value, the sidecar refuses it with the structured error
(field, problem about the actual value, expected constraint), the model corrects itself, and
the agent receives only the corrected call.
"""

from __future__ import annotations

import pytest

from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS

SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 2, "maxLength": 20},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Max results"},
        "score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "status": {"type": "string", "enum": ["OPEN", "CLOSED"]},
        "since": {"type": "string", "format": "date"},
        "note": {"type": "string"},
        "sku": {"type": "string", "pattern": "^SKU-[0-9]+$"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"],
            },
        },
        "customer": {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}},
    },
    "required": ["query"],
}
TOOLS = {"orders_search": SCHEMA}
GOOD = {"query": "refund", "limit": 10}

# name: (bad extra arguments, expected field, words of the problem, words of the expectation)
CASES = {
    "number-as-string": ({"limit": "10"}, "limit", 'got string "10"', "integer between 1 and 100 — Max results"),
    "enum-wrong-case": ({"status": "open"}, "status", 'did you mean "OPEN"', '"OPEN", "CLOSED"'),
    "explicit-null": ({"note": None}, "note", "null is not allowed", "string"),
    "below-minimum": ({"limit": 0}, "limit", "less than the minimum 1", "between 1 and 100"),
    "above-maximum": ({"limit": 101}, "limit", "greater than the maximum 100", "between 1 and 100"),
    "at-exclusive-minimum": ({"score": 0}, "score", "exclusive minimum 0", "greater than 0"),
    "at-exclusive-maximum": ({"score": 1}, "score", "exclusive maximum 1", "less than 1"),
    "below-min-length": ({"query": "a"}, "query", "fewer than the minimum 2", "2 to 20 characters"),
    "above-max-length": ({"query": "x" * 21}, "query", "more than the maximum 20", "2 to 20 characters"),
    "below-min-items": ({"tags": []}, "tags", "0 items", "1 to 3 items"),
    "above-max-items": ({"tags": ["a", "b", "c", "d"]}, "tags", "4 items", "1 to 3 items"),
    "pattern": ({"sku": "12"}, "sku", "does not match the pattern", "^SKU-[0-9]+$"),
    "undeclared-property": ({"colour": "red"}, "colour", 'unknown property "colour"', "declared properties"),
    "date-as-free-text": ({"since": "next Tuesday"}, "since", '"next Tuesday" is not a valid date', "YYYY-MM-DD"),
    "nested-object": ({"customer": {"email": "nope"}}, "customer.email", "not a valid email", "email address"),
    "array-of-objects": (
        {"items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 1}, {"sku": "c", "qty": 0}]},
        "items[2].qty",
        "less than the minimum 1",
        "at least 1",
    ),
}
PROTOCOLS = [(kind, stream) for kind in AGENTS for stream in (False, True)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("kind", "stream"), PROTOCOLS, ids=[f"{k}-{'stream' if s else 'whole'}" for k, s in PROTOCOLS])
async def test_ugly_argument_is_refused_then_corrected(model, sidecar, kind, stream, case):
    extra, field, problem, expected = CASES[case]
    bad = {"query": "refund", **extra}
    model.add_turns(
        [Turn(tool_calls=[ToolCallSpec("orders_search", bad)]), Turn(tool_calls=[ToolCallSpec("orders_search", GOOD)])]
    )
    received = await AGENTS[kind](sidecar.proxy_url, TOOLS).ask(stream)

    assert received.calls == [("orders_search", GOOD)]
    [told] = AGENTS[kind].tool_outputs(model.model_requests[1])
    assert told["status"] == "invalid_arguments" and told["retryable"] is True
    error = next(e for e in told["errors"] if e["field"] == field)
    assert problem in error["problem"]
    assert expected in error["expected"]


@pytest.mark.parametrize(("kind", "stream"), PROTOCOLS, ids=[f"{k}-{'stream' if s else 'whole'}" for k, s in PROTOCOLS])
async def test_omitted_optional_field_is_fine(model, sidecar, kind, stream):
    model.add_turns([Turn(tool_calls=[ToolCallSpec("orders_search", {"query": "refund"})])])
    received = await AGENTS[kind](sidecar.proxy_url, TOOLS).ask(stream)
    assert received.calls == [("orders_search", {"query": "refund"})]
    assert len(model.model_requests) == 1
