"""Structured logs: one redacted JSON line per event on stderr, correlated with traces.

`log_event("verdict", tool=..., verdict=...)` is the one call sites use. Ordinary
`logging.getLogger("sidecar.x").warning(...)` records come out as JSON too (event "log"), so
nothing under the `sidecar` logger escapes the redactor.

Lines are formatted by the caller and written without blocking it (`LineWriter`): a stderr
that blocks (a full pipe, a slow log collector) must not stop the event loop. No line is
dropped: past `MAX_PENDING_BYTES` not yet written, the caller waits for the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import sys
import threading
import time
from collections import deque
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


# The second a line's time falls in, and its text up to the seconds: formatting it is most of
# a time's cost (2 us), and lines come many to a second.
_second_text: tuple[int, str] = (-1, "")


def _time(created: float) -> str:
    """`iso_utc(created, "milliseconds")`, rounded the way datetime rounds it: to the
    microsecond, then cut to the millisecond."""
    global _second_text
    second = int(created)
    micros = round((created - second) * 1_000_000)
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    cached = _second_text
    if cached[0] != second:
        cached = _second_text = (second, iso_utc(second)[:-1])
    return f"{cached[1]}.{micros // 1000:03d}Z"


def trace_ids() -> dict[str, str]:
    """trace_id/span_id (hex) of the current OpenTelemetry span, or {} outside a valid span."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
    }


def json_line(
    created: float,
    level: int,
    event: str,
    logger_name: str,
    fields: dict[str, Any] | None,
    message: str | None = None,
    exception: str | None = None,
    trace: dict[str, str] | None = None,
) -> str:
    """One log line: time, level, event, logger, [trace_id, span_id], message, then the event's
    redacted fields, then the exception. `trace`: the ids of the span the event happened in,
    when the line is formatted after it (None: the current span's)."""
    data: dict[str, Any] = {
        "time": _time(created),
        "level": logging.getLevelName(level).lower(),
        "event": event,
        "logger": logger_name,
    }
    data.update(trace_ids() if trace is None else trace)
    if message is not None:
        data["message"] = redact_text(message)
    if fields:
        for key, value in redact(fields, _matcher).items():
            data[f"field_{key}" if key in _RESERVED else key] = value
    if exception is not None:
        data["exception"] = redact_text(exception)
    return orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class JsonFormatter(logging.Formatter):
    """A record as a `json_line`: its message when it has one besides the event's name."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "event", None)
        fields = getattr(record, "fields", None)
        at = getattr(record, "event_at", None)  # an event logged after it happened (log_event_at)
        return json_line(
            at if isinstance(at, float) else record.created,
            record.levelno,
            event or "log",
            record.name,
            fields if isinstance(fields, dict) else None,
            message=record.getMessage() if event is None or record.msg != event else None,
            exception=self.formatException(record.exc_info) if record.exc_info else None,
            trace=getattr(record, "event_trace", None),
        )


# Lines handed to the writer and not yet written, in characters: past this the caller waits.
MAX_PENDING_BYTES = 8 * 1024 * 1024
# Lines an event loop holds for one write to a pipe: what an empty pipe takes at once (Linux).
MAX_HELD_BYTES = 64 * 1024


def _encoded(stream: IO[str], text: str) -> bytes:
    """`text` as the stream itself would write it: its encoding, unencodable characters escaped."""
    return text.encode(getattr(stream, "encoding", None) or "utf-8", "backslashreplace")


def nonblocking_twin(stream: IO[str]) -> int | None:
    """A second open file description of the stream's pipe or terminal, with O_NONBLOCK set on
    it alone (the stream's own descriptor, shared with the processes that gave it, is left as
    it is); None for anything else (a regular file: descriptions keep their own offsets; a
    socket: /proc cannot open one) and off Linux."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
            return None
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: no descriptor
        return None


