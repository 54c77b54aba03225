"""What changed between two versions of a tool declaration, in words a reviewer reads.

One pure function family shared by the drift log line (a declaration changed in live
traffic) and `sidecar schemas diff` (a checked-in snapshot against what is deployed). It
answers the questions a reviewer has about a tool the model is shown: which parameters
appeared, disappeared or were renamed, which types, enum members, descriptions and required
flags changed. Whatever else differs is reported keyword by keyword, so two declarations
with different hashes never produce an empty diff.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from sidecar.lockdown import messages as msg
from sidecar.model import ToolDeclaration, canonical_json
from sidecar.schemas.load import field_label, pointer

MAX_SHOWN = 120  # characters of a value or description shown in a change line

_PATH = tuple[str | int, ...]
# Keywords the walk below handles itself; every other one is compared as a value.
_HANDLED = frozenset({"type", "description", "enum", "properties", "required", "$defs", "definitions"})


class ChangeKind(StrEnum):
    TOOL_ADDED = "tool_added"
    TOOL_REMOVED = "tool_removed"
    TOOL_DESCRIPTION = "tool_description"
    FIELD_ADDED = "field_added"
    FIELD_REMOVED = "field_removed"
    FIELD_RENAMED = "field_renamed"
    TYPE = "type"
    ENUM_ADDED = "enum_added"
    ENUM_REMOVED = "enum_removed"
    DESCRIPTION = "description"
    REQUIRED = "now_required"
    OPTIONAL = "now_optional"
    KEYWORD = "keyword"


@dataclass(frozen=True, slots=True)
class Change:
    """One difference. `field` is the readable parameter path ("" for the tool or the root),
    `pointer` the JSON pointer in the newer schema (the older one for removals)."""

    tool: str
    kind: ChangeKind
    field: str = ""
    pointer: str = ""
    before: Any = None
    after: Any = None
    keyword: str = ""

    def text(self) -> str:
        """One line: `+` added, `-` removed, `~` changed."""
        where = f"{self.tool} {self.field}" if self.field else self.tool
        kind = self.kind
        if kind is ChangeKind.TOOL_ADDED:
            return f"+ tool {self.tool}"
        if kind is ChangeKind.TOOL_REMOVED:
            return f"- tool {self.tool}"
        if kind is ChangeKind.TOOL_DESCRIPTION:
            return f"~ {self.tool}: description {_shown(self.before)} -> {_shown(self.after)}"
        if kind is ChangeKind.FIELD_ADDED:
            return f"+ {where}: {self.after}"
        if kind is ChangeKind.FIELD_REMOVED:
            return f"- {where}: {self.before}"
        if kind is ChangeKind.FIELD_RENAMED:
            return f"~ {self.tool}: {self.before} renamed to {self.after} (same schema)"
        if kind is ChangeKind.TYPE:
            return f"~ {where}: type {_type_text(self.before)} -> {_type_text(self.after)}"
        if kind is ChangeKind.ENUM_ADDED:
            return f"~ {where}: enum + " + ", ".join(_shown(v) for v in self.after)
        if kind is ChangeKind.ENUM_REMOVED:
            return f"~ {where}: enum - " + ", ".join(_shown(v) for v in self.before)
        if kind is ChangeKind.DESCRIPTION:
            return f"~ {where}: description {_shown(self.before)} -> {_shown(self.after)}"
        if kind is ChangeKind.REQUIRED:
            return f"~ {where}: now required"
        if kind is ChangeKind.OPTIONAL:
            return f"~ {where}: now optional"
        return f"~ {where}: {self.keyword} {_shown(self.before)} -> {_shown(self.after)}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool, "kind": self.kind.value, "field": self.field, "pointer": self.pointer}
        if self.keyword:
            out["keyword"] = self.keyword
        out["before"], out["after"] = self.before, self.after
        out["text"] = self.text()
        return out


_ABSENT = object()


def _shown(value: Any) -> str:
    if value is _ABSENT or value is None:
        return "(none)"
    return msg.truncate(orjson.dumps(value).decode(), MAX_SHOWN)


def _type_text(types: Any) -> str:
    if not types:
        return "(any)"
    return types[0] if len(types) == 1 else "[" + ", ".join(types) + "]"


def _canon(value: Any) -> bytes:
    return canonical_json(value)


def _types(node: Any) -> list[str]:
    """The JSON types a node admits, also through a union of pure-type branches
    (`anyOf: [{type: string}, {type: null}]`, how pydantic writes `str | None`)."""
    if not isinstance(node, dict):
        return []
    kind = node.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [t for t in kind if isinstance(t, str)]  # as written: a reorder is a change too
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and _pure_type_union(branches):
            return sorted({t for b in branches for t in _types(b)})
    return []


def _pure_type_union(branches: Any) -> bool:
    return (
        isinstance(branches, list)
        and bool(branches)
        and all(isinstance(b, dict) and set(b) == {"type"} and isinstance(b["type"], str) for b in branches)
    )


def _summary(node: Any, required: bool | None) -> str:
    """`integer, required` — how an added or removed field is shown."""
    types = _types(node)
    text = _type_text(types) if types else ("" if isinstance(node, dict) and "enum" in node else "(any)")
    if isinstance(node, dict) and isinstance(node.get("enum"), list):
        text = f"{text} enum {_shown(node['enum'])}".strip()
    return text if required is None else f"{text}, {'required' if required else 'optional'}"


def diff_declarations(before: ToolDeclaration, after: ToolDeclaration) -> list[Change]:
    """Every difference between two declarations of one tool, in schema order."""
    tool = after.name
    out: list[Change] = []
    if before.description != after.description:
        out.append(Change(tool, ChangeKind.TOOL_DESCRIPTION, before=before.description, after=after.description))
    out += _diff_node(tool, before.schema, after.schema, ())
    if not out and _canon(before.schema) != _canon(after.schema):  # defensive: never an empty diff
        out.append(Change(tool, ChangeKind.KEYWORD, keyword="schema", before=before.schema, after=after.schema))
    return out


def diff_tool_sets(before: Mapping[str, ToolDeclaration], after: Mapping[str, ToolDeclaration]) -> list[Change]:
    """Tools removed, then per tool (sorted by name) what changed or that it was added."""
    out = [Change(name, ChangeKind.TOOL_REMOVED) for name in sorted(before.keys() - after.keys())]
    for name in sorted(after):
        if name not in before:
            out.append(Change(name, ChangeKind.TOOL_ADDED))
        else:
            out += diff_declarations(before[name], after[name])
    return out


def _diff_node(tool: str, old: Any, new: Any, path: _PATH) -> list[Change]:
    if _canon(old) == _canon(new):
        return []
    field, at = field_label(path), pointer(path)
    if not isinstance(old, dict) or not isinstance(new, dict):
        return [Change(tool, ChangeKind.KEYWORD, field, at, keyword="schema", before=old, after=new)]
    out: list[Change] = []
    old_types, new_types = _types(old), _types(new)
    if old_types != new_types:
        out.append(Change(tool, ChangeKind.TYPE, field, at, before=old_types, after=new_types))
    if old.get("description") != new.get("description"):
        out.append(Change(tool, ChangeKind.DESCRIPTION, field, at, old.get("description"), new.get("description")))
    out += _diff_enum(tool, old, new, path)
    out += _diff_properties(tool, old, new, path)
    if "items" in old and "items" in new:
        out += _diff_node(tool, old["items"], new["items"], (*path, "items"))
    for container in ("$defs", "definitions"):
        out += _diff_map(tool, old.get(container), new.get(container), (*path, container))
    for key in _other_keywords(old, new):
        if key == "items" and key in old and key in new:
            continue  # walked above
        if key in ("anyOf", "oneOf") and old_types != new_types and _type_only(old, new, key):
            continue  # reported as a type change above
        before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if before is _ABSENT or after is _ABSENT or _canon(before) != _canon(after):
            out.append(
                Change(
                    tool,
                    ChangeKind.KEYWORD,
                    field,
                    pointer((*path, key)),
                    keyword=key,
                    before=None if before is _ABSENT else before,
                    after=None if after is _ABSENT else after,
                )
            )
    return out


def _type_only(old: dict[str, Any], new: dict[str, Any], key: str) -> bool:
    """Both sides' `key` is absent or a union of pure types (`str | None`): the type says it."""
    return all(key not in side or _pure_type_union(side[key]) for side in (old, new))


