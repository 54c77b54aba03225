"""A real Prometheus server (Debian's /usr/bin/prometheus) on a free loopback port, scraping
one target every second, for the dashboard tests; and its HTTP API."""

from __future__ import annotations

import asyncio
import math
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.helpers.ports import free_port

SCRAPE_INTERVAL = "1s"
_STARTUP_S = 30.0


class PrometheusMissing(RuntimeError):
    """prometheus is not installed: the dashboard tests fail, never skip (CI installs it)."""


@dataclass
class Prometheus:
    url: str
    session: aiohttp.ClientSession

    async def _api(self, path: str, params: dict[str, str] | list[tuple[str, str]]) -> Any:
        async with self.session.get(f"{self.url}/api/v1/{path}", params=params) as response:
            body = await response.json()
        if body.get("status") != "success":
            raise QueryError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query now; the result vector (or a scalar as one sample)."""
        data = await self._api("query", {"query": expr})
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    async def label_values(self, label: str, match: str) -> list[str]:
        values: list[str] = await self._api(f"label/{label}/values", [("match[]", match)])
        return values

    async def scalar(self, expr: str) -> float | None:
        result = await self.query(expr)
        return float(result[0]["value"][1]) if result else None


class QueryError(AssertionError):
    """Prometheus refused a query (a syntax error, an unknown function)."""


def finite_samples(result: list[dict[str, Any]]) -> list[float]:
    """The values of an instant-query result that are numbers (not NaN, not infinite)."""
    values = [float(sample["value"][1]) for sample in result]
    return [v for v in values if math.isfinite(v)]


def _config(target: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": "agent-sidecar",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [target], "labels": labels}],
            }
        ],
    }


@asynccontextmanager
async def run_prometheus(workdir: Path, target: str, labels: dict[str, str]) -> AsyncIterator[Prometheus]:
    """Prometheus scraping `target` (host:port) with `labels` added to every series, as the
    PodMonitor's relabelling adds namespace and pod. Stopped (and its data dropped) on exit."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise PrometheusMissing("prometheus is not installed (apt-get install -y prometheus)")
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(_config(target, labels)))
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            await _until_ready(proc, session, url)
            yield Prometheus(url, session)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _until_ready(proc: asyncio.subprocess.Process, session: aiohttp.ClientSession, url: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _STARTUP_S
    while loop.time() < deadline:
        if proc.returncode is not None:
            stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
            raise RuntimeError(f"prometheus exited with {proc.returncode}: {stderr[-2000:]}")
        try:
            async with session.get(f"{url}/-/ready") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"prometheus not ready within {_STARTUP_S} s")
