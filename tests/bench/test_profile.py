"""bench_profile.py: py-spy's raw stacks are counted the way the report says (own: the innermost
frame; in all: once per sample, below the event loop's entry; whole stacks counted), and a
short run on a loaded sidecar prints both lists with the sidecar's own functions in them. It
never asserts a share's size (the machine is shared and noisy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_profile import ENTRY, Profile, frame_name

REPO = Path(__file__).resolve().parents[2]
# py-spy names files as their module path (asyncio/runners.py), not in full.
LOOP = "<module> (sidecar:8);main (sidecar/cli.py:156);Runner.run (asyncio/runners.py:118)"


def test_frames_are_named_by_function_and_file_without_the_line() -> None:
    site = "/x/.venv/lib/python3.11/site-packages/aiohttp/web_protocol.py:577"
    assert frame_name(f"RequestHandler._handle_request ({site})") == (
        "RequestHandler._handle_request (aiohttp/web_protocol.py)"
    )
    assert frame_name(f"loads ({REPO}/sidecar/dialects/base.py:88)") == "loads (sidecar/dialects/base.py)"
    assert frame_name("no location here") == "no location here"


def test_own_and_in_all_samples_are_counted_per_stack() -> None:
    raw = "\n".join(
        (
            f"{LOOP};walk (a.py:1);walk (a.py:2);leaf (b.py:3) 3",  # recursion: walk once per sample
            f"{LOOP};walk (a.py:1) 2",
            "leaf (b.py:9) 5",  # cut short: no event loop above it
            "not a stack line",
            "",
        )
    )
    profile = Profile.from_raw(raw)
    assert profile.samples == 10
    assert profile.whole == 5
    assert profile.own == {"leaf (b.py)": 8, "walk (a.py)": 2}
    # Frames down to the event loop's entry are left out of "in all": every whole stack has them.
    assert profile.total == {"walk (a.py)": 5, "leaf (b.py)": 8}
    assert ENTRY not in profile.total
    assert profile.top(profile.own, 1) == [(80.0, "leaf (b.py)")]


def test_a_short_run_profiles_the_loaded_sidecar() -> None:
    done = subprocess.run(
        [sys.executable, "bench/bench_profile.py", "--seconds", "2", "--concurrency", "4", "--top", "40"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "0 failed" in out
    own, _, in_all = out.partition("share of samples, in all")
    assert "share of samples, own:" in own
    # The request path is on the stacks: the proxy's handler below the event loop's entry.
    assert "ProxyHandler.handle (sidecar/proxy/handler.py)" in in_all
