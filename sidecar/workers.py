"""`sidecar run --workers N`: N processes serve one proxy port, for gateway mode on a node with
several cores (one Python process uses one).

Every worker is a whole sidecar (`sidecar.app.serve`) whose proxy socket is bound with
SO_REUSEPORT, so the kernel spreads new connections over the workers; each has a private admin
port on loopback. The supervisor (this module) owns the configured admin port and answers it for
all of them:

- `/metrics`: every worker's metrics in one exposition, each series labelled `worker="<i>"`
  (sum over `worker` for the pod), plus the supervisor's `sidecar_workers`,
  `sidecar_worker_restarts_total` and `sidecar_worker_scrape_failures_total` (a worker that
  does not answer with 200 within WORKER_ADMIN_TIMEOUT_S is left out of that scrape, and counted);
- `/readyz`: 200 while at least one worker is ready and the supervisor is not draining; the body
  lists each worker's own readiness;
- `/healthz`: the supervisor's loop answers;
- anything else (`/v1/status`, `/approvals`, the Slack callback): forwarded to the first ready
  worker. Approvals, the replay ledger and sessions live in the shared state backend, which is
  why more than one worker needs `state.backend: sqlite` or `redis` (checked at start-up): a
  call approved or delivered through one worker is seen by the others.

A worker that dies is restarted (backing off while it keeps dying young). SIGTERM/SIGINT: the
supervisor turns unready, passes SIGTERM on (each worker drains as a single sidecar does) and
waits `shutdown_grace_s` plus a margin before killing what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from sidecar.app import Running, serve
from sidecar.config import ConfigError, Settings
from sidecar.policy.sources import PolicyLoadError
from sidecar.runtime import run_loop, settle_process
from sidecar.startup import PortBindError, PortPurpose
from sidecar.telemetry.logs import configure_logging, log_event

# What stops a sidecar from starting (a port, a policy that does not load, a worker that did
# not start): said in one line, without a traceback.
STARTUP_ERRORS: tuple[type[BaseException], ...] = (OSError, RuntimeError, PolicyLoadError)

WORKER_LABEL = "worker"
# A worker that dies within this many seconds of starting is restarted after a growing pause
# (1, 2, 4 … up to RESTART_BACKOFF_MAX_S), so a worker that cannot start does not spin a core.
YOUNG_DEATH_S = 10.0
RESTART_BACKOFF_MAX_S = 30.0
# How long a worker may take to start (interpreter, imports, policy compile) before start-up fails.
WORKER_START_TIMEOUT_S = 60.0
# Time a worker's admin port has to answer the supervisor.
WORKER_ADMIN_TIMEOUT_S = 5.0
# Beyond shutdown_grace_s, for a worker to finish its drain and exit before it is killed.
STOP_MARGIN_S = 5.0
_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host", "upgrade"}
)


def check_workers(settings: Settings, workers: int) -> None:
    """More than one worker needs state every worker sees (the replay ledger, approvals)."""
    if workers < 1:
        raise ConfigError(f"--workers must be 1 or more, not {workers}")
    if workers > 1 and settings.state.backend == "memory":
        raise ConfigError(
            f"--workers {workers} needs a shared state backend: with state.backend 'memory' each worker "
            "would keep its own replay ledger and approvals, so a replay or an approval seen by one worker "
            "would be unknown to the others. Set state.backend to 'sqlite' (one pod) or 'redis'."
        )


def _worker_settings(settings: Settings, public_admin_url: str) -> Settings:
    """A worker's settings: its admin port is private (loopback, any free port); approval links
    in notifications point at the supervisor's admin port, the one operators reach."""
    approvals = settings.approvals.model_copy(update={"admin_url": settings.approvals.admin_url or public_admin_url})
    return settings.model_copy(update={"admin_listen": "127.0.0.1:0", "approvals": approvals})


def _worker_main(settings: Settings, announce: Connection) -> None:
    """A worker process (spawned: a fresh interpreter, nothing inherited from the supervisor's loop)."""
    configure_logging(settings.telemetry.log_level)

    def ready(running: Running) -> None:
        settle_process()
        announce.send(running.admin_url)
        announce.close()

    try:
        run_loop(serve(settings, ready=ready, reuse_port=True))
    except KeyboardInterrupt:
        pass
    except STARTUP_ERRORS as exc:  # said once, plainly; the supervisor reports the exit
        print(f"sidecar: a worker cannot start: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def _join_until(processes: list[BaseProcess], deadline: float) -> None:
    """Waits (in a thread) for the processes to exit, until the deadline."""
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))


@dataclass
class Worker:
    """One worker process and what the supervisor knows of it."""

    index: int
    process: BaseProcess
    announce: Connection
    started: float = field(default_factory=time.monotonic)
    admin_url: str | None = None

    @property
    def alive(self) -> bool:
        return self.process.is_alive()


