"""The recorded provider traffic the tests replay: `tests/fixtures/wire/` (SOURCES.md says
where each file came from). Every test reads it through here, from inside the repository."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "wire"
DOCS = frozenset({"PROTOCOLS.md", "SOURCES.md"})


def wire_names() -> list[str]:
    """Every recorded transcript at the top level (the notes files excluded), sorted. The
    `conversations/` folder holds the other requests and replies of some of them."""
    return [p.name for p in sorted(WIRE.iterdir()) if p.is_file() and p.name not in DOCS]


def wire_bytes(name: str) -> bytes:
    return (WIRE / name).read_bytes()


def wire_json(name: str) -> dict[str, Any]:
    value = json.loads(wire_bytes(name))
    assert isinstance(value, dict), f"{name} is not a JSON object"
    return value
