"""Admin HTTP API on its own port: never reachable through the proxy port."""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

from sidecar.admin.approvals import add_approval_routes
from sidecar.admin.auth import AdminAuth
from sidecar.admin.responses import json_response
from sidecar.approvals import ApprovalService
from sidecar.config import Settings
from sidecar.schemas.inventory import ToolInventory
from sidecar.schemas.inventory_lint import InventoryLint
from sidecar.telemetry.metrics import Metrics


class AdminBackend(Protocol):
    """What the admin API reads: the running sidecar (`sidecar.app.Sidecar`), seen from here."""

    settings: Settings
    metrics: Metrics
    approvals: ApprovalService
    tool_inventory: ToolInventory
    tool_lint: InventoryLint

    async def readiness(self) -> tuple[bool, dict[str, Any]]: ...


SIDECAR_KEY: web.AppKey[AdminBackend] = web.AppKey("sidecar")


def _json(data: object, status: int = 200) -> web.Response:
    return json_response(data, status)


async def healthz(request: web.Request) -> web.Response:
    return _json({"ok": True})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 200 while the sidecar can serve (docs/operations.md); what is degraded is listed."""
    ready, report = await request.app[SIDECAR_KEY].readiness()
    return _json({"ready": ready, **report}, 200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    sidecar = request.app[SIDECAR_KEY]
    await sidecar.tool_lint.refresh()  # sidecar_tool_lint_findings: new or changed declarations only
    body, content_type = sidecar.metrics.render(request.headers.get("Accept"))
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type
    return response


async def status(request: web.Request) -> web.Response:
    """One flat document: readiness, then the metrics summary (`tools` maps tool name → stats,
    tokens included), each tool with its current declarations (drift, lint) from the inventory."""
    sidecar = request.app[SIDECAR_KEY]
    ready, report = await sidecar.readiness()
    await sidecar.tool_lint.refresh()
    declarations = sidecar.tool_lint.declarations()
    summary = sidecar.metrics.status_summary(also=declarations)
    for name, declared in declarations.items():
        summary["tools"][name]["declarations"] = declared
    return _json({"ready": ready, **summary, **report})


async def tools(request: web.Request) -> web.Response:
    """The tool inventory: the latest declaration of each tool per agent and provider."""
    return _json(request.app[SIDECAR_KEY].tool_inventory.to_json())


def build_admin_app(sidecar: AdminBackend) -> web.Application:
    app = web.Application()
    app[SIDECAR_KEY] = sidecar
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/status", status)
    app.router.add_get("/v1/tools", tools)
    # Approvals: bearer token on every endpoint (sidecar/admin/approvals.py).
    add_approval_routes(app, sidecar.approvals, AdminAuth(sidecar.settings))
    # Slack interactive approvals (when configured): signed by Slack, not by a bearer token.
    if sidecar.approvals.slack is not None:
        from sidecar.admin.slack import add_slack_routes  # the Slack SDK only when configured

        add_slack_routes(app, sidecar.approvals)
    return app
