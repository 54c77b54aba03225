"""Admin API for approvals (admin port only; bearer token on every endpoint).

    GET  /approvals?status=&group=&tool=&session=   list (pending by default; status=all)
    GET  /approvals/{id}                            one approval
    POST /approvals/{id}/approve   {"by": "alice", "comment": "…"}
    POST /approvals/{id}/deny      {"by": "alice", "comment": "…"}

Reads are authenticated too: an approval carries (redacted) tool arguments and session ids.
Approver identity: `by` from the body when given (what people see, e.g. in the denial the
model gets), else the token's fingerprint (`token:1a2b3c4d`). The audit line always carries
the token fingerprint as well, so a `by` is attributable to the token that asserted it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, get_args

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sidecar.admin.auth import AdminAuth
from sidecar.admin.responses import json_response
from sidecar.approvals.service import approval_json
from sidecar.state import ApprovalConflict, ApprovalNotFound, ApprovalStatus, Decision, StateUnavailable

if TYPE_CHECKING:
    from sidecar.approvals.service import ApprovalService

SERVICE_KEY: web.AppKey[ApprovalService] = web.AppKey("approvals")
AUTH_KEY: web.AppKey[AdminAuth] = web.AppKey("admin_auth")
_IDENTITY: web.RequestKey[str] = web.RequestKey("admin_identity", str)
STATUSES = frozenset(get_args(ApprovalStatus))

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class DecisionBody(BaseModel):
    """Body of approve/deny. Both fields optional; unknown keys are an error (typos)."""

    model_config = ConfigDict(extra="forbid")

    by: str | None = Field(None, min_length=1, max_length=200)
    comment: str | None = Field(None, max_length=2000)


def _json(data: object, status: int = 200) -> web.Response:
    return json_response(data, status)


def _error(http_status: int, error: str, message: str, **extra: Any) -> web.Response:
    return _json({"error": error, "message": message, **extra}, http_status)


def authenticated(handler: Handler) -> Handler:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        result = request.app[AUTH_KEY].check(request.headers.get("Authorization"))
        if not result.ok:
            request.app[SERVICE_KEY].metrics.admin_unauthorized_request()
            response = _error(result.status, "unauthorized" if result.status == 401 else "forbidden", result.message)
            if result.status == 401:
                response.headers["WWW-Authenticate"] = 'Bearer realm="sidecar-admin"'
            return response
        request[_IDENTITY] = result.identity
        try:
            return await handler(request)
        except StateUnavailable as exc:
            return _error(503, "state_unavailable", f"the approvals store is unavailable: {exc}")

    return wrapped


@authenticated
async def list_approvals(request: web.Request) -> web.StreamResponse:
    query = request.query
    status: str | None = query.get("status") or "pending"
    if status == "all":
        status = None
    elif status not in STATUSES:
        return _error(400, "bad_request", f"status must be one of {', '.join(sorted(STATUSES))} or all")
    found = await request.app[SERVICE_KEY].store.list_approvals(
        status, query.get("group") or None, query.get("tool") or None, query.get("session") or None
    )
    return _json({"approvals": [approval_json(a) for a in found]})


@authenticated
async def show_approval(request: web.Request) -> web.StreamResponse:
    approval_id = request.match_info["id"]
    a = await request.app[SERVICE_KEY].store.get_approval(approval_id)
    if a is None:
        return _error(404, "not_found", f"no approval with id {approval_id}")
    return _json(approval_json(a))


async def _decide(request: web.Request, decision: Decision) -> web.StreamResponse:
    approval_id = request.match_info["id"]
    raw = await request.read()
    try:
        body = DecisionBody.model_validate(orjson.loads(raw) if raw.strip() else {})
    except orjson.JSONDecodeError:
        return _error(400, "bad_request", 'the body must be JSON, e.g. {"by": "alice", "comment": "ok"}')
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        return _error(400, "bad_request", problems)
    identity = request[_IDENTITY]
    service = request.app[SERVICE_KEY]
    try:
        a = await service.decide(approval_id, decision, body.by or identity, body.comment, identity)
    except ApprovalNotFound:
        return _error(404, "not_found", f"no approval with id {approval_id}")
    except ApprovalConflict as exc:
        current = await service.store.get_approval(approval_id)
        by = f" by {current.decided_by}" if current is not None and current.decided_by else ""
        return _error(
            409,
            "conflict",
            f"approval {approval_id} is already {exc.status}{by}; it can no longer be {decision}",
            status=exc.status,
        )
    return _json(approval_json(a))


@authenticated
async def approve(request: web.Request) -> web.StreamResponse:
    return await _decide(request, "approved")


@authenticated
async def deny(request: web.Request) -> web.StreamResponse:
    return await _decide(request, "denied")


def add_approval_routes(app: web.Application, service: ApprovalService, auth: AdminAuth) -> None:
    app[SERVICE_KEY] = service
    app[AUTH_KEY] = auth
    app.router.add_get("/approvals", list_approvals)
    app.router.add_get("/approvals/{id}", show_approval)
    app.router.add_post("/approvals/{id}/approve", approve)
    app.router.add_post("/approvals/{id}/deny", deny)
