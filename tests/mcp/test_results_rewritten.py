"""What an MCP client gets for a result the policy withheld or redacted, and what is inspected."""

from __future__ import annotations

from sidecar.exchange.state import ResultRewrite
from sidecar.mcp import wire
from sidecar.model import ToolCall

CALL = ToolCall(id="mcp_1", name="orders_lookup", arguments={"order_id": "o-1"}, raw_arguments='{"order_id": "o-1"}')
SECRET = "sk_live_51Hdemo0000000000000000000000notreal"
NOTICE = '{"status":"withheld","tool":"orders_lookup"}'


def test_structured_content_the_text_does_not_restate_is_inspected_too() -> None:
    result = {"content": [{"type": "text", "text": "done"}], "structuredContent": {"key": SECRET}}
    inspected = wire.tool_result(CALL, result, 10).content
    assert inspected == [{"type": "text", "text": "done"}, {"type": "text", "text": f'{{"key":"{SECRET}"}}'}]


def test_structured_content_restated_as_text_is_inspected_once() -> None:
    restated = {"content": [{"type": "text", "text": '{\n  "a": 1\n}'}], "structuredContent": {"a": 1}}
    wrapped = {"content": [{"type": "text", "text": "sent"}], "structuredContent": {"result": "sent"}}
    alone = {"content": [], "structuredContent": {"a": 1}}
    assert wire.tool_result(CALL, restated, 10).content == restated["content"]
    assert wire.tool_result(CALL, wrapped, 10).content == wrapped["content"]
    assert wire.tool_result(CALL, alone, 10).content == '{"a":1}'


def test_a_redaction_keeps_the_blocks_redacted() -> None:
    result = {"content": [{"type": "text", "text": f"key {SECRET}"}], "isError": False}
    redacted = [{"type": "text", "text": "key [REDACTED: secret_in_result]"}]
    assert wire.rewritten_result(result, ResultRewrite(NOTICE, redacted), "2025-11-25") == {
        "content": redacted,
        "isError": False,
    }


def test_a_result_with_structured_content_is_withheld_rather_than_redacted() -> None:
    result = {"content": [{"type": "text", "text": "x"}], "structuredContent": {"key": SECRET}}
    redacted = [{"type": "text", "text": "[REDACTED: secret_in_result]"}]
    withheld = wire.rewritten_result(result, ResultRewrite(NOTICE, redacted), "2025-11-25")
    assert withheld == {"content": [{"type": "text", "text": NOTICE}], "isError": True}


def test_withheld_on_the_current_revision_names_its_result_type() -> None:
    withheld = wire.rewritten_result({"content": []}, ResultRewrite(NOTICE), "2026-07-28")
    assert withheld == {"content": [{"type": "text", "text": NOTICE}], "isError": True, "resultType": "complete"}
