"""A stand-in for Slack in tests, on both sides of the wire: its Web API (what the sidecar calls:
chat.postMessage, chat.update, chat.postEphemeral, answered as Slack answers them) served on
loopback, and the signed interaction callbacks Slack sends when someone clicks a button."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.helpers.serve import serve

CHANNEL = "C0APPROVALS"
MESSAGE_TS = "1767225600.000100"


@dataclass
class SlackCall:
    method: str
    authorization: str | None
    body: dict[str, Any]


@dataclass
class SlackStandIn:
    """Slack's Web API as the sidecar sees it. `error` makes every call answer `ok: false`."""

    bot_token: str
    calls: list[SlackCall] = field(default_factory=list)
    error: str | None = None
    url: str = ""

    def of(self, method: str) -> list[SlackCall]:
        return [call for call in self.calls if call.method == method]

    async def handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        body = await request.json() if request.can_read_body else {}
        self.calls.append(SlackCall(method, request.headers.get("Authorization"), body))
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if self.error:
            return web.json_response({"ok": False, "error": self.error})
        if method == "chat.postMessage":
            return web.json_response({"ok": True, "channel": CHANNEL, "ts": MESSAGE_TS, "message": body})
        if method == "chat.update":
            return web.json_response({"ok": True, "channel": body.get("channel"), "ts": body.get("ts")})
        if method == "chat.postEphemeral":
            return web.json_response({"ok": True, "message_ts": MESSAGE_TS})
        return web.json_response({"ok": False, "error": "unknown_method"})


@asynccontextmanager
async def slack_stand_in(bot_token: str) -> AsyncIterator[SlackStandIn]:
    stand_in = SlackStandIn(bot_token)
    app = web.Application()
    app.router.add_post("/api/{method}", stand_in.handle)
    async with serve(app) as url:
        stand_in.url = f"{url}/api/"
        yield stand_in


def click_payload(user: str, action_id: str, approval_id: str) -> dict[str, Any]:
    """A `block_actions` payload as Slack sends it for a button in our message (each click has its
    own trigger id and action time, so two clicks never make the same signed request)."""
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": "T0TEAM"},
        "api_app_id": "A0APP",
        "token": "deprecated-verification-token",
        "container": {"type": "message", "message_ts": MESSAGE_TS, "channel_id": CHANNEL, "is_ephemeral": False},
        "trigger_id": f"1234.5678.{secrets.token_hex(8)}",
        "team": {"id": "T0TEAM", "domain": "acme"},
        "channel": {"id": CHANNEL, "name": "approvals"},
        "response_url": "https://hooks.slack.invalid/actions/T0TEAM/1/abc",
        "actions": [
            {
                "action_id": action_id,
                "block_id": "sidecar_approval",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": approval_id,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def form_body(payload: dict[str, Any]) -> bytes:
    """The callback body: `payload=<JSON>`, form-encoded."""
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def signed_headers(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Slack's signature: v0= hex HMAC-SHA256(secret, "v0:{timestamp}:{body}")."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }
