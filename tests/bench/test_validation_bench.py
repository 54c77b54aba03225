"""bench_validation.py measures the call the proxy checks: arguments read by orjson and vouched
free of NaN and infinities, as `sidecar/exchange/runner.py` vouches every reply orjson reads
wholly; and the walked case beside it. No timing is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_validation import INVALID, SCHEMA, VALID, read_call, valid_call_median_us

from sidecar.config import LockdownSettings
from sidecar.lockdown.validator import Lockdown
from sidecar.model import ToolDeclaration


def test_the_measured_call_is_read_as_the_proxy_reads_it() -> None:
    decl = ToolDeclaration.create("search_orders", SCHEMA)
    lockdown, settings = Lockdown(), LockdownSettings()
    vouched, walked = read_call(decl.name, VALID), read_call(decl.name, VALID, by_orjson=False)
    assert vouched.finite_arguments and not walked.finite_arguments
    assert vouched.arguments == walked.arguments == VALID
    assert lockdown.check(vouched, decl, settings).allowed
    assert lockdown.check(walked, decl, settings).allowed
    assert not lockdown.check(read_call(decl.name, INVALID), decl, settings).allowed


def test_the_reported_median_is_a_time() -> None:
    assert valid_call_median_us(50) > 0
