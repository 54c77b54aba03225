"""Human approval: bind a policy's "needs approval" to the exact call a person reviews.

One filter, two steps around the policy (the chain runs every filter's `look_up` before any
`on_call`):

- `look_up` fills `check.approval` (status, id, approved_by) from the store, so the policy can
  say "approved satisfies the requirement" (`input.approval.status`).
- `on_call` (after the policy) resolves its APPROVAL verdict: creates the approval (defer: tell
  the model it awaits approval; hold: wait for the decision), reports a denial, or lets an
  approved call through *once* by consuming the approval atomically.

The model cannot approve itself: an approval is keyed by session, tool and arguments hash
and decided only through the admin port. Whatever the model writes (text, an `approved: true`
argument) is at best a different call, which no approval covers.
"""

from __future__ import annotations

import logging

from sidecar.approvals.service import ApprovalService
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import ApprovalFacts, CallCheck, ExchangeKey
from sidecar.model import Verdict, VerdictKind
from sidecar.state import Approval, StateUnavailable

log = logging.getLogger("sidecar.approvals")

DEFAULT_GROUP = "operators"
# Approvals consumed by this exchange: id → the round that used it.
_RESERVED: ExchangeKey[dict[str, int]] = ExchangeKey("approvals")


def awaiting(a: Approval, reasons: list[str]) -> Verdict:
    """The deferred answer the model gets: who must approve, and what to do next."""
    return Verdict(
        VerdictKind.APPROVAL,
        "approval_required",
        reasons=list(reasons),
        retryable=True,
        details={
            "approval_id": a.id,
            "instructions": (
                f"Tell the user this action awaits approval by {a.group} (id {a.id}) and "
                "re-issue the identical call once it is approved."
            ),
        },
    )


def denied(a: Approval) -> Verdict:
    who = a.decided_by or "an approver"
    reason = f"denied by {who}: {a.comment}" if a.comment else f"denied by {who}"
    return Verdict(VerdictKind.DENY, "denied", reasons=[reason], retryable=False, details={"approval_id": a.id})


def expired(a: Approval) -> Verdict:
    return Verdict(
        VerdictKind.DENY,
        "denied",
        reasons=[f"approval {a.id} expired before anyone decided; re-issue the call to request a new one"],
        retryable=True,
        details={"approval_id": a.id},
    )