def merge_expositions(expositions: Iterable[tuple[int, str]], own: Iterable[Metric]) -> list[Metric]:
    """Metric families of several workers (OpenMetrics text each) as one set: each sample gains
    the `worker` label; families of the same name are one family."""
    merged: dict[str, Metric] = {}
    for index, text in expositions:
        for family in text_string_to_metric_families(text):  # type: ignore[no-untyped-call]
            target = merged.get(family.name)
            if target is None:
                target = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            target.samples.extend(
                Sample(s.name, {**s.labels, WORKER_LABEL: str(index)}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            )
    for metric in own:
        merged[metric.name] = metric
    return list(merged.values())


class _Families:
    """A collector over fixed families, for prometheus_client's encoders."""

    def __init__(self, families: list[Metric], keep_created: bool) -> None:
        self._families = families
        self._keep_created = keep_created

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            if self._keep_created:
                yield family
                continue
            # The text format would show `_created` as separate gauges (the workers leave them
            # out of their own text exposition too: sidecar.telemetry.metrics.Metrics.render).
            trimmed = Metric(family.name, family.documentation, family.type, family.unit)
            trimmed.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield trimmed


class Supervisor:
    """Starts, watches and stops the workers; answers the admin port for all of them."""

    def __init__(self, settings: Settings, count: int) -> None:
        check_workers(settings, count)
        self.settings = settings
        self.count = count
        self.workers: list[Worker] = []
        self.restarts = 0
        self.scrape_failures = 0
        self.draining = False
        self._context = multiprocessing.get_context("spawn")
        self._http: aiohttp.ClientSession | None = None
        self._backoff: dict[int, float] = {}
        self._reserved: socket.socket | None = None

    # -- workers ---------------------------------------------------------------------------

    def _spawn(self, index: int, settings: Settings) -> Worker:
        receive, send = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_worker_main, args=(settings, send), name=f"sidecar-worker-{index}", daemon=False
        )
        process.start()
        send.close()  # the child holds its end; EOF here once it exits without announcing
        worker = Worker(index, process, receive)
        log_event("worker_started", worker=index, pid=process.pid)
        return worker

    async def _announced(self, worker: Worker, timeout_s: float) -> bool:
        """Waits for the worker to report its admin URL (it is serving then)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if worker.announce.poll():
                with contextlib.suppress(EOFError, OSError):
                    worker.admin_url = str(worker.announce.recv())
                    return True
                return False
            if not worker.alive:
                return False
            await asyncio.sleep(0.05)
        return False

    def _reserve_proxy_port(self) -> Settings:
        """Port 0 means "any free port": chosen once here so every worker binds the same one.
        The reserving socket joins the SO_REUSEPORT group without listening, so it takes no
        connections; it keeps the port ours while workers restart."""
        host, _, port = self.settings.listen.rpartition(":")
        bare = host.strip("[]")
        family = socket.AF_INET6 if ":" in bare else socket.AF_INET
        reserved = socket.socket(family, socket.SOCK_STREAM)
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            reserved.bind((bare, int(port)))
        except OSError as exc:
            reserved.close()
            raise PortBindError(PortPurpose.PROXY, self.settings.listen, exc) from exc
        self._reserved = reserved
        bound = reserved.getsockname()[1]
        return self.settings.model_copy(update={"listen": f"{host}:{bound}"})

    async def _start_workers(self, settings: Settings) -> None:
        self.workers = [self._spawn(index, settings) for index in range(self.count)]
        for worker in self.workers:
            if not await self._announced(worker, WORKER_START_TIMEOUT_S):
                await asyncio.to_thread(worker.process.join, 5.0)
                raise RuntimeError(
                    f"worker {worker.index} did not start (exit code {worker.process.exitcode}); its log is above"
                )

    async def _watch(self, settings: Settings, stop: asyncio.Event) -> None:
        """Restarts workers that die, until asked to stop."""
        while not stop.is_set():
            for position, worker in enumerate(self.workers):
                if worker.alive or stop.is_set():
                    continue
                lived = time.monotonic() - worker.started
                pause = self._backoff.get(worker.index, 0.0)
                pause = min(RESTART_BACKOFF_MAX_S, max(1.0, pause * 2)) if lived < YOUNG_DEATH_S else 0.0
                self._backoff[worker.index] = pause
                log_event(
                    "worker_exited",
                    worker=worker.index,
                    pid=worker.process.pid,
                    exit_code=worker.process.exitcode,
                    restart_in_s=pause,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)
                if stop.is_set():
                    return
                self.restarts += 1
                replacement = self._spawn(worker.index, settings)
                self.workers[position] = replacement
                await self._announced(replacement, WORKER_START_TIMEOUT_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)

    async def _stop_workers(self) -> None:
        for worker in self.workers:
            if worker.alive and worker.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.terminate()  # SIGTERM: the worker drains
        deadline = time.monotonic() + self.settings.shutdown_grace_s + STOP_MARGIN_S
        await asyncio.to_thread(_join_until, [w.process for w in self.workers], deadline)
        for worker in self.workers:
            if worker.alive:
                log_event("worker_killed", worker=worker.index, pid=worker.process.pid)
                worker.process.kill()
            worker.process.join(timeout=5)

    # -- admin port ------------------------------------------------------------------------

    def _ready_workers(self) -> list[Worker]:
        return [w for w in self.workers if w.alive and w.admin_url]

    async def _get(self, worker: Worker, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        assert self._http is not None and worker.admin_url is not None
        async with self._http.get(worker.admin_url + path, headers=headers) as reply:
            return reply.status, await reply.read()

    async def _each(self, path: str, headers: dict[str, str]) -> list[tuple[Worker, int, bytes]]:
        """GET path on every ready worker; a worker that does not answer is reported as 503."""

        async def one(worker: Worker) -> tuple[Worker, int, bytes]:
            try:
                status, body = await self._get(worker, path, headers)
            except (aiohttp.ClientError, TimeoutError) as exc:
                return worker, 503, orjson.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
            return worker, status, body

        return list(await asyncio.gather(*(one(w) for w in self._ready_workers())))

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "workers": sum(w.alive for w in self.workers)})

    async def readyz(self, request: web.Request) -> web.Response:
        answers = await self._each("/readyz", {})
        workers: dict[str, Any] = {}
        for worker, status, body in answers:
            with contextlib.suppress(orjson.JSONDecodeError):
                workers[str(worker.index)] = orjson.loads(body)
            workers.setdefault(str(worker.index), {"ready": status == 200})
        ready = not self.draining and any(status == 200 for _, status, _ in answers)
        report: dict[str, Any] = {"ready": ready, "workers": workers, "expected_workers": self.count}
        if self.draining:
            report["draining"] = True
        return web.json_response(report, status=200 if ready else 503, dumps=lambda v: orjson.dumps(v).decode())

    async def metrics(self, request: web.Request) -> web.Response:
        forwarded = {"Accept": _OPENMETRICS}
        if "Authorization" in request.headers:
            forwarded["Authorization"] = request.headers["Authorization"]
        answers = await self._each("/metrics", forwarded)
        failed = next(((status, body) for _, status, body in answers if status != 200), None)
        if failed is not None and failed[0] in (401, 403):
            return web.Response(status=failed[0], body=failed[1], content_type="application/json")
        expositions = [(w.index, body.decode()) for w, status, body in answers if status == 200]
        self.scrape_failures += len(answers) - len(expositions)  # left out of this scrape: counted
        families = merge_expositions(expositions, self._own_metrics())
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        keep_created = content_type.startswith("application/openmetrics-text")
        response = web.Response(body=encoder(_Families(families, keep_created)))
        response.headers["Content-Type"] = content_type
        return response

    def _own_metrics(self) -> list[Metric]:
        live = Metric("sidecar_workers", "Worker processes alive (sidecar run --workers N).", "gauge")
        live.add_sample("sidecar_workers", {}, float(sum(w.alive for w in self.workers)))
        restarts = Metric("sidecar_worker_restarts", "Worker processes restarted after they exited.", "counter")
        restarts.add_sample("sidecar_worker_restarts_total", {}, float(self.restarts))
        missed = Metric(
            "sidecar_worker_scrape_failures",
            "Times a worker's metrics were left out of a scrape (no 200 answer in time).",
            "counter",
        )
        missed.add_sample("sidecar_worker_scrape_failures_total", {}, float(self.scrape_failures))
        return [live, restarts, missed]

    async def forward(self, request: web.Request) -> web.StreamResponse:
        """Everything else the admin port serves, answered by the first ready worker."""
        ready = self._ready_workers()
        if not ready:
            return web.json_response({"error": "no worker is serving yet"}, status=503)
        assert self._http is not None and ready[0].admin_url is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        try:
            async with self._http.request(
                request.method, ready[0].admin_url + request.path_qs, headers=headers, data=body
            ) as reply:
                payload = await reply.read()
                kept = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP_BY_HOP}
                return web.Response(status=reply.status, body=payload, headers=kept)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return web.json_response({"error": f"worker {ready[0].index} did not answer: {exc}"}, status=502)

    def admin_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_route("*", "/{tail:.*}", self.forward)
        return app

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self) -> None:
        """Until SIGINT/SIGTERM: admin port first (probes answer "not ready" while workers start)."""
        stop = asyncio.Event()

        def stopping() -> None:
            self.draining = True  # unready from the signal on
            stop.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stopping)
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WORKER_ADMIN_TIMEOUT_S))
        runner = web.AppRunner(self.admin_app(), access_log=None)
        await runner.setup()
        try:
            host, _, port = self.settings.admin_listen.rpartition(":")
            try:
                await web.TCPSite(runner, host.strip("[]"), int(port)).start()
            except OSError as exc:
                raise PortBindError(PortPurpose.ADMIN, self.settings.admin_listen, exc) from exc
            admin_port = runner.addresses[0][1]
            settings = _worker_settings(self._reserve_proxy_port(), f"http://{host}:{admin_port}")
            await self._start_workers(settings)
            log_event("workers_ready", workers=self.count, listen=settings.listen, admin=f"{host}:{admin_port}")
            await self._watch(settings, stop)
            self.draining = True
            log_event("workers_stopping", workers=self.count)
        finally:
            self.draining = True
            await self._stop_workers()
            await runner.cleanup()
            await self._http.close()
            if self._reserved is not None:
                self._reserved.close()
