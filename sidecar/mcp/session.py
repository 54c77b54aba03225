"""Which session an MCP request belongs to (the ledger, approvals and the policy's session counts
are per session), by the model path's own rules (`sidecar/identity.py`):

- `X-Sidecar-Session` (the configured `session_header`): explicit, and the only way to name
  the same session on both paths;
- else the server's `Mcp-Session-Id` (2025-06-18, 2025-11-25): one per MCP connection;
- else (2026-07-28 has no sessions) one derived session per server and caller credentials:
  weak, like a derived model-path session.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.identity import session_id
from sidecar.mcp.wire import SESSION_HEADER
from sidecar.model import RequestView, sha256_hex


@dataclass(frozen=True, slots=True)
class McpSession:
    id: str
    explicit: bool  # named by the session header: it may name a model-path session too


def mcp_session(headers: Mapping[str, str], header_name: str, server: str, caller: str) -> McpSession:
    """`caller`: the hash of the caller's credentials (`catalog.caller_key`), never the secret."""
    upstream = headers.get(SESSION_HEADER)
    hint = "mcp:" + sha256_hex(f"{server}|{upstream}".encode())[:32] if upstream else None
    view = RequestView(session_hint=hint, session_seed=f"mcp|{server}|{caller}")
    return McpSession(session_id(headers, header_name, view), bool(headers.get(header_name)))
