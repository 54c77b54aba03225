"""Builds the two aiohttp applications (proxy port, admin port) and their lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from sidecar.admin.app import build_admin_app
from sidecar.approvals import ApprovalService
from sidecar.config import Settings
from sidecar.exchange.filters import Filter, FilterChain
from sidecar.exchange.legs import LegIndex
from sidecar.exchange.runner import ExchangeRunner, UpstreamError
from sidecar.exchange.state import Exchange
from sidecar.filters.approval import ApprovalFilter
from sidecar.filters.arguments import ArgumentsFilter
from sidecar.filters.conversation import ProviderStateFilter
from sidecar.filters.cost import CostFilter
from sidecar.filters.drift import DriftFilter
from sidecar.filters.legs import LegsFilter
from sidecar.filters.policy import PolicyFilter
from sidecar.filters.replay import ReplayFilter
from sidecar.filters.result_policy import ResultPolicy, result_rules
from sidecar.filters.results import ResultMatcher
from sidecar.filters.stored import StoredRepliesFilter
from sidecar.filters.telemetry import TelemetryFilter
from sidecar.filters.tool_list import ToolListFilter
from sidecar.inspection import MarkerError
from sidecar.mcp.runner import McpRunner
from sidecar.model import Provider, RefusalReason
from sidecar.policy import EmbeddedEngine, build_engine
from sidecar.policy.inputs import agent_identity
from sidecar.policy.traits import ToolTraits, data_overlay
from sidecar.proxy.handler import ProxyHandler, UpstreamChannel
from sidecar.proxy.history import HistoryScreen
from sidecar.proxy.mcp import McpHandler, UpstreamMcp
from sidecar.proxy.upstream import Upstreams
from sidecar.schemas.drift import DriftWatch
from sidecar.schemas.inventory import ToolInventory
from sidecar.schemas.inventory_lint import InventoryLint
from sidecar.startup import PortBindError, PortPurpose, startup_fields
from sidecar.state import StateUnavailable, build_store
from sidecar.state.continuations import Continuations
from sidecar.state.guarded import GuardedStore
from sidecar.state.refused import RefusedCalls
from sidecar.telemetry.logs import WRITER, log_event
from sidecar.telemetry.loop_lag import LoopLagMonitor
from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.rejection_log import RejectionLog

if TYPE_CHECKING:
    from sidecar.filters.tracing import TracingFilter

log = logging.getLogger("sidecar")

# A component's readiness for /readyz: a dict with at least "ok" (sync or async).
HealthCheck = Callable[[], "dict[str, Any] | Awaitable[dict[str, Any]]"]
# A critical filter failure keeps /readyz unready this long (then it recovers on its own).
FILTER_FAILURE_WINDOW_S = 60.0


class Sidecar:
    """Every long-lived component of one sidecar process, wired together."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics(settings.telemetry.tool_label_cap)
        self.rejections = RejectionLog.from_settings(settings.rejection_log, self.metrics)
        # Latest declaration of each tool (GET /v1/tools); fed per request by the drift filter.
        self.tool_inventory = ToolInventory(settings.inventory)
        # Its declarations linted off the request path (/v1/status, sidecar_tool_lint_findings).
        self.tool_lint = InventoryLint(self.tool_inventory, settings)
        self.metrics.lint_findings(self.tool_lint.counts)
        self.upstreams = Upstreams(
            {Provider.ANTHROPIC: settings.anthropic_upstream, Provider.OPENAI: settings.openai_upstream},
            read_timeout_s=settings.upstream_timeout_s,
            connect_timeout_s=settings.upstream_connect_timeout_s,
        )
        # Ledger, replay index, approvals, Responses memo: memory, SQLite or shared Redis, behind
        # one guard: any backend error is "state unavailable", counted, and on /readyz.
        self.state: GuardedStore = build_store(settings.state, on_error=self.metrics.state_error)
        # Rego: a broken policy at startup is an error (PolicyLoadError); later a broken
        # revision keeps the last good one and /v1/status says so.
        self.policy = build_engine(
            settings.policy, settings.policies, on_reload=self._policy_reloaded, data_overlay=data_overlay(settings)
        )
        self.metrics.policy_staleness(self.policy.stale_seconds)
        # side_effects / repeatable per tool: the policy data in force (the configuration's traits
        # written into it), kept current by reloads; with an OPA server, its files, read once.
        self.tool_traits = (
            ToolTraits(settings, self.policy.data)
            if isinstance(self.policy, EmbeddedEngine)
            else ToolTraits.from_settings(settings)
        )
        # Untrusted tools, result size limits, injection markers: the same policy data, kept
        # current by reloads (with an OPA server: its files, read once).
        self.result_rules = result_rules(settings, self.policy)
        self.result_policy = ResultPolicy(settings, self.policy, self.metrics, self.state, self.result_rules)
        # Human approvals live in the same store (see sidecar/approvals/__init__.py).
        self.approvals = ApprovalService(settings, self.state, self.metrics)
        # Traces only when an OTLP endpoint is configured: otherwise no filter, no cost (not
        # even the OpenTelemetry SDK's import: 2 MiB of memory).
        self.tracing: TracingFilter | None = None
        if settings.telemetry.otlp_endpoint:
            from sidecar.filters.tracing import TracingFilter

            self.tracing = TracingFilter(settings.telemetry)
        # Calls refused in responses the provider keeps: never handed out by a read-back.
        self.refused_calls = RefusedCalls(self.state)
        # Model-path calls the MCP path may execute: one logical call across both (docs/mcp.md).
        self.legs = LegIndex(settings.mcp.correlation_window_s)
        self.filters = self._filters(Continuations(store=self.state))
        self._filter_failures: dict[str, tuple[float, str]] = {}
        self.chain = FilterChain(self.filters, on_failure=self._filter_failed)
        self.runner = ExchangeRunner(
            settings, self.chain, UpstreamChannel(self.upstreams), self._refused, self._exchange_upstream_failed
        )
        # The MCP path: the same chain, its own sequence (sidecar/mcp/runner.py).
        self.metrics.mcp_servers(settings.mcp.servers)
        self.mcp_runner = McpRunner(
            settings, self.chain, UpstreamMcp(self.upstreams), self.legs, self.metrics, self._refused, self._mcp_failed
        )
        self.handler = ProxyHandler(
            settings,
            self.upstreams,
            self.runner,
            self._refused,
            self._upstream_failed,
            self._passthrough,
            HistoryScreen(self.refused_calls),
            McpHandler(settings, self.mcp_runner, self.upstreams, self._refused),
        )
        self.health_checks: dict[str, HealthCheck] = {
            "rejection_log": self.rejections.health,
            "policy": self.policy.health,
            "state": self._state_health,
            "filters": self._filters_health,
        }
        self._loop_lag = LoopLagMonitor(self.metrics.loop_lag.observe)
        # When a drain began (SIGTERM): /readyz answers 503 from then on.
        self.draining: float | None = None
        self._closing = contextlib.AsyncExitStack()
        self._closes("state", self.state.close)
        self._closes("rejection log", lambda: asyncio.to_thread(self.rejections.close))
        if self.tracing is not None:
            self._closes("tracing", self.tracing.aclose)

    def _filters(self, continuations: Continuations) -> list[Filter]:
        """The chain, in order. Each hook runs over the filters in this order."""
        s, state, metrics = self.settings, self.state, self.metrics
        filters: list[Filter] = [
            # What the provider holds (message threads, Responses chains, conversations): restores
            # the session and a thread's tools every later filter works with, and fixes the request
            # up (withheld calls answered, the continued id) before anyone reads it.
            ProviderStateFilter(continuations, state),
        ]
        if self.tracing is not None:
            # Traces: early, so its span is current while the others run (log lines carry it).
            filters.append(self.tracing)
        filters += [
            # Metrics and logs; before tool_list, because it admits declared tool names as labels.
            TelemetryFilter(metrics, self.rejections),
            # Declarations into the inventory; a changed one is counted and logged with its diff.
            DriftFilter(DriftWatch(self.tool_inventory, metrics, agent_identity(s)["id"])),
            # Tool results matched to their calls (ex.results) before anyone hears them.
            ResultMatcher(state),
            # Every result (history included) inspected and decided; withheld or redacted in the
            # request before it goes upstream, and before anyone sizes or remembers it (on_result).
            self.result_policy,
            # Tokens per tool (an estimate): after results, which names each result by its call.
            CostFilter(metrics),
            # Hidden tools leave the request before it goes upstream.
            ToolListFilter(s, self.policy, metrics, state),
            # The call checks, in this order: the first refusal wins and later filters see the
            # earlier findings (the policy input carries validation, replay and approval facts).
            # First: a call refused when its stored response was created stays refused.
            StoredRepliesFilter(self.refused_calls),
            ArgumentsFilter(s),
            ReplayFilter(s, state, self.tool_traits, metrics),
            PolicyFilter(s, self.policy, metrics, state),
            # Resolves the policy's "needs approval"; its lookup runs before the policy decides.
            ApprovalFilter(self.approvals),
            # Delivered and finally refused model-path calls, for the MCP path to recognise
            # their executions (one decision, one ledger entry, one count). Last: it only reads.
            LegsFilter(self.legs),
        ]
        return filters

    def add_filter(self, extra: Filter) -> None:
        """Append a filter at the end of the chain (an embedding's own observer, a test probe)."""
        self.filters.append(extra)
        self.chain.add(extra)

    # -- reporting -------------------------------------------------------------------------

    def _filter_failed(self, name: str, hook: str, exc: BaseException, critical: bool) -> None:
        self.metrics.filter_error(name, hook, critical)
        # A store that failed is the state component's to report (it recovers with the next
        # successful write); other failures of a critical filter keep /readyz unready a while.
        if critical and not isinstance(exc, StateUnavailable):
            self._filter_failures[name] = (time.time(), f"{hook}: {type(exc).__name__}: {exc}")

    def _filters_health(self) -> dict[str, Any]:
        now = time.time()
        recent = {
            name: {"at": at, "error": error}
            for name, (at, error) in self._filter_failures.items()
            if now - at < FILTER_FAILURE_WINDOW_S
        }
        report: dict[str, Any] = {"ok": not recent, "chain": self.chain.names()}
        if recent:
            report["failing"] = recent
        return report

    async def _state_health(self) -> dict[str, Any]:
        ok = await self.state.healthy()
        report: dict[str, Any] = {"ok": ok, "backend": self.state.name, **self.state.health()}
        if not ok:
            report["error"] = f"state backend {self.state.name} is unavailable"
        return report

    def _refused(self, reason: RefusalReason, path: str, message: str) -> None:
        self.metrics.request_refused(reason.value)
        log_event("request_refused", level=logging.WARNING, log=log, reason=reason.value, path=path, message=message)

    def _upstream_failed(self, provider: Provider, exc: UpstreamError, path: str) -> None:
        """No HTTP answer from the upstream: counted by cause, never as an upstream 502."""
        self.metrics.upstream_error(provider.value, exc.cause.value)
        log_event(
            "upstream_error",
            level=logging.WARNING,
            log=log,
            provider=provider.value,
            path=path,
            cause=exc.cause.value,
            error=exc.message,
            status=exc.status,
        )

    def _mcp_failed(self, server: str, exc: UpstreamError) -> None:
        self.metrics.upstream_error(Provider.MCP.value, exc.cause.value)
        log_event(
            "upstream_error",
            level=logging.WARNING,
            log=log,
            provider=Provider.MCP.value,
            server=server,
            cause=exc.cause.value,
            error=exc.message,
            status=exc.status,
        )

    def _exchange_upstream_failed(self, ex: Exchange, exc: UpstreamError) -> None:
        self._upstream_failed(ex.provider, exc, ex.url.path)

    def _passthrough(self, provider: Provider, method: str, path: str, path_class: str, status: int) -> None:
        self.metrics.passthrough_request(provider.value, path_class)
        log_event(
            "passthrough",
            log=log,
            provider=provider.value,
            method=method,
            path=path,
            path_class=path_class,
            status=status,
        )

    def _policy_reloaded(self, ok: bool, error: str | None) -> None:
        if ok and isinstance(self.policy, EmbeddedEngine):
            self.tool_traits.update(self.policy.data)
            try:
                self.result_rules.update(self.policy.data)
            except MarkerError as exc:  # `policy check` refuses these: the previous markers stay
                log_event("result_rules_reload", level=logging.ERROR, ok=False, error=str(exc))
            self.result_policy.policy_reloaded()
        self.metrics.policy_reload(ok)
        log_event("policy_reload", level=logging.INFO if ok else logging.ERROR, ok=ok, error=error)

    # -- lifecycle -------------------------------------------------------------------------

    def _closes(self, name: str, close: Callable[[], Awaitable[None]]) -> None:
        """Closed in reverse order of registration; one failing close never stops the others."""

        async def guarded() -> None:
            try:
                await close()
            except Exception:
                log.exception("closing %s failed", name)

        self._closing.push_async_callback(guarded)

    async def start(self) -> None:
        self._loop_lag.start()
        self._closes("loop lag monitor", self._loop_lag.close)
        await self.upstreams.start()
        self._closes("upstream client", self.upstreams.close)
        if isinstance(self.policy, EmbeddedEngine):
            await self.policy.start()  # hot reload
        self._closes("policy engine", self.policy.close)
        await self.approvals.start()  # expiry sweep and pending gauge
        self._closes("approvals", self.approvals.close)

        async def settle() -> None:
            self.settle_ended()

        self._closes("work of ended exchanges", settle)  # registered last: done first on close

    def settle_ended(self) -> None:
        """Write the request lines and count the tokens of ended exchanges still waiting for
        their batch (sidecar/telemetry/batched.py). Closing does it before anything else."""
        self.metrics.settle()

    async def close(self) -> None:
        await self._closing.aclose()

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready = can serve: not draining, and the policy engine can decide (a good policy is
        loaded; for OPA, it answers). Everything else that is wrong (a failed reload while the
        last good policy serves, a state backend that is down and so refuses side effects, a
        failing log writer, a critical filter that raised) is `degraded`: reported here, on
        /v1/status, in metrics and logs, never by leaving service (docs/operations.md)."""
        report: dict[str, Any] = {}
        for name, check in self.health_checks.items():
            try:
                result = check()
                report[name] = await result if inspect.isawaitable(result) else result
            except Exception as exc:
                report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        degraded = sorted(name for name, part in report.items() if not part.get("ok", True))
        serving = bool(report.get("policy", {}).get("serving", False))
        if self.draining:
            report["draining"] = {"ok": False, "since": self.draining}
        ready = serving and not self.draining
        return ready, {"degraded": degraded, "components": report}

    def proxy_server(self) -> web.Server:
        """The proxy port: aiohttp's low-level server straight into the handler, which takes
        every method and path itself (no router, no middlewares, no application per request:
        measured 145 against 190 us of CPU per forwarded request in a bare forwarder). The
        handler reads bodies itself, bounded by `max_body_bytes`. The requests it is handling
        are counted (`Metrics.requests_in_flight`)."""
        metrics, handle = self.metrics, self.handler.handle

        async def counted(request: web.BaseRequest) -> web.StreamResponse:
            metrics.requests_in_flight += 1
            try:
                return await handle(request)
            finally:
                metrics.requests_in_flight -= 1

        return web.Server(counted, handler_cancellation=True)

    def admin_app(self) -> web.Application:
        return build_admin_app(self)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class Running:
    """Both ports bound; `proxy_url` / `admin_url` tell where (port 0 picks a free one)."""

    def __init__(self, sidecar: Sidecar, runners: list[web.BaseRunner], urls: list[str]) -> None:
        self.sidecar = sidecar
        self.runners = runners
        self.proxy_url, self.admin_url = urls

    async def stop(self) -> None:
        for runner in self.runners:
            await runner.cleanup()
        await self.sidecar.close()

    async def drain(self) -> None:
        """SIGTERM: unready at once, held approvals answered as deferred, new connections still
        taken for `drain_delay_s`, then refused; in-flight exchanges get the rest of
        `shutdown_grace_s`; the admin port (probes, scrapes) closes last."""
        settings = self.sidecar.settings
        started = time.monotonic()
        self.sidecar.draining = time.time()
        self.sidecar.approvals.release_holds()
        log_event("drain", delay_s=settings.drain_delay_s, grace_s=settings.shutdown_grace_s)
        await asyncio.sleep(settings.drain_delay_s)
        for runner in self.runners:  # the proxy first: stop listening, wait for in-flight handlers
            await runner.cleanup()
        await self.sidecar.close()
        log_event("stopped", drained_s=round(time.monotonic() - started, 3))
        await asyncio.to_thread(WRITER.flush)  # the last lines reach stderr before the process ends


async def start(settings: Settings, *, reuse_port: bool = False) -> Running:
    """Both ports bound and serving. `reuse_port`: the proxy port is shared with the other
    workers of `sidecar run --workers N` (SO_REUSEPORT; the kernel spreads connections)."""
    sidecar = Sidecar(settings)
    await sidecar.start()
    runners: list[web.BaseRunner] = []
    urls: list[str] = []
    try:
        # In-flight handlers get what is left of the drain grace once the delay is over.
        remaining = max(1.0, settings.shutdown_grace_s - settings.drain_delay_s)
        ports: tuple[tuple[PortPurpose, web.BaseRunner, str], ...] = (
            (PortPurpose.PROXY, web.ServerRunner(sidecar.proxy_server(), shutdown_timeout=remaining), settings.listen),
            (
                PortPurpose.ADMIN,
                web.AppRunner(
                    sidecar.admin_app(), handler_cancellation=True, access_log=None, shutdown_timeout=remaining
                ),
                settings.admin_listen,
            ),
        )
        for purpose, runner, address in ports:
            await runner.setup()
            runners.append(runner)
            host, port = _split(address)
            site = web.TCPSite(runner, host, port, reuse_port=reuse_port and purpose is PortPurpose.PROXY)
            try:
                await site.start()
            except OSError as exc:  # names the port: "cannot bind the admin port 127.0.0.1:9477: …"
                raise PortBindError(purpose, address, exc) from exc
            bound = runner.addresses[0]
            urls.append(f"http://{host}:{bound[1]}")
        sidecar.approvals.admin_url = sidecar.approvals.admin_url or urls[1]  # links in notifications
    except BaseException:
        for runner in runners:
            await runner.cleanup()
        await sidecar.close()
        raise
    return Running(sidecar, runners, urls)


async def serve(
    settings: Settings, ready: Callable[[Running], None] | None = None, *, reuse_port: bool = False
) -> None:
    """Run until SIGINT/SIGTERM."""
    running = await start(settings, reuse_port=reuse_port)
    # One line with what is in force (policy, state, mode, upstreams, ports), secrets redacted.
    log_event("startup", **startup_fields(settings, running.proxy_url, running.admin_url))
    if ready is not None:
        ready(running)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    except BaseException:
        await running.stop()
        raise
    await running.drain()
