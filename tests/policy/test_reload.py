"""Hot reload: changes take effect within 2 s, broken policies keep the last good one, and a
Kubernetes ConfigMap-style `..data` symlink swap is picked up."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from sidecar.policy import EmbeddedEngine, build_engine
from tests.policy.cases import call
from tests.policy.conftest import settings

ALLOW = """package sidecar
import rego.v1
decision := {"allow": true, "reasons": ["v1"], "require_approval": null, "retryable": false}
"""
DENY = ALLOW.replace('true, "reasons": ["v1"]', 'false, "reasons": ["v2"]')
BROKEN = "package sidecar\nimport rego.v1\ndecision := {\n"
UNKNOWN_FN = ALLOW.replace("decision :=", "decision := x if { x := nope(1) }\nold :=")


async def wait_for(engine: EmbeddedEngine, reason: str, limit_s: float = 2.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if (await engine.decide(call("t"))).reasons == [reason]:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"decision did not change to {reason!r} within {limit_s}s")


def make_engine(directory: Path, hooks: list[tuple[bool, str | None]]) -> EmbeddedEngine:
    engine = build_engine(
        settings(reload_interval_s=0.1), str(directory), on_reload=lambda ok, error: hooks.append((ok, error))
    )
    assert isinstance(engine, EmbeddedEngine)
    return engine


async def test_new_policy_takes_effect(tmp_path: Path) -> None:
    (tmp_path / "p.rego").write_text(ALLOW)
    hooks: list[tuple[bool, str | None]] = []
    engine = make_engine(tmp_path, hooks)
    try:
        assert (await engine.decide(call("t"))).reasons == ["v1"]
        revision = engine.health()["revision"]
        (tmp_path / "p.rego").write_text(DENY)
        await wait_for(engine, "v2")
        assert engine.health()["revision"] != revision
        assert hooks == [(True, None)]
    finally:
        await engine.close()


async def test_broken_policy_keeps_last_good(tmp_path: Path) -> None:
    (tmp_path / "p.rego").write_text(ALLOW)
    hooks: list[tuple[bool, str | None]] = []
    engine = make_engine(tmp_path, hooks)
    try:
        await engine.start()
        for broken in (BROKEN, UNKNOWN_FN):
            (tmp_path / "p.rego").write_text(broken)
            for _ in range(40):
                if not engine.health()["ok"]:
                    break
                await asyncio.sleep(0.05)
            health = engine.health()
            assert health["ok"] is False and "p.rego" in health["error"]
            decision = await engine.decide(call("t"))
            assert decision.reasons == ["v1"] and decision.error is None  # last good one
            (tmp_path / "p.rego").write_text(ALLOW.replace("v1", "v1 "))
            await wait_for(engine, "v1 ")
            assert engine.health()["ok"] is True
            (tmp_path / "p.rego").write_text(ALLOW)
            await wait_for(engine, "v1")
        assert engine.reload_errors == 2
        assert [ok for ok, _ in hooks].count(False) == 2
        assert all(error for ok, error in hooks if not ok)
    finally:
        await engine.close()


async def test_configmap_symlink_swap(tmp_path: Path) -> None:
    """kubelet layout: ..2026_a/ real files, ..data -> ..2026_a, p.rego -> ..data/p.rego."""
    mount = tmp_path / "mount"
    mount.mkdir()
    first = mount / "..2026_a"
    first.mkdir()
    (first / "p.rego").write_text(ALLOW)
    (first / "data.json").write_text('{"sidecar": {"tools": {}}}')
    os.symlink("..2026_a", mount / "..data")
    os.symlink("..data/p.rego", mount / "p.rego")
    os.symlink("..data/data.json", mount / "data.json")
    engine = make_engine(mount, [])
    try:
        await engine.start()
        assert (await engine.decide(call("t"))).reasons == ["v1"]
        second = mount / "..2026_b"
        second.mkdir()
        (second / "p.rego").write_text(DENY)
        (second / "data.json").write_text('{"sidecar": {"tools": {}}}')
        os.symlink("..2026_b", mount / "..data_tmp")
        os.replace(mount / "..data_tmp", mount / "..data")  # atomic swap, as kubelet does
        # same mtime as before, to show the content hash is what counts
        stat = (first / "p.rego").stat()
        os.utime(second / "p.rego", ns=(stat.st_atime_ns, stat.st_mtime_ns))
        await wait_for(engine, "v2")
    finally:
        await engine.close()


async def test_initial_broken_policy(tmp_path: Path) -> None:
    (tmp_path / "p.rego").write_text(BROKEN)
    try:
        build_engine(settings(), str(tmp_path))
    except Exception as exc:
        assert "p.rego:4" in str(exc)
    else:
        raise AssertionError("a broken initial policy must not load")
    engine = build_engine(settings(reload_interval_s=0.1), str(tmp_path), strict=False)
    assert isinstance(engine, EmbeddedEngine)
    try:
        refused = await engine.decide(call("t"))
        assert refused.allow is False and refused.error is not None
        assert engine.health()["ok"] is False
        (tmp_path / "p.rego").write_text(ALLOW)
        await wait_for(engine, "v1")
        assert engine.health()["ok"] is True
    finally:
        await engine.close()


async def test_a_closed_engine_has_let_go_of_its_policy(tmp_path: Path) -> None:
    """close() drops the compiled policy on the thread that built it: regorus refuses to drop
    an engine on another thread (a warning, and the engine leaks), and a closed engine can
    linger in a reference cycle until a collection runs on any thread (a flaky warning in the
    suite, from a reload test's engine). Afterwards it decides nothing: refused, with why."""
    (tmp_path / "p.rego").write_text(ALLOW)
    engine = make_engine(tmp_path, [])
    await engine.start()
    assert (await engine.decide(call("t"))).allow is True
    await engine.close()
    after = await engine.decide(call("t"))
    assert after.allow is False and after.error is not None
    assert engine.health()["serving"] is False
