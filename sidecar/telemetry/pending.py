"""Metric updates made on the event loop, summed per series and applied before every read.

prometheus_client takes a lock for every counter increment and walks a histogram's buckets in
Python for every observation: about 0.6 and 1.3 us each on the benchmark machine, and a whole
reply makes ten such updates (two call decisions, the tool-list decision, two calls, a result,
the upstream and overhead timings). Here an update made on the thread that owns the metrics
(the event loop's: everything the proxy does runs there) is a dict update and, for a histogram,
a bisection in C; `apply` adds each series' sum to prometheus_client in one increment.

`Metrics.settle` applies them before every read (`/metrics`, `/v1/status`) and when the sidecar
closes, so what a scrape shows is what happened, exactly as before. An update made on another
thread goes to prometheus_client directly, and `apply` on another thread applies nothing (the
sums belong to the owner's thread, which may be adding to them at that moment).
"""

from __future__ import annotations

from bisect import bisect_left
from threading import get_ident
from typing import Any

_INF = float("inf")


class _Observed:
    """One histogram series' observations not yet applied: their sum, and a count per bucket."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: list[float]) -> None:
        self.bounds = bounds  # prometheus_client's upper bounds, the last one +Inf
        self.counts = [0] * len(bounds)
        self.sum = 0.0


class Pending:
    """Counter increments and histogram observations held for the owner thread (see the module
    docstring). Its size is bounded by the number of series, which `Metrics` bounds already."""

    __slots__ = ("_counts", "_observed", "_owner")

    def __init__(self) -> None:
        self._owner = get_ident()
        self._counts: dict[Any, float] = {}
        self._observed: dict[Any, _Observed] = {}

    def inc(self, child: Any, amount: float = 1.0) -> None:
        """`child.inc(amount)`, applied at the next `apply`. A negative amount is refused by
        prometheus_client at once, as it would be without this."""
        if get_ident() != self._owner or amount < 0:
            child.inc(amount)
            return
        counts = self._counts
        counts[child] = counts.get(child, 0.0) + amount

    def observe(self, child: Any, value: float) -> None:
        """`child.observe(value)`, applied at the next `apply`. The bucket is the first whose
        bound is not below the value, as prometheus_client picks it; NaN (in no bucket) goes to
        prometheus_client at once."""
        if get_ident() != self._owner or not value <= _INF:
            child.observe(value)
            return
        observed = self._observed.get(child)
        if observed is None:
            observed = self._observed[child] = _Observed(child._upper_bounds)
        observed.sum += value
        observed.counts[bisect_left(observed.bounds, value)] += 1

    def apply(self) -> None:
        """Add what is held to prometheus_client: one increment per counter series, one for a
        histogram's sum and one per bucket observed. On another thread than the owner's: nothing."""
        if get_ident() != self._owner:
            return
        counts, self._counts = self._counts, {}
        for child, amount in counts.items():
            child.inc(amount)
        observed, self._observed = self._observed, {}
        for child, held in observed.items():
            child._sum.inc(held.sum)
            for bucket, n in zip(child._buckets, held.counts, strict=True):
                if n:
                    bucket.inc(n)
