"""Slack interactive approvals, the inbound half: `POST /slack/interactions` on the admin port.

Slack signs each request with the app's signing secret: `X-Slack-Signature` is
`v0=` + hex HMAC-SHA256(secret, `v0:{X-Slack-Request-Timestamp}:{raw body}`), checked by the
official SDK's `SignatureVerifier` (constant-time comparison). A request is refused with 401,
nothing decided and counted by reason (`sidecar_slack_callbacks_refused_total`), when the
signature is missing or wrong, its timestamp is more than 5 minutes from this host's clock, or
the same signature was already accepted (a replay inside those 5 minutes; the atomic decision
refuses a replay past a cache eviction anyway). A body that is signed but not a Slack
interaction payload is a 400.

Then the click: a `block_actions` payload from one of our buttons (sidecar/approvals/slack.py),
by a Slack user the users file maps to an approver (`USER_ID NAME GROUP,GROUP`, re-read when it
changes). The decision goes through `ApprovalService.decide`, exactly as from an admin token:
only an approver in the approval's group decides, and the mapped name is recorded. An unmapped
user, or an unusable users file, decides nothing (fail closed, counted as `unknown_approver`).

Slack wants an answer within 3 seconds and shows nothing of its body for a click, so a handled
click gets 200 at once and the person learns the outcome in Slack: the message is updated when
they decided, or they get a reply only they see saying why not (outside the group, already
decided, unknown id, not mapped).
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import orjson
from aiohttp import web
from cachetools import TTLCache
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from slack_sdk.signature import Clock, SignatureVerifier

from sidecar.admin.approvals import error_response
from sidecar.approvals import ApprovalService
from sidecar.approvals.approvers import (
    ApprovalForbidden,
    Channel,
    IdentityError,
    IdentityFile,
    RefusalReason,
    approver_from,
)
from sidecar.approvals.slack import SlackAction, SlackApprovals
from sidecar.config import ConfigError, SlackSettings
from sidecar.state import ApprovalConflict, ApprovalNotFound, Decision, StateUnavailable

log = logging.getLogger("sidecar.admin")

PATH = "/slack/interactions"
# Slack's own rule: a request whose timestamp is more than five minutes away may be a replay.
MAX_SKEW_S = 5 * 60
# Seen signatures are kept as long as their timestamp can pass the skew check (±5 minutes).
_SEEN_TTL_S = 2 * MAX_SKEW_S
_SEEN_MAX = 100_000
_DECISIONS: dict[str, Decision] = {SlackAction.APPROVE: "approved", SlackAction.DENY: "denied"}


class CallbackRefusal(StrEnum):
    """Why a callback was refused before any decision (`reason` label)."""

    SIGNATURE = "signature"
    STALE = "stale"
    REPLAYED = "replayed"
    MALFORMED = "malformed"


class _Clock(Clock):
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


class _User(BaseModel):
    id: str = Field(min_length=1)


class _Action(BaseModel):
    action_id: str
    value: str | None = None


class _Container(BaseModel):
    channel_id: str | None = None
    message_ts: str | None = None


class _Payload(BaseModel):
    """The parts of Slack's interaction payload read here (the rest is ignored)."""

    model_config = ConfigDict(extra="ignore")

    type: str
    user: _User
    actions: list[_Action] = Field(default_factory=list)
    container: _Container = Field(default_factory=_Container)


@dataclass(frozen=True, slots=True)
class Click:
    """One click on an approval button: who, which approval, what, and where to answer."""

    user: str
    approval_id: str
    decision: Decision
    channel: str | None
    message_ts: str | None


class MalformedCallback(ValueError):
    pass


def read_click(body: bytes) -> Click | None:
    """The click a (signed) body carries; None for an interaction that is not ours to handle."""
    try:
        form = urllib.parse.parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
        [raw] = form.get("payload") or [""]
        payload = _Payload.model_validate(orjson.loads(raw))
    except (UnicodeDecodeError, ValueError, ValidationError) as exc:
        # orjson.JSONDecodeError and pydantic's ValidationError are ValueErrors too.
        raise MalformedCallback("not a Slack interaction payload (form field `payload` with its JSON)") from exc
    if payload.type != "block_actions":
        return None
    for action in payload.actions:
        decision = _DECISIONS.get(action.action_id)
        if decision is not None:
            if not action.value:
                raise MalformedCallback(f"button {action.action_id} carries no approval id")
            container = payload.container
            return Click(payload.user.id, action.value, decision, container.channel_id, container.message_ts)
    return None


