"""Structured logs: one redacted JSON line per event on stderr, correlated with traces.

`log_event("verdict", tool=..., verdict=...)` is the one call sites use. Ordinary
`logging.getLogger("sidecar.x").warning(...)` records come out as JSON too (event "log"), so
nothing under the `sidecar` logger escapes the redactor.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import IO, Any

import orjson
from opentelemetry import trace

from sidecar.telemetry.redact import DEFAULT_KEY_PATTERNS, key_matcher, redact, redact_text
from sidecar.timefmt import iso_utc

LOGGER_NAME = "sidecar"
# Header names never to be logged, on top of the configurable credential keys
# (matching ignores case, `-` and `_`, and finds substrings: `set-cookie` matches `cookie`).
LOG_KEY_PATTERNS: tuple[str, ...] = (
    *DEFAULT_KEY_PATTERNS,
    "x-api-key",
    "cookie",
    "private_key",
    "proxy-authorization",
    "openai-organization",
    "openai-project",
)
_matcher = key_matcher(LOG_KEY_PATTERNS)
_RESERVED = frozenset({"time", "level", "event", "logger", "message", "trace_id", "span_id"})
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

logger = logging.getLogger(LOGGER_NAME)


def _time(created: float) -> str:
    return iso_utc(created, "milliseconds")


def trace_ids() -> dict[str, str]:
    """trace_id/span_id (hex) of the current OpenTelemetry span, or {} outside a valid span."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
    }


class JsonFormatter(logging.Formatter):
    """time, level, event, [trace_id, span_id], message, then the event's redacted fields."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "event", None)
        data: dict[str, Any] = {
            "time": _time(record.created),
            "level": record.levelname.lower(),
            "event": event or "log",
            "logger": record.name,
        }
        data.update(trace_ids())
        if event is None or record.msg != event:
            data["message"] = redact_text(record.getMessage())
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in redact(fields, _matcher).items():
                data[f"field_{key}" if key in _RESERVED else key] = value
        if record.exc_info:
            data["exception"] = redact_text(self.formatException(record.exc_info))
        return orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class _SidecarHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler we installed, so configure_logging can be called again safely."""


def configure_logging(level: str | int = "info", stream: IO[str] | None = None) -> logging.Handler:
    """Install the JSON formatter on the `sidecar` logger (stderr by default), replacing any
    handler a previous call installed. The logger does not propagate, so a root handler set up
    by a library cannot print the same event unredacted a second time."""
    resolved = _LEVELS.get(level.lower(), logging.INFO) if isinstance(level, str) else level
    for handler in list(logger.handlers):
        if isinstance(handler, _SidecarHandler):
            logger.removeHandler(handler)
            handler.close()
    handler = _SidecarHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(resolved)
    logger.propagate = False
    return handler


def log_event(event: str, /, *, level: int = logging.INFO, log: logging.Logger | None = None, **fields: Any) -> None:
    """One structured event (request, verdict, repair_round, approval, policy_reload, startup).

    Fields are redacted at format time; never raises into the caller."""
    target = log or logger
    if not target.isEnabledFor(level):
        return
    with contextlib.suppress(Exception):  # logging must never break a request
        target.log(level, event, extra={"event": event, "fields": fields}, stacklevel=2)
