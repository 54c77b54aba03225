"""Reading tool declarations from the JSON files teams already have.

Accepted shapes: a whole request body of any of the three protocols, a `tools` array in any
protocol's shape, or a single tool. Extraction goes through the dialects' own
`declarations(body)`, so a tool is read (name, schema, description, schema hash) exactly as
the proxy reads it from a live request; only the file-level shape detection lives here.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, Dialect
from sidecar.dialects.base import loads
from sidecar.lockdown import messages as msg
from sidecar.model import ToolDeclaration

_DIALECTS: tuple[Dialect, ...] = (ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES)
# Where each protocol keeps a tool's argument schema (for pointers into the file).
_SCHEMA_AT: dict[str, tuple[str, ...]] = {
    ANTHROPIC.name: ("input_schema",),
    OPENAI_CHAT.name: ("function", "parameters"),
    OPENAI_RESPONSES.name: ("parameters",),
}


class LoadError(Exception):
    """The file cannot be read, is not JSON, or holds nothing that looks like a tool."""


@dataclass(frozen=True, slots=True)
class LoadedTool:
    """One client tool as the proxy would register it, and where it sits in the file."""

    declaration: ToolDeclaration
    dialect: str
    location: str  # JSON pointer of the tool's schema within the file
    declared_schema: bool = True  # False: no schema, the proxy assumes {"type": "object"}
    duplicate: bool = False  # the name is declared more than once; the last one wins


@dataclass(slots=True)
class LoadedFile:
    path: str
    shape: str  # e.g. "anthropic request", "tools array (openai_chat)", "single tool (anthropic)"
    tools: list[LoadedTool] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (pointer, why)
    # Set when the tools come from a sidecar's inventory (`--from ADMIN_URL`): whose they are.
    agent: str | None = None
    provider: str | None = None


def pointer(parts: tuple[str | int, ...] | list[str | int]) -> str:
    """RFC 6901 JSON pointer text for path segments."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def field_label(path: tuple[str | int, ...]) -> str:
    """`customer.email`, `items[*].sku` for a schema path made of `properties` and `items`
    steps (the parameter a model fills); the JSON pointer for any other path."""
    out = ""
    i = 0
    while i < len(path):
        key = path[i]
        if key == "properties" and i + 1 < len(path):
            piece = msg.field_path([path[i + 1]])
            out += piece if not out or piece.startswith("[") else "." + piece
            i += 2
        elif key == "items":
            out += "[*]"
            i += 1
        else:
            return pointer(path)
    return out


def dialect_of(tool: Any) -> Dialect | None:
    """The protocol whose client-tool shape this entry has (the shapes are disjoint)."""
    for dialect in _DIALECTS:
        if dialect.client_tool_name(tool) is not None:
            return dialect
    return None


def _is_bare_function(tool: Any) -> bool:
    """OpenAI's inner `function` object on its own: `{"name", "parameters"}`, no `type`."""
    return (
        isinstance(tool, dict)
        and "type" not in tool
        and "input_schema" not in tool
        and isinstance(tool.get("name"), str)
        and "parameters" in tool
    )


def read_json(path: str) -> Any:
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise LoadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return loads(data)
    except ValueError as exc:
        raise LoadError(f"{path}: not JSON: {exc}") from None


def load_file(path: str) -> LoadedFile:
    """All client tools of one file, in file order (LoadError when there are none)."""
    return load_document(read_json(path), path)


def load_document(doc: Any, path: str = "<document>") -> LoadedFile:
    entries: list[tuple[tuple[str | int, ...], Any]]
    body: dict[str, Any] = {}
    if isinstance(doc, list):
        kind, entries = "tools array", [((i,), t) for i, t in enumerate(doc)]
    elif isinstance(doc, dict) and isinstance(doc.get("tools"), list):
        body = doc
        request = "input" in doc or "messages" in doc
        kind = "request" if request else "tools array"
        entries = [(("tools", i), t) for i, t in enumerate(doc["tools"])]
    elif isinstance(doc, dict):
        kind, entries = "single tool", [((), doc)]
    else:
        raise LoadError(f"{path}: expected a request body, a tools array or a tool, got JSON {type(doc).__name__}")

    bare = [(where, {"type": "function", "function": t}) for where, t in entries if _is_bare_function(t)]
    if bare and len(bare) == len(entries):
        entries = bare  # the file holds OpenAI `function` objects: read them as chat tools

    found = Counter(d.name for _, t in entries if (d := dialect_of(t)) is not None)
    if not found:
        raise LoadError(f"{path}: no client tool declarations found ({kind})")
    # A request speaks one protocol: the one most of its tools are written in (responses
    # bodies carry `input`, the others `messages`; the tool shapes tell those two apart).
    main = "openai_responses" if kind == "request" and "input" in body else found.most_common(1)[0][0]
    loaded = LoadedFile(path, f"{main} request" if kind == "request" else f"{kind} ({main})")

    by_dialect: dict[str, list[tuple[tuple[str | int, ...], dict[str, Any]]]] = {}
    for where, tool in entries:
        dialect = dialect_of(tool)
        if dialect is None or (kind == "request" and dialect.name != main):
            why = "not a client tool of this protocol (server tool or unknown shape): the lockdown does not check it"
            loaded.skipped.append((pointer(where), why))
            continue
        by_dialect.setdefault(dialect.name, []).append((where, tool))

    for dialect in _DIALECTS:
        group = by_dialect.get(dialect.name)
        if not group:
            continue
        declared = dialect.declarations({**body, "tools": [tool for _, tool in group]})
        names = Counter(dialect.client_tool_name(tool) for _, tool in group)
        last: dict[str, tuple[str | int, ...]] = {}
        declared_schema: dict[str, bool] = {}
        for where, tool in group:
            name = str(dialect.client_tool_name(tool))
            last[name] = where
            declared_schema[name] = isinstance(dialect.tool_spec(tool)[0], dict)
        for name, declaration in declared.items():
            where = last[name]
            if _is_bare_function(pointer_get_raw(doc, where)):
                schema_at: tuple[str, ...] = ("parameters",)
            else:
                schema_at = _SCHEMA_AT[dialect.name]
            loaded.tools.append(
                LoadedTool(
                    declaration,
                    dialect.name,
                    pointer((*where, *schema_at)),
                    declared_schema[name],
                    names[name] > 1,
                )
            )
    loaded.tools.sort(key=lambda t: _order(t.location))
    return loaded


def pointer_get_raw(doc: Any, where: tuple[str | int, ...]) -> Any:
    node = doc
    for part in where:
        node = node[part]
    return node


def _order(location: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in location.split("/")]
