"""Policy changes in a running sidecar: new files take effect within 2 s (plain writes and
a Kubernetes ConfigMap `..data` symlink swap); a broken policy keeps the last good one and
/readyz reports it."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

import orjson

from sidecar.app import Running
from sidecar.policy.sources import LIBRARY
from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.policy.conftest import copy_policies, deny_unlisted, edit_data, get_json, metric, poll

TOOLS = {"crm_wipe": {"type": "object", "properties": {"customer": {"type": "string"}}}}
WIPE = ToolCallSpec("crm_wipe", {"customer": "c-1"})
DENIED = "tool crm_wipe has no entry in the policy data and unlisted tools are not allowed"
FAST = {"reload_interval_s": 0.1}
_sessions = itertools.count()


async def _revision(sidecar: Running) -> str:
    _, body = await get_json(f"{sidecar.admin_url}/readyz")
    revision: str = body["components"]["policy"]["revision"]
    return revision


async def _wait_for_new_revision(sidecar: Running, old: str) -> float:
    started = time.monotonic()

    async def changed() -> str | None:
        revision = await _revision(sidecar)
        return revision if revision != old else None

    await poll(changed, 2.0, "the new policy revision loaded")
    return time.monotonic() - started


async def _wipe_outcome(model: Any, sidecar: Running) -> str:
    """'delivered' or the status the model was told, for one crm_wipe call."""
    model.reset()
    model.add_turns(Turn(tool_calls=[WIPE]), Turn(text="I cannot do that."))
    # A fresh session each time: the same call again in one session would be a replay.
    session = {"X-Sidecar-Session": f"reload-{next(_sessions)}"}
    received = await AGENTS["anthropic"](sidecar.proxy_url, TOOLS, headers=session).ask(stream=False)
    if received.calls:
        return "delivered"
    [output] = AGENTS["anthropic"].tool_outputs(model.model_requests[1])
    assert output["reasons"] == [DENIED]
    return str(output["status"])


async def test_changed_data_takes_effect_within_2s(model, start_sidecar, tmp_path: Path) -> None:
    directory = copy_policies(tmp_path / "policies")
    sidecar = await start_sidecar(policies=str(directory), policy=FAST)
    assert await _wipe_outcome(model, sidecar) == "delivered"  # unlisted tools allowed
    old = await _revision(sidecar)

    edit_data(directory, deny_unlisted)
    await _wait_for_new_revision(sidecar, old)
    assert await _wipe_outcome(model, sidecar) == "denied"
    assert await metric(sidecar.admin_url, "sidecar_policy_reloads_total") == 1


def _configmap_version(mount: Path, name: str, deny: bool) -> None:
    version = mount / name
    version.mkdir()
    (version / "sidecar.rego").write_text((LIBRARY / "rules" / "sidecar.rego").read_text())
    data = orjson.loads((LIBRARY / "support" / "data.json").read_bytes())
    if deny:
        deny_unlisted(data["sidecar"])
    (version / "data.json").write_bytes(orjson.dumps(data))


async def test_configmap_symlink_swap(model, start_sidecar, tmp_path: Path) -> None:
    """kubelet's layout: ..v1/ real files, ..data -> ..v1, top-level symlinks into ..data."""
    mount = tmp_path / "mount"
    mount.mkdir()
    _configmap_version(mount, "..v1", deny=False)
    os.symlink("..v1", mount / "..data")
    for name in ("sidecar.rego", "data.json"):
        os.symlink(f"..data/{name}", mount / name)
    sidecar = await start_sidecar(policies=str(mount), policy=FAST)
    assert await _wipe_outcome(model, sidecar) == "delivered"
    old = await _revision(sidecar)

    _configmap_version(mount, "..v2", deny=True)
    os.symlink("..v2", mount / "..data_tmp")
    os.replace(mount / "..data_tmp", mount / "..data")  # the atomic swap kubelet does
    await _wait_for_new_revision(sidecar, old)
    assert await _wipe_outcome(model, sidecar) == "denied"


async def test_broken_policy_keeps_last_good_stays_ready_and_says_so(model, start_sidecar, tmp_path: Path) -> None:
    directory = copy_policies(tmp_path / "policies")
    edit_data(directory, deny_unlisted)
    sidecar = await start_sidecar(policies=str(directory), policy=FAST)
    status, body = await get_json(f"{sidecar.admin_url}/readyz")
    assert status == 200 and body["components"]["policy"]["ok"] is True
    good = (directory / "sidecar.rego").read_text()
    lines = good.count("\n")

    (directory / "sidecar.rego").write_text(good + "\nbroken := [1,, 2]\n")

    async def degraded() -> dict[str, Any] | None:
        status, body = await get_json(f"{sidecar.admin_url}/readyz")
        # Still ready: the last good policy serves. The failed reload is reported, not a reason
        # to take the pod (and every pod sharing the ConfigMap) out of service.
        assert status == 200 and body["ready"] is True
        return body if "policy" in body["degraded"] else None

    body = await poll(degraded, 2.0, "/readyz reporting the broken policy")
    report = body["components"]["policy"]
    assert report["ok"] is False and report["serving"] is True
    assert f"sidecar.rego:{lines + 2}:" in report["error"]  # file:line of the broken rule
    assert await metric(sidecar.admin_url, "sidecar_policy_reload_failures_total") == 1
    assert await metric(sidecar.admin_url, "sidecar_policy_stale_seconds") > 0
    assert await _wipe_outcome(model, sidecar) == "denied"  # the last good policy still decides

    (directory / "sidecar.rego").write_text(good)

    async def recovered() -> bool | None:
        _, body = await get_json(f"{sidecar.admin_url}/readyz")
        return True if body["degraded"] == [] else None

    await poll(recovered, 2.0, "/readyz recovering once the policy is fixed")
