"""Held metric updates (sidecar/telemetry/pending.py) read exactly as prometheus_client's own."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.pending import Pending

BUCKETS = (0.001, 0.01, 0.1, 1.0)


def _metrics() -> tuple[CollectorRegistry, Counter, Histogram]:
    registry = CollectorRegistry()
    counter = Counter("things", "Things.", ["kind"], registry=registry)
    histogram = Histogram("took_seconds", "Took.", ["kind"], buckets=BUCKETS, registry=registry)
    return registry, counter, histogram


def _without_created(text: bytes) -> list[str]:
    return [line for line in text.decode().splitlines() if "_created" not in line]


# An update: (counter or histogram, label, amount).
updates = st.lists(
    st.tuples(
        st.sampled_from(["inc", "observe"]),
        st.sampled_from(["a", "b"]),
        st.one_of(
            st.floats(min_value=0, max_value=2, allow_nan=False),
            st.sampled_from([0.0, 0.001, 0.01, 0.1, 1.0, math.inf, -0.5, -math.inf]),
        ),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)  # equivalence, not timing
@given(updates)
def test_held_updates_read_as_direct_ones(steps: list[tuple[str, str, float]]) -> None:
    direct_registry, direct_counter, direct_histogram = _metrics()
    held_registry, held_counter, held_histogram = _metrics()
    pending = Pending()
    for kind, label, amount in steps:
        if kind == "inc":
            amount = abs(amount) if math.isfinite(amount) else 1.0
            direct_counter.labels(label).inc(amount)
            pending.inc(held_counter.labels(label), amount)
        else:
            direct_histogram.labels(label).observe(amount)
            pending.observe(held_histogram.labels(label), amount)
    pending.apply()
    direct, held = _without_created(generate_latest(direct_registry)), _without_created(generate_latest(held_registry))
    assert len(direct) == len(held)
    for want, got in zip(direct, held, strict=True):
        if want == got:
            continue
        # Sums added in another order may differ in the last bits.
        (want_name, want_value), (got_name, got_value) = want.rsplit(" ", 1), got.rsplit(" ", 1)
        assert want_name == got_name
        assert float(got_value) == pytest.approx(float(want_value), rel=1e-9, abs=1e-12)


def test_nothing_is_seen_before_apply_and_everything_after() -> None:
    registry, counter, histogram = _metrics()
    pending = Pending()
    pending.inc(counter.labels("a"))
    pending.inc(counter.labels("a"), 2)
    pending.observe(histogram.labels("a"), 0.005)
    assert registry.get_sample_value("things_total", {"kind": "a"}) == 0
    assert registry.get_sample_value("took_seconds_count", {"kind": "a"}) == 0
    pending.apply()
    assert registry.get_sample_value("things_total", {"kind": "a"}) == 3
    assert registry.get_sample_value("took_seconds_bucket", {"kind": "a", "le": "0.001"}) == 0
    assert registry.get_sample_value("took_seconds_bucket", {"kind": "a", "le": "0.01"}) == 1
    assert registry.get_sample_value("took_seconds_sum", {"kind": "a"}) == 0.005
    pending.apply()  # applied once only
    assert registry.get_sample_value("things_total", {"kind": "a"}) == 3


def test_a_negative_increment_is_refused_at_once() -> None:
    _, counter, _ = _metrics()
    with pytest.raises(ValueError):
        Pending().inc(counter.labels("a"), -1)


def test_nan_goes_to_prometheus_client_at_once() -> None:
    registry, _, histogram = _metrics()
    Pending().observe(histogram.labels("a"), math.nan)
    assert math.isnan(registry.get_sample_value("took_seconds_sum", {"kind": "a"}) or 0.0)
    assert registry.get_sample_value("took_seconds_count", {"kind": "a"}) == 0


def _on_another_thread(work: Any) -> None:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


def test_another_thread_updates_directly_and_applies_nothing() -> None:
    registry, counter, histogram = _metrics()
    pending = Pending()
    pending.inc(counter.labels("a"))  # held for this (the owner) thread

    def elsewhere() -> None:
        pending.inc(counter.labels("b"))
        pending.observe(histogram.labels("b"), 0.05)
        pending.apply()  # not the owner's: what the owner holds is not touched

    _on_another_thread(elsewhere)
    assert registry.get_sample_value("things_total", {"kind": "b"}) == 1
    assert registry.get_sample_value("took_seconds_count", {"kind": "b"}) == 1
    assert registry.get_sample_value("things_total", {"kind": "a"}) == 0
    pending.apply()
    assert registry.get_sample_value("things_total", {"kind": "a"}) == 1


def test_every_read_of_the_metrics_applies_what_is_held() -> None:
    metrics = Metrics()
    metrics.tool_call("grep", "anthropic", "allow")
    metrics.policy_decision("allow", "embedded", 0.00003)
    metrics.overhead("anthropic", False, 0.0004)
    assert (
        metrics.registry.get_sample_value("sidecar_policy_decisions_total", {"decision": "allow", "path": "model"}) == 0
    )
    body, _ = metrics.render()
    text = body.decode()
    assert 'sidecar_policy_decisions_total{decision="allow",path="model"} 1.0' in text
    assert 'sidecar_proxy_overhead_seconds_count{provider="anthropic",stream="false"} 1.0' in text
    assert metrics.status_summary()["tools"]["other"]["calls"] == 1
