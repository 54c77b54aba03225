"""Fixtures for observability tests: a real OTLP/HTTP receiver and traced sidecars."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar.app import Running
from tests.conftest import StartSidecar
from tests.helpers.serve import serve


@dataclass
class OtlpReceiver:
    """An OTLP/HTTP (protobuf) collector on loopback that keeps what it receives."""

    url: str = ""
    traces: list[ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)

    async def _traces(self, request: web.Request) -> web.Response:
        self.content_types.append(request.content_type)
        self.traces.append(ExportTraceServiceRequest.FromString(await request.read()))
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def _metrics(self, request: web.Request) -> web.Response:
        self.content_types.append(request.content_type)
        self.metrics.append(ExportMetricsServiceRequest.FromString(await request.read()))
        return web.Response(body=b"", content_type="application/x-protobuf")

    def spans(self) -> list[Any]:
        return [s for req in self.traces for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def metric_points(self, name: str) -> list[tuple[Any, Any]]:
        """(metric, data point) pairs for one metric name, across every export."""
        out = []
        for req in self.metrics:
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        if metric.name == name:
                            out.extend((metric, p) for p in metric.histogram.data_points)
        return out


@pytest.fixture
async def otlp() -> AsyncIterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver._traces)
    app.router.add_post("/v1/metrics", receiver._metrics)
    async with serve(app) as receiver.url:
        yield receiver


@dataclass
class Traced:
    running: Running
    memory: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    async def flush(self) -> None:
        tracing = self.running.sidecar.tracing
        assert tracing is not None
        await asyncio.to_thread(tracing.force_flush)


StartTraced = Callable[..., Awaitable[Traced]]


@pytest.fixture
async def start_traced(otlp: OtlpReceiver, start_sidecar: StartSidecar) -> StartTraced:
    """A sidecar exporting to the loopback receiver, plus an in-memory copy of every span.

    `otlp` comes first so the receiver outlives the sidecars (they flush on close)."""

    async def _start(**telemetry: Any) -> Traced:
        running = await start_sidecar(telemetry={"otlp_endpoint": otlp.url, **telemetry})
        tracing = running.sidecar.tracing
        assert tracing is not None, "otlp_endpoint set: the tracing addon must be installed"
        memory = InMemorySpanExporter()
        tracing.provider.add_span_processor(SimpleSpanProcessor(memory))
        return Traced(running, memory)

    return _start
