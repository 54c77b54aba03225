"""Which session an MCP request belongs to (the ledger, approvals and the policy's session counts
are per session), by the model path's own rules (`sidecar/identity.py`):

- `X-Sidecar-Session` (the configured `session_header`): source `header`, and the only way to
  name the same session on both paths;
- else the server's `Mcp-Session-Id` (2025-06-18, 2025-11-25): source `mcp_session`, one MCP
  connection;
- else (2026-07-28 has no sessions) one session per server and caller credentials: source
  `derived`, weak like a derived model-path session (a replay answer quotes no result).
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.identity import named, session_id
from sidecar.mcp.wire import SESSION_HEADER
from sidecar.model import RequestView, Session, SessionSource


def mcp_session(headers: Mapping[str, str], header_name: str, server: str, caller: str) -> Session:
    """`caller`: the hash of the caller's credentials (`catalog.caller_key`), never the secret."""
    upstream = headers.get(SESSION_HEADER)
    if upstream and not (headers.get(header_name) or "").strip():
        return named(SessionSource.MCP_SESSION, f"{server}|{upstream}")
    return session_id(headers, header_name, RequestView(session_seed=f"mcp|{server}|{caller}"))
