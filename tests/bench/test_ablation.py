"""bench_ablation.py: a part taken away really does not run (its metrics stay empty) while the
request still succeeds, and a short run reports every part it was asked for. It never asserts
a number's size (the machine is shared and noisy)."""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_ablation import launcher
from proxybench.bodies import HEADERS, Api, body_bytes
from proxybench.procs import Services
from proxybench.targets import start_mock, start_sidecar

from tests.helpers.metrics import Scrape, scrape

REPO = Path(__file__).resolve().parents[2]


async def _metrics_after_one_request(command: list[str] | None) -> tuple[int, Scrape]:
    with tempfile.TemporaryDirectory() as tmp:
        services = Services(Path(tmp))
        try:
            mock = start_mock(services)
            sidecar = start_sidecar(services, "sidecar", mock.url, Path(tmp), "builtin", command=command)
            await mock.wait_ready()
            await sidecar.wait_ready()
            headers = {**HEADERS[Api.ANTHROPIC], "content-type": "application/json"}
            async with (
                aiohttp.ClientSession() as http,
                http.post(
                    sidecar.url + Api.ANTHROPIC.value, data=body_bytes(Api.ANTHROPIC, False), headers=headers
                ) as response,
            ):
                status = response.status
                await response.read()
            return status, await scrape(sidecar.extra["admin"])
        finally:
            services.stop_all()


async def test_a_part_taken_away_does_not_run_and_the_request_still_succeeds() -> None:
    status, full = await _metrics_after_one_request(None)
    assert status == 200
    assert full.value("sidecar_policy_decisions_total", decision="allow", path="model", default=0) == 2

    status, ablated = await _metrics_after_one_request(launcher("call_policy"))
    assert status == 200
    assert ablated.value("sidecar_policy_decisions_total", decision="allow", path="model", default=0) == 0
    assert ablated.total("sidecar_tool_calls_total", tool="read_file") == 1  # still judged, delivered


def test_a_short_run_reports_every_part(tmp_path: Path) -> None:
    out = tmp_path / "ablation.json"
    done = subprocess.run(
        [
            sys.executable,
            "bench_ablation.py",
            *("--rounds", "1", "--seconds", "0.5", "--only", "cost,replay"),
            "--json",
            str(out),
        ],
        cwd=REPO / "bench",
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    parts = orjson.loads(out.read_bytes())
    assert [p["name"] for p in parts] == ["full", "cost", "replay"]
    for part in parts:
        assert part["errors"] == 0 and len(part["cpu_us"]) == 1 and math.isfinite(part["cpu_us"][0])
    for name in ("full", "cost", "replay", "saves µs"):
        assert name in done.stdout
