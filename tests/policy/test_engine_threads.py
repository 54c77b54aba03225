"""regorus engines may be dropped only on the thread that made them; the cyclic collector
may run on any thread. An engine caught in a cycle must not be dropped where it is collected."""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any

from sidecar.policy._regorus import _ORPHANS, Engine


class _Holder:
    """An engine in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.engine = Engine()
        self.engine.add_policy("p.rego", "package p\nimport rego.v1\nx := 1\n")
        self.me = self


def test_an_engine_collected_on_another_thread_is_dropped_on_its_own() -> None:
    gc.collect()  # what earlier tests left in cycles goes now, here, and not in the count below
    Engine()  # (and any orphan of this thread with it)
    assert threading.get_ident() not in _ORPHANS
    unraisable: list[Any] = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    gc.disable()  # the cycle below is collected on the other thread, not by chance here
    try:
        _Holder()  # unreachable now, but for its cycle
        collector = threading.Thread(target=gc.collect)
        collector.start()
        collector.join()
        mine = threading.get_ident()
        assert len(_ORPHANS.get(mine, [])) == 1  # kept alive for this thread
        assert unraisable == []  # not dropped over there ("unsendable ... another thread")
        fresh = Engine()  # this thread makes an engine: it drops its orphans first
        assert mine not in _ORPHANS
        fresh.add_policy("q.rego", "package q\nimport rego.v1\ny := 2\n")
        assert fresh.eval_rule("data.q.y") == 2
        assert unraisable == []
    finally:
        gc.enable()
        sys.unraisablehook = previous_hook
