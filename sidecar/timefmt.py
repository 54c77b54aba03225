"""One way to write times: ISO-8601 in UTC with a `Z` (`2026-11-30T10:00:00Z`), everywhere the
sidecar shows a time (admin API, webhook, CLI, logs); durations as `1h02m`, `3m05s`, `42s`.

Stored records keep epoch seconds (cheap to compare, what every backend already holds); the
conversion happens where a time leaves the process.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from functools import lru_cache
from typing import Literal

Precision = Literal["seconds", "milliseconds"]


def iso_utc(epoch: float, precision: Precision = "seconds") -> str:
    if precision == "seconds":
        return _iso_second(math.floor(epoch))
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec=precision).replace("+00:00", "Z")


@lru_cache(maxsize=1024)
def _iso_second(second: int) -> str:
    """A whole second's text, remembered: the replay guard writes the first-seen time of every
    replayed call into its policy input, and the same few seconds recur (1.7% of the proxy's CPU
    when formatted afresh each time, in a profile of repeated calls)."""
    return datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def iso_or_none(epoch: float | None) -> str | None:
    return None if epoch is None else iso_utc(epoch)


def parse_iso(text: str) -> float:
    """Epoch seconds of an ISO-8601 time (`Z` or an offset); ValueError if it is not one."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def duration(seconds: float) -> str:
    """A short, exact-enough span: `42s`, `3m05s`, `1h02m`, `2d03h`."""
    span = int(abs(seconds))
    if span < 60:
        return f"{span}s"
    if span < 3600:
        return f"{span // 60}m{span % 60:02d}s"
    if span < 86400:
        return f"{span // 3600}h{span % 3600 // 60:02d}m"
    return f"{span // 86400}d{span % 86400 // 3600:02d}h"


def relative(epoch: float, now: float) -> str:
    """`in 59m58s` or `3m05s ago`."""
    delta = epoch - now
    return f"in {duration(delta)}" if delta >= 0 else f"{duration(delta)} ago"