def _other_keywords(old: dict[str, Any], new: dict[str, Any]) -> Iterator[str]:
    seen = dict.fromkeys([*old, *new])
    return (key for key in seen if key not in _HANDLED)


def _diff_enum(tool: str, old: dict[str, Any], new: dict[str, Any], path: _PATH) -> list[Change]:
    before, after = old.get("enum"), new.get("enum")
    if before == after:
        return []
    field, at = field_label(path), pointer((*path, "enum"))
    if not isinstance(before, list) or not isinstance(after, list):
        return [Change(tool, ChangeKind.KEYWORD, field, at, keyword="enum", before=before, after=after)]
    old_keys, new_keys = {_canon(v) for v in before}, {_canon(v) for v in after}
    out: list[Change] = []
    added = [v for v in after if _canon(v) not in old_keys]
    removed = [v for v in before if _canon(v) not in new_keys]
    if added:
        out.append(Change(tool, ChangeKind.ENUM_ADDED, field, at, after=added))
    if removed:
        out.append(Change(tool, ChangeKind.ENUM_REMOVED, field, at, before=removed))
    if not out:  # same members, other order (or duplicates): still a different declaration
        out.append(Change(tool, ChangeKind.KEYWORD, field, at, keyword="enum order", before=before, after=after))
    return out


