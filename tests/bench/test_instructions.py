"""bench_instructions.py: callgrind's output is read the way the report says, and a short count
of a real sidecar under valgrind gives a per-request figure of the right size. It never
asserts a figure tightly (another commit changes it), only its order of magnitude."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_instructions import BY_KEY, FORWARDER, SIDECAR, callgrind_total, count, parts_report, report, sidecar_argv
from proxybench.targets import sidecar_command

CALLGRIND = """# callgrind format
version: 1
creator: callgrind-3.19.0
cmd:  python -m sidecar.cli run
events: Ir
fl=(1) ???
fn=(1) 0x0000000000001000
0 5
summary: 4369162000
totals: 4369162000
"""


def test_the_summary_line_is_the_count() -> None:
    assert callgrind_total(CALLGRIND) == 4369162000
    assert callgrind_total(CALLGRIND.replace("summary: 4369162000\n", "")) == 4369162000


def test_a_file_without_a_total_is_refused() -> None:
    with pytest.raises(ValueError, match="not a callgrind output"):
        callgrind_total("events: Ir\n0 5\n")


def test_the_report_gives_millions_and_the_ratio_to_the_forwarder() -> None:
    text = report({"anthropic_whole": {SIDECAR: 4_369_000.0, FORWARDER: 695_000.0}}, [SIDECAR, FORWARDER])
    line = text.splitlines()[-1]
    assert line.startswith("anthropic_whole")
    assert "4.369" in line and "0.695" in line
    assert "sidecar ÷ forwarder 6.29" in line


def test_a_real_count_of_the_sidecar() -> None:
    """20 whole Anthropic replies through `sidecar run` under callgrind (about 20 s): a request
    runs millions of instructions (Python, aiohttp, orjson, regorus), not thousands or billions."""
    per_request = asyncio.run(count(SIDECAR, BY_KEY["anthropic_whole"], requests=20, concurrency=4, warmup=10))
    assert 1e6 < per_request < 1e8


def test_each_part_is_counted_with_its_hooks_taken_away() -> None:
    argv = sidecar_argv(None, "cost")
    assert argv[1:] == ["-m", "proxybench.ablated", "--without", "cost"]
    assert sidecar_argv(None, None) == sidecar_command()
    assert "sys.path.insert(0, '/tmp/base')" in sidecar_argv(Path("/tmp/base"), None)[-1]


def test_the_parts_report_gives_what_each_part_saves() -> None:
    text = parts_report({"cost": 3_338_000.0, "call_policy": 2_965_000.0}, full=3_758_000.0)
    lines = text.splitlines()
    assert lines[1].startswith("call_policy") and "0.793" in lines[1] and "21.1%" in lines[1]
    assert lines[2].startswith("cost") and "0.420" in lines[2] and "11.2%" in lines[2]
    assert "token attribution" in lines[2]
