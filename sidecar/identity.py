"""Session and call identity (DESIGN.md: "Session and call identity")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.model import RequestView, canonical_json, sha256_hex

_MAX_ID = 200
_DERIVED = "h:"


def session_id(headers: Mapping[str, str], header_name: str, view: RequestView) -> str:
    """Explicit header, else the provider's user field, else a hash of how the chat began."""
    explicit = headers.get(header_name)
    if explicit:
        return explicit.strip()[:_MAX_ID]
    if view.session_hint:
        return str(view.session_hint)[:_MAX_ID]
    return _DERIVED + sha256_hex(view.session_seed.encode())[:32]


def is_derived(session: str) -> bool:
    """True when no header or user field named the session (it was hashed from the chat)."""
    return session.startswith(_DERIVED)


def replay_key(session: str, tool: str, arguments: Any) -> str:
    """sha256(session | tool | canonical_json(args)): equal calls give equal keys."""
    return call_key(session, tool, canonical_json(arguments))


def call_key(session: str, tool: str, canonical_arguments: bytes) -> str:
    """The replay key from arguments already in canonical form."""
    return sha256_hex(session.encode() + b"|" + tool.encode() + b"|" + canonical_arguments)