def _props(node: dict[str, Any]) -> dict[str, Any]:
    props = node.get("properties")
    return props if isinstance(props, dict) else {}


def _required(node: dict[str, Any]) -> list[str]:
    required = node.get("required")
    return [r for r in required if isinstance(r, str)] if isinstance(required, list) else []


def _diff_properties(tool: str, old: dict[str, Any], new: dict[str, Any], path: _PATH) -> list[Change]:
    old_props, new_props = _props(old), _props(new)
    old_req, new_req = _required(old), _required(new)
    out: list[Change] = []
    removed = [n for n in old_props if n not in new_props]
    added = [n for n in new_props if n not in old_props]
    renamed = _renames(old_props, new_props, removed, added)
    for name in removed:
        if name in renamed:
            continue
        where = (*path, "properties", name)
        out.append(
            Change(tool, ChangeKind.FIELD_REMOVED, field_label(where), pointer(where), _summary(old_props[name], None))
        )
    for name in new_props:
        where = (*path, "properties", name)
        if name in added:
            old_name = next((o for o, n in renamed.items() if n == name), None)
            if old_name is not None:
                out.append(
                    Change(
                        tool,
                        ChangeKind.FIELD_RENAMED,
                        field_label(where),
                        pointer(where),
                        field_label((*path, "properties", old_name)),
                        field_label(where),
                    )
                )
                out += _required_change(tool, where, old_name in old_req, name in new_req)
            else:
                summary = _summary(new_props[name], name in new_req)
                out.append(Change(tool, ChangeKind.FIELD_ADDED, field_label(where), pointer(where), after=summary))
            continue
        out += _required_change(tool, where, name in old_req, name in new_req)
        out += _diff_node(tool, old_props[name], new_props[name], where)
    if not out and old.get("required") != new.get("required") and set(old_req) == set(new_req):
        out.append(
            Change(
                tool,
                ChangeKind.KEYWORD,
                field_label(path),
                pointer((*path, "required")),
                keyword="required order",
                before=old.get("required"),
                after=new.get("required"),
            )
        )
    return out


def _required_change(tool: str, where: _PATH, was: bool, now: bool) -> list[Change]:
    if was == now:
        return []
    kind = ChangeKind.REQUIRED if now else ChangeKind.OPTIONAL
    return [Change(tool, kind, field_label(where), pointer(where))]


def _renames(
    old_props: dict[str, Any], new_props: dict[str, Any], removed: list[str], added: list[str]
) -> dict[str, str]:
    """old name -> new name, where exactly one removed and one added field share a schema."""
    by_schema_old: dict[bytes, list[str]] = {}
    for name in removed:
        by_schema_old.setdefault(_canon(old_props[name]), []).append(name)
    by_schema_new: dict[bytes, list[str]] = {}
    for name in added:
        by_schema_new.setdefault(_canon(new_props[name]), []).append(name)
    return {
        olds[0]: by_schema_new[key][0]
        for key, olds in by_schema_old.items()
        if len(olds) == 1 and len(by_schema_new.get(key, ())) == 1
    }


def _diff_map(tool: str, old: Any, new: Any, path: _PATH) -> list[Change]:
    """`$defs`: definitions added, removed, or changed (walked like any schema)."""
    old_map = old if isinstance(old, dict) else {}
    new_map = new if isinstance(new, dict) else {}
    out: list[Change] = []
    for name in dict.fromkeys([*old_map, *new_map]):
        where = (*path, name)
        if name not in new_map:
            out.append(
                Change(
                    tool, ChangeKind.KEYWORD, pointer(where), pointer(where), keyword="definition", before=old_map[name]
                )
            )
        elif name not in old_map:
            out.append(
                Change(
                    tool, ChangeKind.KEYWORD, pointer(where), pointer(where), keyword="definition", after=new_map[name]
                )
            )
        else:
            out += _diff_node(tool, old_map[name], new_map[name], where)
    return out
