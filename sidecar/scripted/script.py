"""The script a ScriptedModel plays: turns, tool calls, errors, and the requests it records.

These types are protocol-neutral on purpose: one script drives an Anthropic, Chat Completions
or Responses client alike, so a test can run the same conversation through every dialect.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import orjson

ProtocolName = Literal["anthropic", "openai_chat", "openai_responses"]

ANTHROPIC: ProtocolName = "anthropic"
OPENAI_CHAT: ProtocolName = "openai_chat"
OPENAI_RESPONSES: ProtocolName = "openai_responses"


@dataclass(slots=True)
class ToolCallSpec:
    """One tool call the model makes.

    `raw_arguments`, when set, is sent verbatim instead of `arguments`: it lets a test send
    arguments that are not valid JSON (or not an object) to exercise the proxy's lockdown.
    `id` pins the call id (`toolu_…` / `call_…`); otherwise a fresh one is minted.
    `item` picks another wire item than a function call, as the API writes it: Responses
    `custom_tool_call` (the input text is `raw_arguments`), `local_shell_call`, `shell_call`,
    `computer_call`, `apply_patch_call` (`arguments` is their action / operation), and the
    server-run `web_search_call` / `mcp_call`; Chat `custom`; Anthropic `server_tool_use`
    (followed by its result block). Each protocol renders the items it has.
    """

    name: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str | None = None
    id: str | None = None
    item: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCallSpec:
        return cls(
            name=str(data["name"]),
            arguments=data.get("arguments"),
            raw_arguments=data.get("raw_arguments"),
            id=data.get("id"),
            item=data.get("item"),
        )


@dataclass(slots=True)
class UpstreamError:
    """An error the provider returns.

    As a turn's `error` it becomes an HTTP error response (`status` + the provider's error
    body); with `stream_error_after` it instead becomes the payload of the in-stream error
    event. `type` defaults from `status` in each provider's vocabulary (Anthropic 529 →
    `overloaded_error`, OpenAI 500 → `server_error`…), `message` likewise.
    """

    status: int = 500
    type: str | None = None
    message: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UpstreamError:
        return cls(
            status=int(data.get("status", 500)),
            type=data.get("type"),
            message=data.get("message"),
            code=data.get("code"),
            headers=dict(data.get("headers") or {}),
        )


@dataclass(slots=True)
class Turn:
    """One model answer; rendered in the protocol of whichever request it answers.

    Text and thinking become the protocol's text/reasoning output, `tool_calls` its tool calls
    (in order, after the text). The remaining fields inject provider behaviour a proxy must
    survive: HTTP errors, in-stream errors, slow streams, slow headers, a slow first event
    after a stream's headers (time to first token), gzip bodies and `max_tokens` hit inside a
    tool input.

    - `stream_error_after=N`: the first N events, then the in-stream error (payload from
      `error` if set) and the end of the stream; N is capped so the terminator is never
      sent. A non-streaming request answered by such a turn gets an HTTP error instead.
    - `truncate_tool_input`: the last call's arguments are cut in half. Anthropic: no
      content_block_stop, `max_tokens`; Chat: `finish_reason: "length"`; Responses: the item
      is `incomplete` and the stream ends with `response.incomplete`. Non-streaming
      Anthropic omits the cut block.
    - `usage`: `input_tokens`/`output_tokens`/`reasoning_tokens` override the computed
      counts (in each protocol's own names: Anthropic's `input_tokens` excludes cache reads
      and writes, OpenAI's `prompt_tokens` / `input_tokens` includes cache reads);
      `cache_read_tokens` / `cache_write_tokens` fill the prompt-cache fields
      (`cache_read_input_tokens`, `cache_creation_input_tokens` with its 5-minute breakdown;
      OpenAI `cached_tokens`, which has no writes); other keys are merged into the usage object.
    """

    text: str | None = None
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    error: UpstreamError | None = None
    stream_error_after: int | None = None
    delay_s: float = 0  # between a stream's events
    first_byte_delay_s: float = 0  # before the answer's head
    first_event_delay_s: float = 0  # a stream's: after its head, before its first event (time to first token)
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
    gzip: bool = False
    thinking: str | None = None
    truncate_tool_input: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        """Build a turn from the JSON script form (same field names as the dataclass)."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown turn field(s): {', '.join(sorted(unknown))}")
        kwargs = dict(data)
        kwargs["tool_calls"] = [
            c if isinstance(c, ToolCallSpec) else ToolCallSpec.from_dict(c) for c in data.get("tool_calls") or []
        ]
        error = data.get("error")
        if isinstance(error, dict):
            kwargs["error"] = UpstreamError.from_dict(error)
        return cls(**kwargs)


def load_script(path: str | Path) -> list[Turn]:
    """Read a JSON script: a list of turns (or `{"turns": [...]}`)."""
    data = orjson.loads(Path(path).read_bytes())
    if isinstance(data, dict):
        data = data.get("turns", [])
    if not isinstance(data, list):
        raise ValueError(f"{path}: a script is a JSON list of turns")
    return [Turn.from_dict(item) for item in data]


@dataclass(slots=True)
class RecordedRequest:
    """A request the server received, kept for assertions (`model.requests`)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    protocol: ProtocolName | None
    query: dict[str, str] = field(default_factory=dict)

    @property
    def stream(self) -> bool:
        return isinstance(self.json, dict) and bool(self.json.get("stream"))
