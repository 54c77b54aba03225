"""Official SDK clients pointed at a base URL, as an agent would configure them."""

from __future__ import annotations

import anthropic
import openai

API_KEY_ANTHROPIC = "sk-ant-test-0123456789abcdef"
API_KEY_OPENAI = "sk-test-openai-0123456789abcdef"


def anthropic_client(base_url: str, **kwargs: object) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=base_url, api_key=API_KEY_ANTHROPIC, max_retries=0, **kwargs)  # type: ignore[arg-type]


def openai_client(base_url: str, **kwargs: object) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=API_KEY_OPENAI, max_retries=0, **kwargs)  # type: ignore[arg-type]


WEATHER_TOOL_ANTHROPIC = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": "integer", "minimum": 1, "maximum": 10},
            "units": {"type": "string", "enum": ["C", "F"]},
        },
        "required": ["city"],
    },
}
WEATHER_TOOL_CHAT = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": WEATHER_TOOL_ANTHROPIC["description"],
        "parameters": WEATHER_TOOL_ANTHROPIC["input_schema"],
    },
}
WEATHER_TOOL_RESPONSES = {
    "type": "function",
    "name": "get_weather",
    "description": WEATHER_TOOL_ANTHROPIC["description"],
    "parameters": WEATHER_TOOL_ANTHROPIC["input_schema"],
}

NOARG_SCHEMA = {"type": "object", "properties": {}}
NOARG_TOOL_ANTHROPIC = {"name": "list_cities", "description": "Cities with forecasts", "input_schema": NOARG_SCHEMA}
NOARG_TOOL_CHAT = {"type": "function", "function": {"name": "list_cities", "parameters": NOARG_SCHEMA}}
NOARG_TOOL_RESPONSES = {"type": "function", "name": "list_cities", "parameters": NOARG_SCHEMA}
