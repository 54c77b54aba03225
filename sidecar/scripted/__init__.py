"""A scripted model server that speaks the Anthropic and OpenAI wire protocols exactly.

Tests, `sidecar demo` and the benchmarks point the proxy's upstream at it::

    async with ScriptedModel([Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})]),
                              Turn(text="It is sunny.")]) as model:
        client = anthropic.AsyncAnthropic(base_url=model.url, api_key="test")
"""

from sidecar.scripted.script import (
    ANTHROPIC,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    ProtocolName,
    RecordedRequest,
    ToolCallSpec,
    Turn,
    UpstreamError,
    load_script,
)
from sidecar.scripted.server import EXHAUSTED_TEXT, Responder, ScriptedModel

__all__ = [
    "ANTHROPIC",
    "EXHAUSTED_TEXT",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "ProtocolName",
    "RecordedRequest",
    "Responder",
    "ScriptedModel",
    "ToolCallSpec",
    "Turn",
    "UpstreamError",
    "load_script",
]
