"""The one place approvals are created, decided, consumed, waited for and expired.

Guards and the admin API both go through `ApprovalService`, so every state change is audited
(`log_event("approval", …)`), counted and reflected in the pending gauge the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from sidecar.approvals.approvers import ApprovalForbidden, Approver, Channel, DecisionRule, RefusalReason
from sidecar.approvals.notifier import WebhookNotifier
from sidecar.config import Settings
from sidecar.state import Approval, ApprovalConflict, ApprovalNotFound, Decision, StateStore, StateUnavailable
from sidecar.telemetry.logs import log_event
from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.redact import redact
from sidecar.timefmt import iso_or_none, iso_utc

if TYPE_CHECKING:  # imported when configured: the Slack SDK costs 3 MiB of memory otherwise
    from sidecar.approvals.slack import SlackApprovals

log = logging.getLogger("sidecar.approvals")


def _who(approver: Approver) -> dict[str, str]:
    """The audit line's view of an approver: never a token, only its fingerprint."""
    return {"approver": approver.name, "credential": approver.credential, "via": approver.via.value}


def approval_json(a: Approval) -> dict[str, Any]:
    """The admin API / CLI view of a record: its times as ISO-8601 UTC (stored as epoch seconds)."""
    data = asdict(a)
    data["created"] = iso_utc(a.created)
    data["expires"] = iso_utc(a.expires)
    data["decided_at"] = iso_or_none(a.decided_at)
    return data


