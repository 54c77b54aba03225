"""Slack interactive approvals, the outbound half: each new approval is posted to a channel as a
Block Kit message with Approve and Deny buttons (their value is the approval id), and updated
once someone decides through it.

The message is best effort; the decision never is. When Slack cannot be reached or answers
`ok: false`, the approval simply stays pending (it can still be decided with `sidecar approvals`),
the failure is counted (`sidecar_slack_api_failures_total{method}`) and logged with Slack's
error code. Nothing is ever decided from what Slack's API answers: a decision comes only from a
signed callback by a mapped Slack user (sidecar/admin/slack.py), under the same group rule as
an admin token. Calls run in the background, through the official SDK's client (`slack_sdk`),
which never logs the bot token.
"""

from __future__ import annotations

import asyncio
import logging
import math
from enum import StrEnum
from typing import Any

import aiohttp
import orjson
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from sidecar.approvals.notifier import BackgroundTasks
from sidecar.config import SlackSettings
from sidecar.state import Approval
from sidecar.telemetry.metrics import Metrics
from sidecar.timefmt import iso_utc

log = logging.getLogger("sidecar.approvals")

ACTIONS_BLOCK = "sidecar_approval"
# Slack's limits: a section's text 3000 characters, a field 2000, a header 150.
_TEXT_LIMIT = 2900
_FIELD_LIMIT = 1900
_HEADER_LIMIT = 150


class SlackAction(StrEnum):
    """The `action_id` of each button; the callback maps it back to a decision."""

    APPROVE = "sidecar_approve"
    DENY = "sidecar_deny"


class SlackMethod(StrEnum):
    POST_MESSAGE = "chat.postMessage"
    UPDATE = "chat.update"
    POST_EPHEMERAL = "chat.postEphemeral"


# What a failure of each call leaves behind, for the log line.
_CONSEQUENCE = {
    SlackMethod.POST_MESSAGE: "the approval stays pending; decide it with `sidecar approvals`",
    SlackMethod.UPDATE: "the message still shows its buttons; the decision stands",
    SlackMethod.POST_EPHEMERAL: "the person was not told why",
}


def escape(text: str) -> str:
    """Slack's mrkdwn control characters, so tool arguments (model-written) cannot mention
    `<!channel>` or dress up a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _summary(a: Approval, title: str) -> list[dict[str, Any]]:
    arguments = orjson.dumps(a.arguments, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    reasons = "\n".join(f"• {reason}" for reason in a.reasons) or "-"
    fields = [("Group", a.group), ("Approval", a.id), ("Session", a.session), ("Expires", iso_utc(a.expires))]
    return [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(f"{title}: {a.tool}", _HEADER_LIMIT)}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*{name}*\n{_clip(escape(value), _FIELD_LIMIT)}"} for name, value in fields
            ],
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Why*\n{_clip(escape(reasons), _TEXT_LIMIT)}"}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"*Arguments* (redacted)\n```{_clip(escape(arguments), _TEXT_LIMIT)}```",
            },
        },
    ]


def _fallback(a: Approval) -> str:
    """The message's `text`: what notifications and screen readers show."""
    return escape(f"Approval needed: {a.tool} for group {a.group} ({a.id})")


def request_message(a: Approval) -> dict[str, Any]:
    """The approval as a Block Kit message, with its two buttons."""
    buttons = [
        {
            "type": "button",
            "action_id": SlackAction.APPROVE.value,
            "style": "primary",
            "value": a.id,
            "text": {"type": "plain_text", "text": "Approve"},
        },
        {
            "type": "button",
            "action_id": SlackAction.DENY.value,
            "style": "danger",
            "value": a.id,
            "text": {"type": "plain_text", "text": "Deny"},
        },
    ]
    return {
        "text": _fallback(a),
        "blocks": [
            *_summary(a, "Approval needed"),
            {"type": "actions", "block_id": ACTIONS_BLOCK, "elements": buttons},
        ],
    }


def decided_message(a: Approval) -> dict[str, Any]:
    """The same message once decided: the buttons give way to who decided."""
    outcome = f"*{a.status.capitalize()}* by {escape(a.decided_by or '?')} (via Slack)"
    return {
        "text": escape(f"{a.tool} ({a.id}) {a.status} by {a.decided_by}"),
        "blocks": [
            *_summary(a, f"Approval {a.status}"),
            {"type": "context", "elements": [{"type": "mrkdwn", "text": outcome}]},
        ],
    }


class SlackApprovals:
    """The channel's side of approvals: post requests, update decided ones, tell people why not."""

    def __init__(self, settings: SlackSettings, metrics: Metrics) -> None:
        self.channel = settings.channel
        self.metrics = metrics
        self.client = AsyncWebClient(
            token=settings.bot_token,
            base_url=settings.api_url,
            timeout=math.ceil(settings.timeout_s),
            retry_handlers=[AsyncConnectionErrorRetryHandler(max_retry_count=2)],
        )
        self._tasks = BackgroundTasks()
        self.failures = 0

    def request(self, a: Approval) -> asyncio.Task[bool] | None:
        return self._spawn(SlackMethod.POST_MESSAGE, channel=self.channel, **request_message(a))

    def decided(self, a: Approval, channel: str | None, ts: str | None) -> asyncio.Task[bool] | None:
        if not channel or not ts:
            return None
        return self._spawn(SlackMethod.UPDATE, channel=channel, ts=ts, **decided_message(a))

    def tell(self, channel: str | None, user: str, text: str) -> asyncio.Task[bool] | None:
        """An ephemeral reply only `user` sees, in the channel they clicked in."""
        if not channel:
            return None
        return self._spawn(SlackMethod.POST_EPHEMERAL, channel=channel, user=user, text=escape(text))

    def _spawn(self, method: SlackMethod, **arguments: Any) -> asyncio.Task[bool] | None:
        task = self._tasks.spawn(self._call(method, **arguments))
        if task is None:  # a Slack that stalls cannot grow memory
            self._failed(method, f"{self._tasks.limit} calls already in flight")
        return task

    async def _call(self, method: SlackMethod, **arguments: Any) -> bool:
        try:
            await self.client.api_call(method.value, json=arguments)
            return True
        except SlackApiError as exc:
            problem = f"Slack answered {exc.response.get('error') or exc.response.status_code}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            problem = f"Slack unreachable ({type(exc).__name__}: {exc})"
        self._failed(method, problem)
        return False

    def _failed(self, method: SlackMethod, problem: str) -> None:
        self.failures += 1
        self.metrics.slack_api_failure(method.value)
        log.warning("Slack %s failed: %s; %s", method.value, problem, _CONSEQUENCE[method])

    async def drain(self) -> None:
        await self._tasks.drain()

    async def close(self) -> None:
        await self._tasks.close()
