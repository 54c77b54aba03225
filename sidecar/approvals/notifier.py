"""Webhook notification of new approvals: fire and forget, bounded retries, never blocking.

A person has to learn that something waits for them; the proxy must not wait for that
person's chat tool. Each notification runs in its own background task; a receiver that is
down costs at most `webhook_retries + 1` attempts with exponential backoff, then one warning
and one increment of `sidecar_approval_webhook_failures_total`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

import aiohttp
import orjson
from prometheus_client import Counter

from sidecar.config import ApprovalSettings
from sidecar.telemetry.metrics import Metrics

log = logging.getLogger("sidecar.approvals")

# Notifications being delivered at once; beyond, new ones are dropped and counted as failures.
MAX_IN_FLIGHT = 256


class BackgroundTasks:
    """Deliveries that must not hold up the caller: kept until done (so none is collected
    mid-flight), at most `limit` at once (beyond, `spawn` refuses: the caller counts the drop),
    awaited by `drain` (tests), cancelled by `close` (shutdown waits for no one)."""

    def __init__(self, limit: int = MAX_IN_FLIGHT) -> None:
        self._tasks: set[asyncio.Task[bool]] = set()
        self.limit = limit

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, bool]) -> asyncio.Task[bool] | None:
        if len(self._tasks) >= self.limit:
            work.close()  # never started: no "coroutine was never awaited" warning
            return None
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class WebhookNotifier:
    def __init__(self, settings: ApprovalSettings, metrics: Metrics) -> None:
        self.url = settings.webhook_url
        self.retries = settings.webhook_retries
        self.backoff_s = settings.webhook_backoff_s
        self.timeout_s = settings.webhook_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._tasks = BackgroundTasks()
        # Not a DESIGN.md contract metric; it lives here until Metrics grows a method for it.
        self.failures = Counter(
            "sidecar_approval_webhook_failures",
            "Approval notifications not delivered after all retries.",
            registry=metrics.registry,
        )
        self.delivered = 0

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def notify(self, payload: dict[str, Any]) -> asyncio.Task[bool] | None:
        """Schedule one delivery; returns at once (the task is kept so it is not collected)."""
        if not self.url:
            return None
        task = self._tasks.spawn(self._deliver(self.url, orjson.dumps(payload)))
        if task is None:  # a receiver that stalls cannot grow memory
            self.failures.inc()
            log.warning("approval notification dropped: %d already in flight", MAX_IN_FLIGHT)
        return task

    async def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self._session

    async def _deliver(self, url: str, body: bytes) -> bool:
        delay = self.backoff_s
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(delay)
                delay *= 2
            try:
                client = await self._client()
                async with client.post(
                    url, data=body, headers={"Content-Type": "application/json"}, allow_redirects=False
                ) as response:
                    await response.read()
                    if 200 <= response.status < 300:
                        self.delivered += 1
                        return True
                    problem = f"HTTP {response.status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            log.info("approval webhook attempt %d/%d failed: %s", attempt + 1, self.retries + 1, problem)
        self.failures.inc()
        log.warning("approval webhook not delivered after %d attempts: %s", self.retries + 1, problem)
        return False

    async def drain(self) -> None:
        """Wait for the deliveries in flight (tests, and a graceful shutdown if wanted)."""
        await self._tasks.drain()

    async def close(self) -> None:
        """Stop pending deliveries (shutdown must not wait for a slow receiver)."""
        await self._tasks.close()
        if self._session is not None:
            await self._session.close()