class ApprovalService:
    def __init__(
        self,
        settings: Settings,
        store: StateStore,
        metrics: Metrics,
        notifier: WebhookNotifier | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.notifier = notifier or WebhookNotifier(settings.approvals, metrics)
        # Slack interactive approvals, when configured: the request message with its buttons.
        slack = settings.approvals.slack
        self.slack: SlackApprovals | None = None
        if slack is not None:
            from sidecar.approvals.slack import SlackApprovals

            self.slack = SlackApprovals(slack, metrics)
        # Who may decide what: the approval's group, or the operator's admin group.
        self.rule = DecisionRule(settings.approvals.admin_group)
        # Set by `sidecar.app.start` to the bound admin address unless configured.
        self.admin_url = (settings.approvals.admin_url or "").rstrip("/") or None
        self._waiters: dict[str, tuple[asyncio.Event, int]] = {}
        self._draining = False  # a drain began: holds end now, answered as deferred
        self._create_lock = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None

    def clock(self) -> float:
        """The store's clock, so lazy expiry and ours agree (and tests can move both)."""
        return self.store.limits.clock()

    def mode_for(self, tool: str) -> str:
        return self.settings.tool(tool).approval_mode or self.settings.approvals.mode

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await self.notifier.close()
        if self.slack is not None:
            await self.slack.close()

    async def _sweep_forever(self) -> None:
        while True:
            await self.sweep()
            await asyncio.sleep(self.settings.approvals.sweep_interval_s)

    async def sweep(self) -> list[Approval]:
        """Expire overdue approvals (each counted once, even across replicas), recount pending."""
        try:
            expired = await self.store.expire_approvals(self.clock())
        except StateUnavailable:
            self.metrics.state_error(self.store.name)
            return []
        except Exception:
            log.exception("expiring approvals failed")
            return []
        for a in expired:
            self.metrics.approval("expired")
            self._audit("expired", a)
            self._wake(a.id)
        await self.refresh_pending()
        return expired

    async def refresh_pending(self) -> None:
        """Set the gauge from the store: the truth for every replica sharing it."""
        try:
            pending = await self.store.list_approvals("pending")
        except StateUnavailable:
            self.metrics.state_error(self.store.name)
            return
        self.metrics.approvals_pending(len(pending))

    # -- the call side -------------------------------------------------------------------

    async def find(self, session: str, tool: str, args_hash: str) -> Approval | None:
        return await self.store.find_approval(session, tool, args_hash)

    async def find_or_create(
        self,
        session: str,
        tool: str,
        arguments: dict[str, Any],
        args_hash: str,
        group: str,
        ttl_s: int,
        reasons: list[str],
    ) -> tuple[Approval, bool]:
        """The usable approval for this exact call, or a new pending one (created=True).

        Serialised in-process so two identical calls of one turn share one record.
        """
        async with self._create_lock:
            existing = await self.store.find_approval(session, tool, args_hash)
            now = self.clock()
            if existing is not None and (
                existing.status in ("pending", "denied") or (existing.status == "approved" and now < existing.expires)
            ):
                return existing, False
            matcher = self.settings.rejection_log.redact_keys
            a = Approval(
                id="apr_" + secrets.token_hex(10),
                session=session,
                tool=tool,
                arguments=redact(arguments, matcher),
                args_hash=args_hash,
                group=group,
                reasons=list(reasons),
                created=now,
                expires=now + ttl_s,
            )
            await self.store.create_approval(a)
        self._audit("requested", a)
        self.notifier.notify(self.webhook_payload(a))
        if self.slack is not None:
            self.slack.request(a)
        # O(1) per approval (a recount lists every pending one): the sweep recounts from the
        # store every `sweep_interval_s`, which also brings in other replicas' approvals.
        self.metrics.approvals_pending_add(1)
        return a, True

    async def consume(self, a: Approval, call_id: str) -> bool:
        """Exactly once: the store's atomic approved → consumed."""
        ok = await self.store.consume_approval(a.id, self.clock())
        if ok:
            self._audit("consumed", a, call_id=call_id)
        return ok

    async def wait(self, approval_id: str, timeout_s: float) -> Approval | None:
        """Hold mode: until the approval is no longer pending or `timeout_s` passes.

        Decisions taken by this process wake the waiter at once; decisions taken through
        another replica (shared Redis) are seen by polling every `poll_interval_s`.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        event, users = self._waiters.get(approval_id, (asyncio.Event(), 0))
        self._waiters[approval_id] = (event, users + 1)
        try:
            while True:
                a = await self.store.get_approval(approval_id)
                remaining = deadline - loop.time()
                if a is None or a.status != "pending" or remaining <= 0 or self._draining:
                    return a
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(self.settings.approvals.poll_interval_s, remaining))
        finally:
            event, users = self._waiters[approval_id]
            if users <= 1:
                del self._waiters[approval_id]
            else:
                self._waiters[approval_id] = (event, users - 1)

    def release_holds(self) -> None:
        """A drain began: every held call is answered now (still pending: deferred), and calls
        that would be held from now on are deferred at once."""
        self._draining = True
        for event, _ in self._waiters.values():
            event.set()

    def _wake(self, approval_id: str) -> None:
        entry = self._waiters.get(approval_id)
        if entry is not None:
            entry[0].set()

    # -- the human side ------------------------------------------------------------------

    async def decide(self, approval_id: str, decision: Decision, approver: Approver, comment: str | None) -> Approval:
        """Atomic pending → approved/denied, recorded as decided by `approver.name`.

        Only an approver in the approval's group (or the admin group) may decide: anyone else
        gets ApprovalForbidden, counted and audited, and nothing changes. The group of a record
        never changes, so checking it before the atomic decision is not a race.
        Raises ApprovalForbidden / ApprovalConflict / ApprovalNotFound."""
        current = await self.store.get_approval(approval_id)
        if current is None:
            raise ApprovalNotFound(approval_id)
        if not self.rule.allows(approver, current.group):
            self.refused(approver.via, RefusalReason.OUTSIDE_GROUP)
            self._audit("refused", current, **_who(approver), attempted=decision)
            raise ApprovalForbidden(approval_id, current.group, approver)
        a = await self.store.decide_approval(approval_id, decision, approver.name, comment, self.clock())
        self.metrics.approval(decision)
        self._audit(decision, a, **_who(approver), via_admin_group=current.group not in approver.groups)
        self._wake(approval_id)
        await self.refresh_pending()
        return a

    async def conflict_message(self, approval_id: str, conflict: ApprovalConflict, decision: Decision) -> str:
        """What a person is told when someone else decided first (or the approval expired)."""
        current = await self.store.get_approval(approval_id)
        by = f" by {current.decided_by}" if current is not None and current.decided_by else ""
        return f"approval {approval_id} is already {conflict.status}{by}; it can no longer be {decision}"

    def refused(self, via: Channel, reason: RefusalReason) -> None:
        """A decision refused after authentication (outside the group, an unmapped Slack user)."""
        self.metrics.approval_decision_refused(via, reason)

    # -- audit and notification ------------------------------------------------------------

    def _audit(self, action: str, a: Approval, **extra: Any) -> None:
        log_event(
            "approval",
            action=action,
            approval_id=a.id,
            tool=a.tool,
            session=a.session,
            group=a.group,
            reasons=a.reasons,
            arguments=a.arguments,
            args_hash=a.args_hash,
            expires=iso_utc(a.expires),
            decided_by=a.decided_by,
            comment=a.comment,
            **extra,
        )

    def webhook_payload(self, a: Approval) -> dict[str, Any]:
        base = self.admin_url or f"http://{self.settings.admin_listen}"
        return {
            "event": "approval_requested",
            "id": a.id,
            "tool": a.tool,
            "session": a.session,
            "group": a.group,
            "reasons": a.reasons,
            "arguments": a.arguments,
            "args_hash": a.args_hash,
            "created": iso_utc(a.created),
            "expires": iso_utc(a.expires),
            "approve_url": f"{base}/approvals/{a.id}/approve",
            "deny_url": f"{base}/approvals/{a.id}/deny",
            "show_url": f"{base}/approvals/{a.id}",
        }