class ApprovalFilter(Filter):
    """What a human decided about a call (before the policy), and what the policy's "needs
    approval" becomes (after it): a request, a decision, or one allowed call.

    Critical: an approval that cannot be looked up, created or consumed never lets a call through.
    """

    name = "approval"
    critical = True
    resolves = frozenset({VerdictKind.APPROVAL})
    # An MCP execution of a call the model path delivered was approved (and the approval
    # consumed) there: the one approval covers exactly that execution.
    decides_once = True

    def __init__(self, service: ApprovalService) -> None:
        self.service = service

    async def look_up(self, check: CallCheck) -> None:
        call = check.call
        if call.arguments is None or not call.kind.runs_on_client:
            return  # a server call cannot wait for a person: it already ran (see PolicyFilter)
        try:
            a = await self.service.find(check.exchange.session, call.name, call.args_hash)
        except StateUnavailable:
            return  # "none": the policy asks for an approval, and `on_call` fails closed
        if a is None:
            return
        status: str = a.status
        used_in = check.exchange.setdefault(_RESERVED, dict).get(a.id, check.round)
        if status == "approved" and self.service.clock() >= a.expires:
            status = "expired"  # approved too late to use: the policy must not count it
        elif status == "consumed" and used_in < check.round:
            status = "approved"  # used by this exchange in an earlier round, not delivered (see _reused)
        check.approval = ApprovalFacts(status, a.id, a.decided_by if status == "approved" else None)

    async def on_call(self, check: CallCheck) -> Verdict | None:
        kind = check.verdict.kind
        try:
            if kind is VerdictKind.ALLOW:
                # The policy allowed because a human approved: use the approval up, once.
                if check.approval.status == "approved" and check.approval.id:
                    return await self._use_approved(check)
                return None
            if kind is VerdictKind.APPROVAL:
                return await self._resolve(check)
        except StateUnavailable:
            if kind is VerdictKind.ALLOW:
                return None
            return Verdict(
                VerdictKind.APPROVAL,
                "approval_required",
                reasons=[
                    *check.verdict.reasons,
                    "approvals are unavailable right now (state backend down); try again later",
                ],
                retryable=True,
            )
        return None

    # -- helpers ---------------------------------------------------------------------------

    def _reused(self, check: CallCheck, approval_id: str) -> bool:
        """An approval this exchange consumed in an earlier round, whose call was not delivered.

        A turn with one refused call is re-issued as a whole (`not_run`); the approved call
        in it must not need a second approval. Once per round, and only one round's calls
        ever reach the agent, so the approval still lets through one delivery.
        """
        reserved = check.exchange.setdefault(_RESERVED, dict)
        used_in = reserved.get(approval_id)
        if used_in is not None and used_in < check.round:
            reserved[approval_id] = check.round
            return True
        return False

    async def _consume(self, check: CallCheck, a: Approval) -> bool:
        if self._reused(check, a.id):
            return True
        if await self.service.consume(a, check.call.id):
            check.exchange.setdefault(_RESERVED, dict)[a.id] = check.round
            return True
        return False

    async def _use_approved(self, check: CallCheck) -> Verdict | None:
        call = check.call
        a = await self.service.find(check.exchange.session, call.name, call.args_hash)
        if a is not None and a.id == check.approval.id and await self._consume(check, a):
            return None
        # Used up by an identical call a moment ago, or expired: this call needs its own.
        group = a.group if a is not None else DEFAULT_GROUP
        reasons = [f"approval {check.approval.id} was already used or has expired; this call needs a new one"]
        return await self._request(check, group, self.service.settings.approvals.default_ttl_s, reasons)

    async def _resolve(self, check: CallCheck) -> Verdict:
        verdict = check.verdict
        request = check.approval_request or verdict.details.get("approval") or {}
        group = str(request.get("group") or DEFAULT_GROUP)
        ttl = request.get("ttl_s")
        ttl_s = int(ttl) if isinstance(ttl, (int, float)) and ttl > 0 else self.service.settings.approvals.default_ttl_s
        reasons = list(verdict.reasons or check.policy_reasons)
        return await self._request(check, group, ttl_s, reasons)

    async def _request(self, check: CallCheck, group: str, ttl_s: int, reasons: list[str]) -> Verdict:
        call = check.call
        if call.arguments is None:  # lockdown refuses these first; never bind an approval to them
            return Verdict(VerdictKind.APPROVAL, "approval_required", reasons=reasons, retryable=True)
        held = check.approval.id
        if held and check.approval.status == "approved" and self._reused(check, held):
            return Verdict.allow()
        session = check.exchange.session
        a, _created = await self.service.find_or_create(
            session, call.name, call.arguments, call.args_hash, group, ttl_s, reasons
        )
        if a.status == "approved":
            if await self._consume(check, a):
                return Verdict.allow()
            a, _created = await self.service.find_or_create(
                session, call.name, call.arguments, call.args_hash, group, ttl_s, reasons
            )
        if a.status == "denied":
            return denied(a)
        if a.status == "pending" and self.service.mode_for(call.name) == "hold":
            return await self._hold(check, a, reasons)
        return awaiting(a, reasons)

    async def _hold(self, check: CallCheck, a: Approval, reasons: list[str]) -> Verdict:
        """Wait for the decision (streams get keep-alives meanwhile); on timeout, defer."""
        final = await self.service.wait(a.id, self.service.settings.approvals.hold_timeout_s)
        if final is None or final.status == "pending":
            return awaiting(a, reasons)
        if final.status == "approved":
            if await self._consume(check, final):
                return Verdict.allow()
            return Verdict(
                VerdictKind.DENY,
                "denied",
                retryable=True,
                details={"approval_id": a.id},
                reasons=[f"approval {a.id} was used by an identical call; re-issue to request a new one"],
            )
        if final.status == "denied":
            return denied(final)
        return expired(final)
