"""Admin API for approvals (admin port only; bearer token on every endpoint).

    GET  /approvals?status=&group=&tool=&session=   list (pending by default; status=all)
    GET  /approvals/{id}                            one approval
    POST /approvals/{id}/approve   {"comment": "…"}
    POST /approvals/{id}/deny      {"comment": "…"}

A token is an approver (sidecar/admin/auth.py): its name is recorded as `decided_by`, and it
sees and decides only approvals of its groups (every group for `approvals.admin_group`). Anyone
else gets 403 with the reason, counted (`sidecar_approval_decisions_refused_total`) and audited.
A `by` in the body is refused (400): nobody names the approver but the token. Reads are
authenticated and scoped too: an approval carries (redacted) tool arguments and session ids.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, get_args

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sidecar.admin.auth import AdminAuth
from sidecar.admin.responses import json_response
from sidecar.approvals.approvers import ApprovalForbidden, Approver
from sidecar.approvals.service import approval_json
from sidecar.state import ApprovalConflict, ApprovalNotFound, ApprovalStatus, Decision, StateUnavailable

if TYPE_CHECKING:
    from sidecar.approvals.service import ApprovalService

SERVICE_KEY: web.AppKey[ApprovalService] = web.AppKey("approvals")
AUTH_KEY: web.AppKey[AdminAuth] = web.AppKey("admin_auth")
_APPROVER: web.RequestKey[Approver] = web.RequestKey("admin_approver", Approver)
STATUSES = frozenset(get_args(ApprovalStatus))

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class DecisionBody(BaseModel):
    """Body of approve/deny. `comment` optional; unknown keys are an error (typos)."""

    model_config = ConfigDict(extra="forbid")

    comment: str | None = Field(None, max_length=2000)


def _json(data: object, status: int = 200) -> web.Response:
    return json_response(data, status)


def error_response(http_status: int, error: str, message: str, **extra: Any) -> web.Response:
    """The admin API's error shape: `{"error": code, "message": what to do, …}`."""
    return _json({"error": error, "message": message, **extra}, http_status)


def authenticated(handler: Handler) -> Handler:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        result = request.app[AUTH_KEY].check(request.headers.get("Authorization"))
        if result.approver is None:
            request.app[SERVICE_KEY].metrics.admin_unauthorized_request()
            response = error_response(
                result.status, "unauthorized" if result.status == 401 else "forbidden", result.message
            )
            if result.status == 401:
                response.headers["WWW-Authenticate"] = 'Bearer realm="sidecar-admin"'
            return response
        request[_APPROVER] = result.approver
        try:
            return await handler(request)
        except StateUnavailable as exc:
            return error_response(503, "state_unavailable", f"the approvals store is unavailable: {exc}")
        except ApprovalForbidden as exc:
            return error_response(403, "forbidden", str(exc), group=exc.group)

    return wrapped


def _caller(request: web.Request) -> dict[str, Any]:
    """Who the API took the caller for: what their token says, and whether they see every group."""
    approver = request[_APPROVER]
    every = request.app[SERVICE_KEY].rule.all_groups(approver)
    return {"name": approver.name, "groups": sorted(approver.groups), "all_groups": every}


@authenticated
async def list_approvals(request: web.Request) -> web.StreamResponse:
    """The approvals of the caller's groups (all of them for the admin group), filtered further
    by the query; asking for a group the caller is not in is a 403, not an empty list."""
    query = request.query
    status: str | None = query.get("status") or "pending"
    if status == "all":
        status = None
    elif status not in STATUSES:
        return error_response(400, "bad_request", f"status must be one of {', '.join(sorted(STATUSES))} or all")
    service, approver = request.app[SERVICE_KEY], request[_APPROVER]
    group = query.get("group") or None
    if group is not None and not service.rule.allows(approver, group):
        return error_response(
            403, "forbidden", f"{approver.describe()} may not see approvals of group {group}", group=group
        )
    found = await service.store.list_approvals(status, group, query.get("tool") or None, query.get("session") or None)
    visible = [a for a in found if service.rule.allows(approver, a.group)]
    return _json({"approvals": [approval_json(a) for a in visible], "caller": _caller(request)})


@authenticated
async def show_approval(request: web.Request) -> web.StreamResponse:
    approval_id = request.match_info["id"]
    service, approver = request.app[SERVICE_KEY], request[_APPROVER]
    a = await service.store.get_approval(approval_id)
    if a is None:
        return error_response(404, "not_found", f"no approval with id {approval_id}")
    if not service.rule.allows(approver, a.group):
        raise ApprovalForbidden(approval_id, a.group, approver)
    return _json(approval_json(a))


async def _decide(request: web.Request, decision: Decision) -> web.StreamResponse:
    approval_id = request.match_info["id"]
    approver = request[_APPROVER]
    raw = await request.read()
    try:
        data = orjson.loads(raw) if raw.strip() else {}
        if isinstance(data, dict) and "by" in data:
            return error_response(
                400,
                "bad_request",
                f"'by' is not accepted: the approver is the identity of your token ({approver.name})",
            )
        body = DecisionBody.model_validate(data)
    except orjson.JSONDecodeError:
        return error_response(
            400, "bad_request", 'the body must be JSON, e.g. {"comment": "checked with the customer"}'
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        return error_response(400, "bad_request", problems)
    service = request.app[SERVICE_KEY]
    try:
        a = await service.decide(approval_id, decision, approver, body.comment)
    except ApprovalNotFound:
        return error_response(404, "not_found", f"no approval with id {approval_id}")
    except ApprovalConflict as exc:
        return error_response(
            409, "conflict", await service.conflict_message(approval_id, exc, decision), status=exc.status
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
