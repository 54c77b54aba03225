"""Scrape and read the admin port's /metrics the way Prometheus would: the suite's one helper.

A missing family or series is an error, never a silent 0: a renamed metric must fail the
tests that read it. Ask for `default=0.0` only where "never incremented" is the point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


# The tool metrics carry `path` (model or mcp): a test that names no path reads the model path's.
MODEL_PATH = {"path": "model"}


@dataclass
class Scrape:
    families: dict[str, Any]
    content_type: str
    text: str

    def value(self, sample: str, default: float | None = None, **labels: str) -> float:
        """One sample's value. A missing series fails, unless `default` is given (a counter
        never incremented); a missing family always fails. Without a `path` label, the series of
        a path-labelled metric is the model path's."""
        family = self._family_of(sample)
        for s in family.samples:
            if s.name == sample and (s.labels == labels or s.labels == {**MODEL_PATH, **labels}):
                return float(s.value)
        if default is None:
            raise AssertionError(f"no series {sample}{labels} in /metrics")
        return default

    def total(self, sample: str, **labels: str) -> float:
        """Sum of every series of `sample` whose labels include `labels`."""
        family = self._family_of(sample)
        return sum(
            float(s.value)
            for s in family.samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def label_values(self, label: str) -> set[str]:
        return {s.labels[label] for f in self.families.values() for s in f.samples if label in s.labels}

    def _family_of(self, sample: str) -> Any:
        for suffix in ("_total", "_bucket", "_count", "_sum", "_created", ""):
            name = sample[: -len(suffix)] if suffix and sample.endswith(suffix) else sample
            if name in self.families:
                return self.families[name]
        raise AssertionError(f"metric family for {sample} missing from /metrics")


async def scrape(admin_url: str, openmetrics: bool = False) -> Scrape:
    headers = {"Accept": OPENMETRICS} if openmetrics else {}
    async with aiohttp.ClientSession() as session, session.get(f"{admin_url}/metrics", headers=headers) as r:
        assert r.status == 200
        text = await r.text()
        content_type = r.headers["Content-Type"]
    parser = parse_openmetrics if openmetrics else text_string_to_metric_families
    return Scrape({f.name: f for f in parser(text)}, content_type, text)
