"""A tool result's content as text parts, and the same content with some parts replaced.

Content is whatever the wire carries as a result: a string, or JSON (Anthropic content blocks,
Chat content parts, Responses output parts, an MCP `CallToolResult`'s content and
`structuredContent`). Every string in it is a part, in document order, except binary payloads
(base64 image, audio and blob data, `data:` URIs): the model does not read those as text, and
they would only spend the inspection budget. Nothing here knows a wire format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sidecar.model import JsonPath, replace_paths

# Keys of a binary payload, when the object holding them says it is one (`type`).
_BINARY_TYPES = frozenset({"base64", "image", "audio"})
# Deeper than any JSON the dialects accept (sidecar.dialects.base.MAX_DEPTH, 254).
MAX_DEPTH = 256

Path = JsonPath


class ContentTooDeep(ValueError):
    """Content nested deeper than MAX_DEPTH: not inspected (the caller fails closed)."""


@dataclass(frozen=True, slots=True)
class TextPart:
    path: Path
    text: str


def _binary(key: str | int, value: str, holder: dict[str, Any] | None) -> bool:
    if key == "blob":
        return True
    if key == "data" and holder is not None and str(holder.get("type")) in _BINARY_TYPES:
        return True
    return value.startswith("data:") and ";base64," in value[:256]


def text_parts(content: Any) -> list[TextPart]:
    """Every text string of `content`, in document order, with where it sits."""
    out: list[TextPart] = []
    _walk(content, (), None, out, 0)
    return out


def _walk(value: Any, path: Path, holder: dict[str, Any] | None, out: list[TextPart], depth: int) -> None:
    if isinstance(value, str):
        if not path or not _binary(path[-1], value, holder):
            out.append(TextPart(path, value))
        return
    if depth >= MAX_DEPTH:
        raise ContentTooDeep(f"result content nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            _walk(item, (*path, key), value, out, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk(item, (*path, index), None, out, depth + 1)


def replace_parts(content: Any, replacements: dict[Path, str]) -> Any:
    """`content` with the strings at these paths replaced (the input is never mutated)."""
    return replace_paths(content, dict(replacements))
