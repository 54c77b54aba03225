"""`iso_utc` remembers whole seconds: the text must be exactly what datetime writes."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from sidecar.timefmt import iso_utc, parse_iso


def _datetime_text(epoch: float, precision: str) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec=precision).replace("+00:00", "Z")


@pytest.mark.parametrize("epoch", [0.0, 0.999999, 59.5, -0.5, -1.5, 1796292666.446958, 4102444799.9])
def test_seconds_truncate_like_datetime_even_before_1970(epoch: float) -> None:
    assert iso_utc(epoch) == _datetime_text(epoch, "seconds")


def test_remembered_seconds_match_datetime_on_random_times() -> None:
    rng = random.Random(16)
    times = [rng.uniform(-1e9, 4e9) for _ in range(5000)]
    for epoch in times + times:  # the second pass reads the cache
        assert iso_utc(epoch) == _datetime_text(epoch, "seconds")


def test_milliseconds_are_not_rounded_to_the_second() -> None:
    assert iso_utc(1796292666.4567, "milliseconds") == "2026-12-03T10:11:06.456Z"
    assert iso_utc(1796292666.4567) == "2026-12-03T10:11:06Z"


def test_the_text_parses_back_to_its_second() -> None:
    assert parse_iso(iso_utc(1796292666.9)) == 1796292666.0
