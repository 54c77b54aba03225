"""Starting the benchmark's processes: the mock, the forwarder, the OTLP sink and the sidecar.

The sidecar runs through its real command line (`sidecar run --config FILE`) with default
enforcement: argument lockdown, the embedded policy engine, the replay ledger (state in
memory) and metrics; the only settings are the listen ports, the upstreams (the mock), where
the rejection log goes, the two tools the mock calls declared read-only (`tools.<name>.
side_effects: false`, which the sidecar writes into the policy data: the shipped rules then
allow their replays, since every benchmark request repeats the same conversation) and, for
`sidecar+tracing`, the OTLP endpoint.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson

from proxybench.bodies import READ_ONLY_TOOLS
from proxybench.ports import free_port
from proxybench.procs import Service, Services


def sidecar_command() -> list[str]:
    """The installed `sidecar` script next to this interpreter, else the module."""
    script = Path(sys.executable).with_name("sidecar")
    if script.exists():
        return [str(script)]
    found = shutil.which("sidecar")
    return [found] if found else [sys.executable, "-m", "sidecar.cli"]


def sidecar_settings(
    name: str,
    mock_url: str,
    workdir: Path,
    policies: str,
    otlp_endpoint: str | None,
    workers: int = 1,
    state: dict[str, object] | None = None,
) -> tuple[dict[str, object], str, str]:
    """The YAML settings (JSON is YAML) of one sidecar, its proxy URL and its admin URL.
    `state` adds to the state settings (a benchmark sizing the ledger)."""
    proxy, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    settings: dict[str, object] = {
        "listen": proxy,
        "admin_listen": admin,
        "anthropic_upstream": mock_url,
        "openai_upstream": mock_url,
        "policies": policies,
        "state": {"backend": "memory", **(state or {})},
        "rejection_log": {"path": str(workdir / f"{name}-rejections.jsonl")},
        "tools": {tool: {"side_effects": False} for tool in READ_ONLY_TOOLS},
    }
    if otlp_endpoint is not None:
        settings["telemetry"] = {"otlp_endpoint": otlp_endpoint}
    if workers > 1:  # workers agree through shared state (the sidecar refuses memory then)
        settings["state"] = {"backend": "sqlite", "sqlite_path": str(workdir / f"{name}-state.db"), **(state or {})}
    return settings, f"http://{proxy}", f"http://{admin}"


def start_sidecar(
    services: Services,
    name: str,
    mock_url: str,
    workdir: Path,
    policies: str,
    otlp_endpoint: str | None = None,
    workers: int = 1,
    state: dict[str, object] | None = None,
    command: list[str] | None = None,
) -> Service:
    """`command`: what runs `sidecar` (default `sidecar_command()`; bench_ablation.py's launcher)."""
    settings, proxy_url, admin_url = sidecar_settings(name, mock_url, workdir, policies, otlp_endpoint, workers, state)
    config = workdir / f"{name}.yaml"
    config.write_bytes(orjson.dumps(settings, option=orjson.OPT_INDENT_2))
    scale = ["--workers", str(workers)] if workers > 1 else []
    argv = [*(command or sidecar_command()), "run", "--config", str(config), *scale]
    service = services.spawn(name, proxy_url, argv)
    service.ready_url = f"{admin_url}/readyz"
    service.extra["admin"] = admin_url
    return service


def start_mock(services: Services) -> Service:
    """The mock provider (proxybench/mock.py), ready when its /stats answers."""
    mock = services.bench_server("mock", "mock")
    mock.ready_url = f"{mock.url}/stats"
    return mock


@asynccontextmanager
async def mock_and_sidecar(
    prefix: str, policies: str, state: dict[str, object] | None = None, command: list[str] | None = None
) -> AsyncIterator[tuple[Service, Service]]:
    """The mock and one `sidecar run` in front of it, both ready; both stopped on the way out.
    `command`: what runs `sidecar` (`start_sidecar`'s)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        services = Services(Path(tmp))
        try:
            mock = start_mock(services)
            sidecar = start_sidecar(services, "sidecar", mock.url, Path(tmp), policies, state=state, command=command)
            await asyncio.gather(mock.wait_ready(), sidecar.wait_ready())
            yield mock, sidecar
        finally:
            services.stop_all()
