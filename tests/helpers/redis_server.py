"""Run a throwaway `redis-server` for tests and benchmarks (loopback, no persistence)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from tests.helpers.ports import free_port


class RedisServerMissing(RuntimeError):
    """redis-server is not installed; the Redis tests must fail, not skip (CI installs it)."""


@contextmanager
def run_redis_server(timeout_s: float = 10.0) -> Iterator[str]:
    """Start redis-server on a free loopback port, yield its URL, stop it afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisServerMissing(
            "redis-server is not installed (apt-get install -y redis-server); "
            "the Redis state backend tests need a real server"
        )
    with tempfile.TemporaryDirectory(prefix="sidecar-redis-") as workdir:
        for _attempt in range(3):  # the free port may be taken between probe and bind
            port = free_port()
            proc = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    workdir,
                    "--protected-mode",
                    "yes",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(url, socket_connect_timeout=0.2, socket_timeout=0.2)
            deadline = time.monotonic() + timeout_s
            try:
                while proc.poll() is None and time.monotonic() < deadline:
                    try:
                        if client.ping():
                            break
                    except redis.exceptions.ConnectionError:
                        time.sleep(0.02)
                else:
                    continue
                yield url
                return
            finally:
                client.close()
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
        raise RuntimeError("redis-server did not start on a free port after 3 attempts")
