"""Wire dialects: one module per protocol, all built on `base`."""

from sidecar.dialects.anthropic import AnthropicDialect
from sidecar.dialects.base import Dialect, StreamAssembler
from sidecar.dialects.openai_chat import OpenAIChatDialect
from sidecar.dialects.openai_responses import OpenAIResponsesDialect

ANTHROPIC = AnthropicDialect()
OPENAI_CHAT = OpenAIChatDialect()
OPENAI_RESPONSES = OpenAIResponsesDialect()

# Endpoint path (after any provider prefix) -> the dialect that parses it.
BY_PATH: dict[str, Dialect] = {
    "/v1/messages": ANTHROPIC,
    "/v1/chat/completions": OPENAI_CHAT,
    "/v1/responses": OPENAI_RESPONSES,
}

__all__ = [
    "ANTHROPIC",
    "BY_PATH",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "Dialect",
    "StreamAssembler",
]
