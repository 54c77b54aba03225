"""Wording of lockdown errors: how actual values are shown and how constraints are restated.

The model reads these strings to correct its call, so they name the actual value and restate
the schema's constraint in plain words (DESIGN.md structured error contract). Everything here
is pure and only runs on the error path or at compile time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import orjson

MAX_VALUE_CHARS = 80
MAX_DESCRIPTION_CHARS = 200
MAX_LISTED = 20
_MAX_DEPTH = 4

# format name -> (noun used in "is not a valid …", expected wording with an example)
FORMATS: dict[str, tuple[str, str]] = {
    "date": ("date", "a date in YYYY-MM-DD form, e.g. 2024-05-17"),
    "date-time": (
        "date-time",
        "a date-time in RFC 3339 form with a time zone, e.g. 2024-05-17T14:30:00Z",
    ),
    "time": ("time", "a time in HH:MM:SS form with a time zone, e.g. 14:30:00Z"),
    "email": ("email address", "an email address, e.g. name@example.com"),
    "idn-email": ("email address", "an email address, e.g. name@example.com"),
    "uuid": ("UUID", "a UUID, e.g. 123e4567-e89b-12d3-a456-426614174000"),
    "uri": ("URI", "an absolute URI with a scheme, e.g. https://example.com/path"),
    "uri-reference": ("URI reference", "a URI or relative reference, e.g. /path?q=1"),
    "ipv4": ("IPv4 address", "an IPv4 address, e.g. 192.0.2.1"),
    "ipv6": ("IPv6 address", "an IPv6 address, e.g. 2001:db8::1"),
    "hostname": ("hostname", "a hostname, e.g. api.example.com"),
    "duration": ("duration", "an ISO 8601 duration, e.g. P3DT4H"),
    "regex": ("regular expression", "a valid regular expression"),
}

_IDENT = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")


def field_path(path: list[str | int] | tuple[str | int, ...]) -> str:
    """`items[2].sku`, `customer.email`; "" for the root; odd keys as `["a b"]`."""
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENT.match(part):
            out.append(f".{part}" if out else part)
        else:
            out.append(f"[{orjson.dumps(part).decode()}]")
    return "".join(out)


def truncate(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(value: Any) -> str:
    """The value as JSON, truncated; non-finite floats by name (JSON cannot hold them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return truncate(text)


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def join_or(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        return str(int(value))
    return str(value)


def _plural(n: Any, word: str) -> str:
    return f"{_num(n)} {word}" + ("" if n == 1 else "s")


def _bounds(lo: Any, hi: Any, noun: str) -> str:
    if lo is not None and hi is not None:
        return f"of exactly {_plural(lo, noun)}" if lo == hi else f"of {_num(lo)} to {_plural(hi, noun)}"
    if lo is not None:
        return f"of at least {_plural(lo, noun)}"
    if hi is not None:
        return f"of at most {_plural(hi, noun)}"
    return ""


def _range(node: dict[str, Any]) -> str:
    lo, hi = node.get("minimum"), node.get("maximum")
    xlo, xhi = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
    # Draft 4 spells exclusive bounds as booleans next to minimum/maximum.
    if xlo is True:
        xlo, lo = lo, None
    if xhi is True:
        xhi, hi = hi, None
    xlo = None if isinstance(xlo, bool) else xlo
    xhi = None if isinstance(xhi, bool) else xhi
    parts: list[str] = []
    if lo is not None and hi is not None:
        parts.append(f"between {_num(lo)} and {_num(hi)}")
    elif lo is not None:
        parts.append(f"at least {_num(lo)}")
    elif hi is not None:
        parts.append(f"at most {_num(hi)}")
    if xlo is not None:
        parts.append(f"greater than {_num(xlo)}")
    if xhi is not None:
        parts.append(f"less than {_num(xhi)}")
    if "multipleOf" in node:
        parts.append(f"a multiple of {_num(node['multipleOf'])}")
    return " and ".join(parts)


def _describe_type(kind: str, node: dict[str, Any], depth: int, resolve: Resolve) -> str:
    if kind in ("integer", "number"):
        rng = _range(node)
        return f"{kind} {rng}" if rng else kind
    if kind == "string":
        fmt = node.get("format")
        base = FORMATS[fmt][1] if fmt in FORMATS else "string"
        if isinstance(fmt, str) and fmt not in FORMATS:
            base = f'string in "{fmt}" format'
        parts = [base]
        length = _bounds(node.get("minLength"), node.get("maxLength"), "character")
        if length:
            parts.append(length)
        if "pattern" in node:
            parts.append(f"matching the pattern {node['pattern']}")
        return " ".join(parts) if len(parts) == 1 or fmt not in FORMATS else ", ".join(parts)
    if kind == "array":
        parts = ["array"]
        noun = _item_noun(node.get("items"), resolve)
        if noun:
            parts.append(f"of {noun}")
        count = _bounds(node.get("minItems"), node.get("maxItems"), "item")
        if count:
            parts.append(("with " + count[3:]) if count.startswith("of ") else count)
        if node.get("uniqueItems") is True:
            parts.append("with unique items")
        return " ".join(parts)
    if kind == "object":
        props = node.get("properties")
        if isinstance(props, dict) and props:
            names = ", ".join(list(props)[:MAX_LISTED])
            required = [r for r in node.get("required", []) if isinstance(r, str)]
            text = f"object with properties {names}"
            if required:
                text += f" (required: {', '.join(required[:MAX_LISTED])})"
            return text
        return "object"
    if kind == "boolean":
        return "boolean (true or false)"
    return kind


Resolve = Callable[[str], Any]

_NOUNS = {
    "object": "objects",
    "string": "strings",
    "integer": "integers",
    "number": "numbers",
    "boolean": "booleans",
    "array": "arrays",
}


def _item_noun(items: Any, resolve: Resolve) -> str:
    """`objects`, `strings`…: a short name for what an array holds (empty when unknown)."""
    if isinstance(items, dict) and isinstance(items.get("$ref"), str):
        items = resolve(items["$ref"])
    kind = items.get("type") if isinstance(items, dict) else None
    return _NOUNS.get(kind, "") if isinstance(kind, str) else ""


def describe(node: Any, resolve: Resolve, depth: int = 0, with_description: bool = True) -> str:
    """Restate a subschema's constraint in words (the `expected` field)."""
    if node is True or node == {}:
        return "any value"
    if node is False:
        return "nothing (no value is allowed here)"
    if not isinstance(node, dict):
        return "any value"
    ref = node.get("$ref")
    if isinstance(ref, str) and depth < _MAX_DEPTH and not _own_constraints(node):
        target = resolve(ref)
        if isinstance(target, dict):
            text = describe(target, resolve, depth + 1, with_description=False)
            return _with_description(text, node, target) if with_description else text
    text = _describe_node(node, resolve, depth)
    return _with_description(text, node) if with_description else text


def _own_constraints(node: dict[str, Any]) -> bool:
    return any(k not in ("$ref", "description", "title", "default", "examples") for k in node)


def _with_description(text: str, *nodes: dict[str, Any]) -> str:
    for node in nodes:
        desc = node.get("description")
        if isinstance(desc, str) and desc.strip():
            return f"{text} — {truncate(desc.strip(), MAX_DESCRIPTION_CHARS)}"
    return text


def _describe_node(node: dict[str, Any], resolve: Resolve, depth: int) -> str:
    if "const" in node:
        return f"exactly {render(node['const'])}"
    enum = node.get("enum")
    if isinstance(enum, list):
        shown = ", ".join(render(v) for v in enum[:MAX_LISTED])
        more = f" (and {len(enum) - MAX_LISTED} more)" if len(enum) > MAX_LISTED else ""
        return f"one of {shown}{more}"
    types = node.get("type")
    type_list = [types] if isinstance(types, str) else [t for t in types or [] if isinstance(t, str)]
    if type_list:
        return join_or([_describe_type(t, node, depth, resolve) for t in type_list])
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and branches and depth < _MAX_DEPTH:
            shapes = [describe(b, resolve, depth + 1, with_description=False) for b in branches[:6]]
            return join_or(shapes)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and all_of and depth < _MAX_DEPTH:
        return " and ".join(describe(b, resolve, depth + 1, with_description=False) for b in all_of[:4])
    if "properties" in node:
        return _describe_type("object", node, depth, resolve)
    if "items" in node or "prefixItems" in node:
        return _describe_type("array", node, depth, resolve)
    if "format" in node or "pattern" in node or "minLength" in node or "maxLength" in node:
        return _describe_type("string", node, depth, resolve)
    if any(k in node for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        return _describe_type("number", node, depth, resolve)
    return "any value"


def suggest(value: Any, options: list[Any]) -> Any | None:
    """The enum member a near miss meant: same text ignoring case, surrounding space, - or _."""
    if not isinstance(value, str):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            for option in options:
                if isinstance(option, str) and option == _num(value):
                    return option
        return None

    def norm(s: str) -> str:
        return s.strip().casefold().replace("-", "_").replace(" ", "_")

    wanted = norm(value)
    for option in options:
        if isinstance(option, str) and norm(option) == wanted:
            return option
    return None