class LineWriter:
    """Writes lines to streams in the order they were handed over, without ever blocking the
    caller on the stream (until `max_pending` characters wait).

    To a pipe or a terminal (stderr in a container is a pipe) lines go through a non-blocking
    twin of the stream's descriptor (`nonblocking_twin`), written by the caller's thread with
    an `os.write` that never waits. Lines logged on an event loop are held and written
    together, one `os.write` at most every `linger_s`, from the loop: a write to a pipe
    wakes its reader (a container runtime, `cat`), which costs the writer too (measured in a
    loop: 5.7 us of CPU per line written at once, 2.1 held; at c=64, 1,201 -> 1,174 us per
    request, against 1,067 with the request line off). Lines logged off a loop are written at once,
    after any held before them. What the pipe cannot take at once (its reader lags), and
    every line after it until the backlog is written, goes to the writer thread, which writes
    it through the stream's own, blocking, descriptor; then lines go through the twin again.
    (A thread for every line cost 2.5% more CPU per request than writing on the loop,
    measured: every wake-up takes the GIL from the event loop.)

    Other streams (regular files, test buffers) always go through the thread. It is started
    with the first line that needs it; woken, it lets lines gather for `linger_s` (less when
    `flush` asks, or half the bound is pending), then writes each stream's run of lines with
    one `os.write`. Memory is bounded: at most `max_held` bytes are held, and `put`
    waits while `max_pending` characters are pending (the stream is that slow), so no line is
    lost. `flush` waits until every line put before it is written; `logging.shutdown` (at exit)
    calls it through each handler's flush."""

    def __init__(
        self, max_pending: int = MAX_PENDING_BYTES, linger_s: float = 0.05, max_held: int = MAX_HELD_BYTES
    ) -> None:
        self.max_pending = max_pending
        self.linger_s = linger_s
        self.max_held = max_held
        # Entries: a stream, its text (or the bytes a twin could not take), how many lines.
        self._pending: deque[tuple[IO[str], str | bytes, int]] = deque()
        self._size = 0
        self._put = 0  # lines handed over, ever
        self._written = 0  # of those, lines written (or failed: a broken stream loses its lines)
        self._writing = False  # the thread holds a batch it has not finished writing
        self._hurry = False  # a flush waits: write without lingering
        self._changed = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._twin_of: IO[str] | None = None
        self._twin: int | None = None
        # Lines for the twin held on an event loop (`_held_on`) for its next write, within linger_s.
        self._held = bytearray()
        self._held_lines = 0
        self._held_on: asyncio.AbstractEventLoop | None = None

    def put(self, stream: IO[str], text: str) -> None:
        with self._changed:
            if self._held_lines and stream is not self._twin_of:
                self._send_held()  # another stream: the lines held for this one go first
            twin = self._twin_for(stream)
            self._put += 1
            if twin is not None and not self._pending and not self._writing:
                data = _encoded(stream, text)
                if not self._hold(data):
                    lines, earlier = self._held_lines, self._take_held()
                    self._send(stream, twin, earlier + data if earlier else data, lines + 1)
                return
            self._enqueue(stream, text, 1)

    def _hold(self, data: bytes) -> bool:
        """Keep `data` for the loop's next write, if there is a loop here and room."""
        loop = asyncio.events._get_running_loop()
        if loop is None or len(self._held) + len(data) > self.max_held:
            return False
        if self._held_lines and loop is not self._held_on:
            return False  # held on another loop (a test's, a closed one): written now, in order
        if not self._held_lines:
            self._held_on = loop
            loop.call_later(self.linger_s, self._write_held)
        self._held += data
        self._held_lines += 1
        return True

    def _take_held(self) -> bytes:
        data = bytes(self._held)
        self._held.clear()
        self._held_lines = 0
        self._held_on = None
        return data

    def _write_held(self) -> None:
        """The loop's write of what it holds (a timer `_hold` set)."""
        with self._changed:
            self._send_held()

    def _send_held(self) -> None:
        if self._held_lines and self._twin_of is not None and self._twin is not None:
            lines = self._held_lines
            self._send(self._twin_of, self._twin, self._take_held(), lines)

    def _send(self, stream: IO[str], twin: int, data: bytes, lines: int) -> None:
        """Write `lines` lines through the twin; what it cannot take goes to the thread."""
        try:
            sent = os.write(twin, data)
        except BlockingIOError:  # the pipe is full: its reader lags
            sent = 0
        except OSError:  # a broken stream loses its lines, as StreamHandler would
            sent = len(data)
        if sent == len(data):
            self._written += lines
            self._changed.notify_all()  # a flush may be waiting for these
            return
        self._enqueue(stream, data[sent:], lines)  # the rest goes first, by the thread

    def _enqueue(self, stream: IO[str], line: str | bytes, lines: int) -> None:
        """Hand lines `put` counted to the writer thread (started if needed); waits while the
        bound is full."""
        if self._thread is None or not self._thread.is_alive():
            thread = threading.Thread(target=self._run, name="sidecar-log-writer", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # no new threads while the interpreter shuts down: write here
                self._write(stream, [line])
                self._written += lines
                return
            self._thread = thread
        while self._size >= self.max_pending:
            self._changed.wait()
        self._pending.append((stream, line, lines))
        self._size += len(line)
        if len(self._pending) == 1 or self._size >= self.max_pending // 2:
            self._changed.notify_all()

    def _twin_for(self, stream: IO[str]) -> int | None:
        """The non-blocking twin of the last stream written to (a handler has one stream)."""
        if stream is not self._twin_of:
            if self._twin is not None:
                os.close(self._twin)
            self._twin_of, self._twin = stream, nonblocking_twin(stream)
        return self._twin

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every line put so far is written; False if that took over `timeout_s`."""
        with self._changed:
            self._send_held()  # from this thread: the loop's timer may never come (it stopped)
            target = self._put
            self._hurry = True
            self._changed.notify_all()
            return self._changed.wait_for(lambda: self._written >= target, timeout_s)

    def _gathered(self) -> bool:
        return self._hurry or self._size >= self.max_pending // 2

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._pending))
                self._changed.wait_for(self._gathered, self.linger_s)
                self._hurry = False
                batch = list(self._pending)
                self._pending.clear()
                self._size = 0
                self._writing = True
                self._changed.notify_all()  # callers waiting for room
            start = 0
            for end in range(1, len(batch) + 1):  # each stream's run of lines in one write
                if end == len(batch) or batch[end][0] is not batch[start][0]:
                    self._write(batch[start][0], [line for _, line, _ in batch[start:end]])
                    start = end
            with self._changed:
                self._written += sum(lines for _, _, lines in batch)
                self._writing = False
                self._changed.notify_all()

    @staticmethod
    def _write(stream: IO[str], lines: list[str | bytes]) -> None:
        """One blocking `os.write` to the stream's descriptor when it has one (each blocking
        call hands the GIL back and forth with the event loop: one call, not a write and a
        flush), else the stream's own write. Bytes are the rest of a line the non-blocking twin
        wrote in part. Logging must never raise: a stream that fails loses these lines, as
        StreamHandler would."""
        with contextlib.suppress(Exception):
            try:
                fd = stream.fileno()
            except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: no descriptor
                # (Bytes come only from a twin, which only a stream with a descriptor has.)
                stream.write("".join(x for x in lines if isinstance(x, str)))
                stream.flush()
                return
            stream.flush()  # anything else wrote to it and left text buffered: that goes first
            data = b"".join(x if isinstance(x, bytes) else _encoded(stream, x) for x in lines)
            while data:
                data = data[os.write(fd, data) :]


WRITER = LineWriter()


class _SidecarHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler configure_logging installs: its lines go to the stream through `WRITER`,
    which never blocks the caller (the event loop, mostly) on the stream."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.write_line(self.format(record))
        except Exception:
            self.handleError(record)

    def write_line(self, line: str) -> None:
        """What `emit` does with a formatted record, for a line `log_event` formatted itself."""
        WRITER.put(self.stream, line + self.terminator)

    def flush(self) -> None:
        """Every line handed over so far is written (tests and shutdown rely on this)."""
        WRITER.flush()
        super().flush()


def _direct_handler(target: logging.Logger, level: int) -> _SidecarHandler | None:
    """The handler configure_logging installed, when a record of `target` at `level` would
    reach it and nothing else: it is the `sidecar` logger's only handler, no logger on the way
    has a handler or a filter of its own, and the handler's level lets the record through."""
    node: logging.Logger | None = target
    while node is not logger:  # a module's logger, up to ours: nothing of its own on the way
        if node is None or node.handlers or node.filters or not node.propagate:
            return None
        node = node.parent
    handlers = logger.handlers
    if len(handlers) != 1 or logger.filters:
        return None
    handler = handlers[0]
    if not isinstance(handler, _SidecarHandler) or level < handler.level or handler.filters:
        return None
    return handler


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

    Fields are redacted as the line is formatted; never raises into the caller. The line is
    formatted only when its level is enabled. When it goes to our handler alone, it is written
    there directly: the same line, without a LogRecord, a caller lookup and the handler chain
    (measured for the request line, alternated runs: 16-24 -> 10-16 us)."""
    _log_event(event, level, log or logger, fields, None, None)


def log_event_at(
    at: float,
    trace: dict[str, str],
    event: str,
    /,
    *,
    level: int = logging.INFO,
    log: logging.Logger | None = None,
    **fields: Any,
) -> None:
    """`log_event` for an event that happened earlier: the line carries the time it happened
    (`time.time()` then) and the ids of the span it happened in (`trace_ids()` then)."""
    _log_event(event, level, log or logger, fields, at, trace)


def _log_event(
    event: str,
    level: int,
    target: logging.Logger,
    fields: dict[str, Any],
    at: float | None,
    trace: dict[str, str] | None,
) -> None:
    if not target.isEnabledFor(level):
        return
    with contextlib.suppress(Exception):  # logging must never break a request
        handler = _direct_handler(target, level)
        if handler is None:
            extra = {"event": event, "fields": fields, "event_at": at, "event_trace": trace}
            target.log(level, event, extra=extra, stacklevel=3)
        else:
            created = time.time() if at is None else at
            handler.write_line(json_line(created, level, event, target.name, fields, trace=trace))
