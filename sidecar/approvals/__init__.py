"""Human approval of risky tool calls (issue 5).

How it fits together:

- The policy says a call needs a human (`require_approval`); `guards.approval.ApprovalGuard`
  turns that into an `Approval` record bound to the exact session, tool and arguments hash,
  and tells the model it awaits approval (defer mode), or waits for the decision (hold mode).
- People decide on the admin port only: with a bearer token (`admin.approvals`,
  `sidecar approvals …`) or a signed Slack click (`admin.slack`). Either way the caller is an
  `Approver` (a name and groups, `approvers.py`) and only one in the approval's group decides;
  its name is what is recorded. Nothing on the proxy port and nothing a model writes can decide
  anything: the only writer of a decision is `ApprovalService.decide`.
- Once approved, the identical call (same session, tool, arguments hash) passes exactly once
  (`consume_approval` is atomic in every backend), within the approval's lifetime.

Where approvals live: in the state store that `state.backend` selects, with the ledger.
`memory` (the default) keeps them for the life of the process only: after a restart, pending
approvals are gone and the call simply needs a new approval (nothing is ever approved by
losing state). `sqlite` (`state.sqlite_path`) survives restarts of a single pod; `redis`
survives restarts and is shared by every replica, so a decision made through any replica's
admin port is seen by all. Production deployments that use approvals should pick one of those.
"""

from sidecar.approvals.notifier import WebhookNotifier
from sidecar.approvals.service import ApprovalService

__all__ = ["ApprovalService", "WebhookNotifier"]
