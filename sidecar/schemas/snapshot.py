"""Golden snapshots: one deterministic JSON file per tool, to check in and review.

The file is what the model is shown about the tool (name, description, schema) plus its two
hashes, with sorted keys, two-space indentation, numbers in canonical form and a final
newline: the same declaration always gives the same bytes, so the diff of a pull request
is exactly the change of the tool. Reading a snapshot recomputes both hashes and refuses a
file whose content no longer matches them (edited by hand: regenerate it).

File names are safe for any tool name: a plain name (`[a-z0-9_-]`, at most 64 characters,
not a name Windows reserves) is used as is; any other name becomes its sanitised form plus
`.` and 12 hex digits of its sha256. A dot never occurs in a plain name, so the two kinds
cannot collide, and names differing only in case get different files on case-insensitive
file systems.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from sidecar.model import ToolDeclaration, canonical_json, declaration_hash, schema_hash, sha256_hex

SNAPSHOT_VERSION = 1
_PLAIN = re.compile(r"^[a-z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^a-z0-9_-]+")
_RESERVED = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))})


class SnapshotError(Exception):
    """A snapshot directory or file that cannot be used as it is (the message says why)."""


def file_name(tool: str) -> str:
    if _PLAIN.match(tool) and tool not in _RESERVED:
        return f"{tool}.json"
    safe = _UNSAFE.sub("_", tool.lower()).strip("_")[:48] or "tool"
    return f"{safe}.{sha256_hex(tool.encode())[:12]}.json"


def render(declaration: ToolDeclaration) -> bytes:
    """The snapshot file's bytes for one declaration."""
    document = {
        "snapshot": SNAPSHOT_VERSION,
        "name": declaration.name,
        "description": declaration.description,
        # Canonical numbers (1.0 is written 1): equal schemas give equal files.
        "schema": orjson.loads(canonical_json(declaration.schema)),
        "schema_hash": declaration.schema_hash or schema_hash(declaration.schema),
        "declaration_hash": declaration_hash(declaration),
    }
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


@dataclass(slots=True)
class Written:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def write_snapshots(directory: str | Path, declarations: Mapping[str, ToolDeclaration]) -> Written:
    """Make `directory` hold exactly one snapshot per declaration: new and changed files are
    written, identical ones left alone, snapshots of tools no longer declared removed.
    Refuses (SnapshotError) a directory holding other JSON files, so nothing else is lost."""
    root = Path(directory)
    if root.exists() and not root.is_dir():
        raise SnapshotError(f"{root}: exists and is not a directory")
    existing = _existing(root) if root.exists() else {}
    root.mkdir(parents=True, exist_ok=True)
    result = Written()
    wanted: set[str] = set()
    for name in sorted(declarations):
        target = root / file_name(name)
        wanted.add(target.name)
        data = render(declarations[name])
        try:
            if target.exists() and target.read_bytes() == data:
                result.unchanged.append(str(target))
                continue
            target.write_bytes(data)
        except OSError as exc:
            raise SnapshotError(f"{target}: cannot write: {exc.strerror or exc}") from None
        result.written.append(str(target))
    for stale in sorted(set(existing) - wanted):
        (root / stale).unlink()
        result.removed.append(str(root / stale))
    return result


def _existing(root: Path) -> dict[str, Any]:
    """File name -> parsed document of every snapshot file in `root`."""
    found: dict[str, Any] = {}
    for path in sorted(root.glob("*.json")):
        try:
            document = orjson.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise SnapshotError(f"{path}: not a readable JSON file ({exc})") from None
        if not (isinstance(document, dict) and document.get("snapshot") == SNAPSHOT_VERSION):
            raise SnapshotError(f"{path}: not a tool snapshot (version {SNAPSHOT_VERSION}); keep other files elsewhere")
        found[path.name] = document
    return found


def read_snapshots(directory: str | Path) -> dict[str, ToolDeclaration]:
    """Tool name -> declaration of every snapshot in `directory` (checked against its hashes)."""
    root = Path(directory)
    if not root.is_dir():
        raise SnapshotError(f"{root}: no such directory (write it with `sidecar schemas snapshot --out {root}`)")
    out: dict[str, ToolDeclaration] = {}
    for name, document in _existing(root).items():
        declaration = _declaration(root / name, document)
        if declaration.name in out:
            raise SnapshotError(f"{root / name}: a second snapshot of tool {declaration.name!r}")
        out[declaration.name] = declaration
    return out


def _declaration(path: Path, document: dict[str, Any]) -> ToolDeclaration:
    name, description, schema = document.get("name"), document.get("description"), document.get("schema")
    if not isinstance(name, str) or not isinstance(description, str) or not isinstance(schema, dict):
        raise SnapshotError(f"{path}: needs a string `name`, a string `description` and an object `schema`")
    declaration = ToolDeclaration.create(name, schema, description)
    stale = [
        key
        for key, actual in (
            ("schema_hash", declaration.schema_hash),
            ("declaration_hash", declaration_hash(declaration)),
        )
        if document.get(key) != actual
    ]
    if stale:
        raise SnapshotError(
            f"{path}: {' and '.join(stale)} do not match the content (edited by hand?); "
            "regenerate it with `sidecar schemas snapshot`"
        )
    return declaration
