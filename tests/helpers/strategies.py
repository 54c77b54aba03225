"""Hypothesis strategies shared by the robustness tests: arbitrary JSON, wire-shaped bodies."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Integers as `loads` delivers them: orjson reads beyond 64 bits as floats.
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)

JSON: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)

# Keys the dialects look at, so random objects often hit the interesting branches.
WIRE_KEYS = st.sampled_from(
    [
        "type",
        "role",
        "content",
        "text",
        "name",
        "id",
        "input",
        "arguments",
        "function",
        "tool_calls",
        "choices",
        "message",
        "delta",
        "index",
        "output",
        "output_index",
        "item",
        "response",
        "call_id",
        "tool_use_id",
        "content_block",
        "partial_json",
        "usage",
        "error",
        "finish_reason",
        "stop_reason",
        "messages",
        "tools",
        "input_schema",
        "parameters",
        "tool_choice",
        "stream",
        "model",
        "system",
        "metadata",
        "user",
        "instructions",
        "previous_response_id",
        "store",
        "sequence_number",
        "status",
    ]
)
WIRE_TYPES = st.sampled_from(
    [
        "tool_use",
        "text",
        "tool_result",
        "function",
        "function_call",
        "function_call_output",
        "message",
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "input_json_delta",
        "text_delta",
        "response.created",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.output_item.done",
        "response.completed",
        "error",
        "custom",
        "thinking",
        "signature_delta",
        "citations_delta",
    ]
)

WIRE_JSON: st.SearchStrategy[Any] = st.recursive(
    SCALARS | WIRE_TYPES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(WIRE_KEYS | st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=16,
)


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any], values: st.SearchStrategy[Any] = WIRE_JSON) -> dict[str, Any]:
    """`base` with one nested location (a key of it or of a nested object/list) replaced."""
    body: Any = _copy(base)
    node = body
    while True:
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node:
            key = draw(st.integers(0, len(node) - 1))
        else:
            break
        child = node[key]
        if isinstance(child, (dict, list)) and child and draw(st.booleans()):
            node = child
            continue
        node[key] = draw(values)
        break
    return body  # type: ignore[no-any-return]


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
