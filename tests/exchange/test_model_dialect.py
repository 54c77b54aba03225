"""`Exchange.model_dialect`: the model dialect of a model-path exchange; an MCP exchange's
wire is refused, also after model exchanges made the check remember their dialects' classes."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict
from yarl import URL

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT
from sidecar.exchange.state import Exchange, McpFacts
from sidecar.mcp import wire
from sidecar.model import CallPath, Provider, RequestView


def _exchange(dialect: object) -> Exchange:
    return Exchange(
        "x1",
        Provider.ANTHROPIC,
        dialect,
        "s",
        RequestView(),
        {},
        URL("http://u"),
        CIMultiDict(),  # type: ignore[arg-type]
    )


def test_a_model_dialect_is_itself_every_time() -> None:
    for dialect in (ANTHROPIC, OPENAI_CHAT, ANTHROPIC):
        assert _exchange(dialect).model_dialect is dialect


def test_the_mcp_wire_is_not_a_model_dialect_before_or_after_model_exchanges() -> None:
    with pytest.raises(TypeError, match="not a model dialect"):
        _ = _exchange(wire.MCP_WIRE).model_dialect
    assert _exchange(ANTHROPIC).model_dialect is ANTHROPIC
    with pytest.raises(TypeError, match="not a model dialect"):
        _ = _exchange(wire.MCP_WIRE).model_dialect


def test_the_path_follows_the_mcp_facts() -> None:
    ex = _exchange(wire.MCP_WIRE)
    assert ex.path is CallPath.MODEL
    ex.mcp = McpFacts("files", "tools/call")
    assert ex.path is CallPath.MCP
    assert ex.path_of("toolu_1") is CallPath.MCP
