"""Builds the two aiohttp applications (proxy port, admin port) and their lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sidecar.addons import Addons
from sidecar.admin.app import build_admin_app
from sidecar.approvals import ApprovalService
from sidecar.config import Settings
from sidecar.exchange.enforce import Enforcer
from sidecar.guards.approval import ApprovalGuard, ApprovalLookup
from sidecar.guards.arguments import ArgumentsGuard
from sidecar.guards.base import Guard, GuardChain
from sidecar.guards.policy import PolicyGuard
from sidecar.guards.replay import ReplayGuard, ReplayLedger, ToolTraits, store_health
from sidecar.guards.results import ResultMatcher
from sidecar.model import Provider
from sidecar.policy import EmbeddedEngine, build_engine
from sidecar.policy.results import ResultPolicy
from sidecar.policy.tool_list import ToolListFilter
from sidecar.proxy.handler import ProxyHandler, RepairChannel
from sidecar.proxy.upstream import Upstreams
from sidecar.state import build_store
from sidecar.state.continuations import Continuations
from sidecar.telemetry.logs import log_event
from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.observer import TelemetryAddon
from sidecar.telemetry.rejection_log import RejectionLog
from sidecar.telemetry.tracing import tracing_from_settings

log = logging.getLogger("sidecar")

# A component's readiness for /readyz: a dict with at least "ok" (sync or async).
HealthCheck = Callable[[], "dict[str, Any] | Awaitable[dict[str, Any]]"]


class Sidecar:
    """Every long-lived component of one sidecar process, wired together."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics(settings.telemetry.tool_label_cap)
        self.rejections = RejectionLog.from_settings(settings.rejection_log, self.metrics)
        self.addons = Addons([TelemetryAddon(self.metrics, self.rejections)])
        # Traces only when an OTLP endpoint is configured: otherwise no addon, no cost.
        self.tracing = tracing_from_settings(settings.telemetry)
        if self.tracing is not None:
            self.addons.add(self.tracing)
        self.upstreams = Upstreams(
            {Provider.ANTHROPIC: settings.anthropic_upstream, Provider.OPENAI: settings.openai_upstream},
            read_timeout_s=settings.upstream_timeout_s,
            connect_timeout_s=settings.upstream_connect_timeout_s,
        )
        # Ledger, replay index, approvals, Responses memo: memory, SQLite or shared Redis.
        self.state = build_store(settings.state)
        self.addons.add(ResultMatcher(self.state, self.metrics))
        self.addons.add(ReplayLedger(self.state, self.metrics))
        # Rego: a broken policy at startup is an error (PolicyLoadError); later a broken
        # revision keeps the last good one and /readyz says so.
        self.policy = build_engine(settings.policy, settings.policies, on_reload=self._policy_reloaded)
        self.metrics.policy_staleness(self.policy.stale_seconds)
        # side_effects / repeatable per tool: the embedded engine's data.json, kept current by
        # its reloads; with an OPA server, the local policies dir is read once.
        self.tool_traits = (
            ToolTraits(settings, self.policy.data)
            if isinstance(self.policy, EmbeddedEngine)
            else ToolTraits.from_settings(settings)
        )
        # After ResultMatcher: the policy sees matched results; session counts from the ledger.
        self.addons.add(ToolListFilter(settings, self.policy, self.metrics, self.state))
        self.addons.add(ResultPolicy(settings, self.policy, self.metrics, self.state))
        # Human approvals live in the same store (see sidecar/approvals/__init__.py).
        self.approvals = ApprovalService(settings, self.state, self.metrics)
        self.guards: list[Guard] = [
            ArgumentsGuard(settings),
            ReplayGuard(settings, self.state, self.tool_traits, self.metrics),
            # order: arguments → replay → policy → approval (which resolves APPROVAL verdicts)
            ApprovalLookup(self.approvals),
            PolicyGuard(settings, self.policy, self.metrics, self.state),
            ApprovalGuard(self.approvals),
        ]
        continuations = Continuations(store=self.state, on_state_error=self._state_error)
        self.enforcer = Enforcer(
            settings,
            GuardChain(self.guards),
            self.addons,
            RepairChannel(self.upstreams, self.addons),
            continuations,
        )
        self.handler = ProxyHandler(settings, self.upstreams, self.enforcer, self.addons, self.metrics)
        self.health_checks: dict[str, HealthCheck] = {"rejection_log": self.rejections.health}
        self.health_checks["policy"] = self.policy.health
        self.health_checks["state"] = store_health(self.state)

    def _state_error(self, _exc: Exception) -> None:
        self.metrics.state_error(self.state.name)

    def _policy_reloaded(self, ok: bool, error: str | None) -> None:
        if ok and isinstance(self.policy, EmbeddedEngine):
            self.tool_traits.update(self.policy.data)
        self.metrics.policy_reload(ok)
        log_event("policy_reload", level=logging.INFO if ok else logging.ERROR, ok=ok, error=error)

    async def start(self) -> None:
        await self.upstreams.start()
        if isinstance(self.policy, EmbeddedEngine):
            await self.policy.start()  # hot reload
        await self.approvals.start()  # expiry sweep and pending gauge

    async def close(self) -> None:
        await self.approvals.close()
        await self.policy.close()
        await self.upstreams.close()
        await asyncio.to_thread(self.rejections.close)
        await self.state.close()
        if self.tracing is not None:
            await self.tracing.aclose()

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        report: dict[str, Any] = {}
        for name, check in self.health_checks.items():
            try:
                result = check()
                report[name] = await result if inspect.isawaitable(result) else result
            except Exception as exc:
                report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return all(bool(part.get("ok", True)) for part in report.values()), report

    def proxy_app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes + 1)
        app.router.add_route("*", "/{tail:.*}", self.handler.handle)
        return app

    def admin_app(self) -> web.Application:
        return build_admin_app(self)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class Running:
    """Both ports bound; `proxy_url` / `admin_url` tell where (port 0 picks a free one)."""

    def __init__(self, sidecar: Sidecar, runners: list[web.AppRunner], urls: list[str]) -> None:
        self.sidecar = sidecar
        self.runners = runners
        self.proxy_url, self.admin_url = urls

    async def stop(self) -> None:
        for runner in self.runners:
            await runner.cleanup()
        await self.sidecar.close()


async def start(settings: Settings) -> Running:
    sidecar = Sidecar(settings)
    await sidecar.start()
    runners: list[web.AppRunner] = []
    urls: list[str] = []
    try:
        for app, address in ((sidecar.proxy_app(), settings.listen), (sidecar.admin_app(), settings.admin_listen)):
            runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
            await runner.setup()
            host, port = _split(address)
            site = web.TCPSite(runner, host, port)
            await site.start()
            runners.append(runner)
            bound = runner.addresses[0]
            urls.append(f"http://{host}:{bound[1]}")
        sidecar.approvals.admin_url = sidecar.approvals.admin_url or urls[1]  # links in notifications
    except BaseException:
        for runner in runners:
            await runner.cleanup()
        await sidecar.close()
        raise
    return Running(sidecar, runners, urls)


async def serve(settings: Settings, ready: Callable[[Running], None] | None = None) -> None:
    """Run until SIGINT/SIGTERM."""
    running = await start(settings)
    log.info("proxy on %s, admin on %s", running.proxy_url, running.admin_url)
    if ready is not None:
        ready(running)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await running.stop()
