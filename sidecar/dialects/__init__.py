"""Wire dialects: one module per protocol, all built on `base`."""

from sidecar.dialects.anthropic import AnthropicDialect
from sidecar.dialects.base import Dialect, StreamAssembler
from sidecar.dialects.openai_chat import OpenAIChatDialect
from sidecar.dialects.openai_responses import OpenAIResponsesDialect

ANTHROPIC = AnthropicDialect()
OPENAI_CHAT = OpenAIChatDialect()
OPENAI_RESPONSES = OpenAIResponsesDialect()

__all__ = [
    "ANTHROPIC",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "Dialect",
    "StreamAssembler",
]