class SlackCallback:
    """The `POST /slack/interactions` handler: verify, map the user, decide, tell."""

    def __init__(
        self,
        settings: SlackSettings,
        service: ApprovalService,
        slack: SlackApprovals,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.service = service
        self.slack = slack
        self.now = now
        self.verifier = SignatureVerifier(settings.signing_secret, clock=_Clock(now))
        self.users = IdentityFile(settings.users_file, "Slack users file", Channel.SLACK.key)
        try:
            self.users.load_at_start()
        except IdentityError as exc:
            raise ConfigError(f"approvals.slack.users_file: {exc}") from None
        self._seen: TTLCache[str, bool] = TTLCache(maxsize=_SEEN_MAX, ttl=_SEEN_TTL_S, timer=now)

    def verify(self, body: bytes, headers: Mapping[str, str]) -> CallbackRefusal | None:
        timestamp = headers.get("X-Slack-Request-Timestamp", "")
        signature = headers.get("X-Slack-Signature", "")
        if not signature or not timestamp.isdigit():
            return CallbackRefusal.SIGNATURE
        if abs(self.now() - int(timestamp)) > MAX_SKEW_S:
            return CallbackRefusal.STALE
        try:
            valid = self.verifier.is_valid(body, timestamp, signature)
        except UnicodeDecodeError:  # Slack's bodies are UTF-8: this one is not Slack's
            valid = False
        if not valid:
            return CallbackRefusal.SIGNATURE
        if signature in self._seen:
            return CallbackRefusal.REPLAYED
        self._seen[signature] = True
        return None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        refusal = self.verify(body, request.headers)
        if refusal is not None:
            return self._refuse(refusal, 401, _REFUSAL_MESSAGES[refusal])
        try:
            click = read_click(body)
        except MalformedCallback as exc:
            return self._refuse(CallbackRefusal.MALFORMED, 400, str(exc))
        if click is None:
            return web.Response(status=200)
        return await self._decide(click)

    async def _decide(self, click: Click) -> web.Response:
        entry = self.users.entries().get(click.user)
        if entry is None:
            self.service.refused(Channel.SLACK, RefusalReason.UNKNOWN_APPROVER)
            why = self.users.problem or f"Slack user {click.user} is not in the Slack users file"
            log.warning("Slack decision on %s refused: %s", click.approval_id, why)
            self._tell(click, f"Nothing was decided: {why}.")
            return web.Response(status=200)
        approver = approver_from(entry, f"slack:{click.user}", Channel.SLACK)
        try:
            a = await self.service.decide(click.approval_id, click.decision, approver, None)
        except ApprovalForbidden as exc:
            self._tell(click, f"Nothing was decided: {exc}.")
        except ApprovalConflict as exc:
            self._tell(click, await self.service.conflict_message(click.approval_id, exc, click.decision) + ".")
        except ApprovalNotFound:
            self._tell(click, f"Nothing was decided: there is no approval {click.approval_id} (any more).")
        except StateUnavailable as exc:
            self._tell(click, "Nothing was decided: the approvals store is unavailable; try again.")
            return error_response(503, "state_unavailable", f"the approvals store is unavailable: {exc}")
        else:
            self.slack.decided(a, click.channel, click.message_ts)
        return web.Response(status=200)

    def _tell(self, click: Click, text: str) -> None:
        self.slack.tell(click.channel, click.user, text)

    def _refuse(self, reason: CallbackRefusal, status: int, message: str) -> web.Response:
        self.service.metrics.slack_callback_refused(reason)
        log.warning("Slack callback refused (%s): %s", reason.value, message)
        return error_response(status, "unauthorized" if status == 401 else "bad_request", message)


_REFUSAL_MESSAGES = {
    CallbackRefusal.SIGNATURE: "missing or invalid Slack signature (X-Slack-Signature, X-Slack-Request-Timestamp)",
    CallbackRefusal.STALE: f"X-Slack-Request-Timestamp is more than {MAX_SKEW_S} s from this host's clock",
    CallbackRefusal.REPLAYED: "this signed request was already received",
}


def add_slack_routes(app: web.Application, service: ApprovalService) -> None:
    """The callback route, only when Slack approvals are configured (otherwise the path is a 404)."""
    settings = service.settings.approvals.slack
    if settings is None or service.slack is None:
        return
    app.router.add_post(PATH, SlackCallback(settings, service, service.slack).handle)
