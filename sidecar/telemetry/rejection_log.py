"""The rejected-payload log: one redacted JSON line per refused tool call.

The proxy must never wait on, or fail because of, this log. `write()` redacts and serialises
in the caller (so later mutation of the caller's dicts cannot change the record) and enqueues
the line; one background thread does all file I/O and rotation, so lines are never torn or
interleaved and rotation needs no locking. Failures (full disk, unwritable path, full queue)
are counted, reported by `health()`, and never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

import orjson

from sidecar.telemetry.redact import (
    DEFAULT_KEY_PATTERNS,
    REDACTED,
    KeyMatcher,
    key_matcher,
    redact,
    redact_text,
)
from sidecar.timefmt import iso_utc

log = logging.getLogger("sidecar.telemetry.rejection_log")

# Tests replace this to simulate ENOSPC; production writes go straight to the fd.
_write = os.write

_STOP = object()
_QUOTED = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")


def utc_now() -> str:
    """RFC 3339 UTC with milliseconds, e.g. 2026-11-30T10:00:00.123Z."""
    return iso_utc(time.time(), "milliseconds")


def _error_json(error: Any) -> dict[str, Any]:
    if isinstance(error, Mapping):
        return dict(error)
    out = {
        "field": getattr(error, "field", ""),
        "problem": getattr(error, "problem", str(error)),
        "expected": getattr(error, "expected", ""),
    }
    kind = getattr(error, "kind", None)
    if kind is not None:
        out["kind"] = kind
    return out


def _verdict_parts(verdict: Any) -> tuple[str, str | None, list[str]]:
    """(kind, status, reasons) from a Verdict, a VerdictKind or a plain string."""
    kind = getattr(verdict, "kind", verdict)
    kind_text = str(getattr(kind, "value", kind))
    status = getattr(verdict, "status", None)
    reasons = list(getattr(verdict, "reasons", []) or [])
    return kind_text, status, reasons


def rejection_record(
    *,
    session: str | None,
    provider: str | None,
    model: str | None,
    tool: str,
    call_id: str | None,
    arguments: Any,
    errors: Iterable[Any] = (),
    verdict: Any = "reject",
    action: str = "blocked",
    repair_round: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """The record for one refused call (not yet redacted). `verdict` may be a Verdict, whose
    errors and reasons are used when `errors` is empty. `extra` keys (schema, raw_arguments,
    reasons, mode…) are added as they are; they never override the fixed keys."""
    kind, status, reasons = _verdict_parts(verdict)
    error_list = list(errors) or list(getattr(verdict, "errors", []) or [])
    record: dict[str, Any] = {
        "time": utc_now(),
        "session": session,
        "provider": str(getattr(provider, "value", provider)) if provider is not None else None,
        "model": model,
        "tool": tool,
        "call_id": call_id,
        "arguments": arguments,
        "errors": [_error_json(e) for e in error_list],
        "verdict": kind,
        "action": action,
        "repair_round": repair_round,
    }
    if status:
        record["status"] = status
    if reasons:
        record["reasons"] = reasons
    for key, value in extra.items():
        record.setdefault(key, value)
    return record


_LINE_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE
# A line may hold this many capped values' worth of bytes before whole fields are summarised.
_LINE_BUDGET = 16


def _cap(value: Any, limit: int, path: str, cut: dict[str, int]) -> Any:
    """Strings longer than `limit` bytes cut (whole characters), their original size in `cut`."""
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        if len(raw) <= limit:
            return value
        cut[path or "(value)"] = len(raw)
        return raw[:limit].decode("utf-8", "ignore") + "…"
    if isinstance(value, dict):
        return {k: _cap(v, limit, f"{path}.{k}" if path else str(k), cut) for k, v in value.items()}
    if isinstance(value, list):
        return [_cap(v, limit, f"{path}[{i}]", cut) for i, v in enumerate(value)]
    return value


def bounded_line(record: Mapping[str, Any], limit: int) -> bytes:
    """One JSON line whose size the caller's data cannot blow up: long strings are cut (their
    sizes kept under `truncated`), and a line still larger than `_LINE_BUDGET * limit` gets its
    `schema`, then its `arguments` (or `input`), replaced by their size."""
    cut: dict[str, int] = {}
    capped = {key: _cap(value, limit, key, cut) for key, value in record.items()}
    if cut:
        capped["truncated"] = cut
    line = orjson.dumps(capped, default=str, option=_LINE_OPTIONS)
    for key in ("schema", "arguments", "input"):
        if len(line) <= _LINE_BUDGET * limit:
            break
        if key in capped:
            size = len(orjson.dumps(record[key], default=str, option=orjson.OPT_NON_STR_KEYS))
            capped[key] = {"omitted_bytes": size}
            line = orjson.dumps(capped, default=str, option=_LINE_OPTIONS)
    return line


def redact_record(record: Mapping[str, Any], matcher: KeyMatcher) -> dict[str, Any]:
    """Redact a record. The schema is only shape-redacted: its property *names* (`password`)
    are not secrets and promote needs them intact. Error texts quoting the value of a
    sensitive field lose the quoted value."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key == "schema":
            out[key] = redact(value, ())
        elif key == "errors" and isinstance(value, list):
            out[key] = [_redact_error(e, matcher) for e in value]
        elif matcher(key) and value is not None:
            out[key] = REDACTED
        else:
            out[key] = redact(value, matcher)
    return out


def _redact_error(error: Any, matcher: KeyMatcher) -> Any:
    if not isinstance(error, Mapping):
        return redact(error, matcher)
    clean = redact(dict(error), ())
    field = str(error.get("field") or "")
    last = re.split(r"[./\[\]]+", field.strip("./[]"))[-1] if field else ""
    if last and matcher(last) and isinstance(clean.get("problem"), str):
        clean["problem"] = _QUOTED.sub('"[REDACTED]"', clean["problem"])
    return clean


class RejectionLog:
    """Non-blocking, redacting, rotating JSON-lines log of refused calls.

    `path == "-"` writes to stdout (or `stream`). Files rotate by size: file, file.1 … file.N
    (`backups`, 0 = truncate). Counters: `written`, `dropped` (queue full), `errors` (I/O).
    """

    def __init__(
        self,
        path: str = "-",
        *,
        max_bytes: int = 50 * 1024 * 1024,
        backups: int = 5,
        redact_keys: Iterable[str] = DEFAULT_KEY_PATTERNS,
        queue_size: int = 10_000,
        on_error: Callable[[BaseException], None] | None = None,
        on_drop: Callable[[], None] | None = None,
        stream: IO[Any] | None = None,
        max_value_bytes: int = 4096,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_value_bytes = max_value_bytes
        self.backups = backups
        self.written = 0
        self.dropped = 0
        self.errors = 0
        self.last_error: str | None = None
        self._matcher = key_matcher(redact_keys)
        self._on_error = on_error
        self._on_drop = on_drop
        self._stream = stream if stream is not None else (sys.stdout if path == "-" else None)
        self._fd: int | None = None
        self._size = 0
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._counts = threading.Lock()
        self._progress = threading.Condition()
        self._enqueued = 0
        self._processed = 0
        self._closed = False
        if path != "-":
            try:
                self._open()  # fail early so /readyz reports a misconfigured path at startup
            except OSError as exc:
                self._failed(exc)
        self._thread = threading.Thread(target=self._run, name="rejection-log", daemon=True)
        self._thread.start()

    @classmethod
    def from_settings(cls, settings: Any, metrics: Any = None, **kwargs: Any) -> RejectionLog:
        """Build from RejectionLogSettings; `metrics` (a Metrics) gets error and drop counts."""
        if metrics is not None:
            kwargs.setdefault("on_error", metrics.rejection_log_error)
            kwargs.setdefault("on_drop", metrics.rejection_log_drop)
        if hasattr(settings, "max_value_bytes"):
            kwargs.setdefault("max_value_bytes", settings.max_value_bytes)
        return cls(
            settings.path,
            max_bytes=settings.max_bytes,
            backups=settings.backups,
            redact_keys=settings.redact_keys,
            **kwargs,
        )

    # ------------------------------------------------------------------ caller side

    def write(self, record: Mapping[str, Any]) -> bool:
        """Enqueue one record (redacted and bounded here). False if it was dropped; never raises."""
        if self._closed:
            self._count_drop()
            return False
        try:
            line = bounded_line(redact_record(record, self._matcher), self.max_value_bytes)
        except Exception as exc:  # unserialisable record: a bug upstream, not a reason to crash
            self._failed(exc)
            return False
        try:
            with self._progress:
                self._queue.put_nowait(line)
                self._enqueued += 1
        except queue.Full:
            self._count_drop()
            return False
        return True

    def log_rejection(self, **fields: Any) -> bool:
        """`write(rejection_record(**fields))`: the one call a guard or enforcer needs."""
        try:
            record = rejection_record(**fields)
        except Exception as exc:
            self._failed(exc)
            return False
        return self.write(record)

    def health(self) -> dict[str, Any]:
        """For /readyz: ok is False while the last write failed or the writer is gone."""
        alive = self._thread.is_alive() or self._closed
        error = self.last_error if alive else (self.last_error or "writer thread stopped")
        return {
            "ok": error is None,
            "error": error,
            "written": self.written,
            "dropped": self.dropped,
            "errors": self.errors,
            "queued": self._queue.qsize(),
        }

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Wait until everything enqueued so far is written (or failed). False on timeout."""
        with self._progress:
            target = self._enqueued
            return self._progress.wait_for(lambda: self._processed >= target or not self._thread.is_alive(), timeout)

    def close(self, timeout: float | None = 5.0) -> None:
        """Drain the queue, stop the writer and close the file. Later writes are dropped."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._close_fd()

    async def aflush(self) -> bool:
        """flush() off the event loop."""
        return await asyncio.to_thread(self.flush)

    async def aclose(self) -> None:
        """close() off the event loop (for the app's cleanup hooks)."""
        await asyncio.to_thread(self.close)

    def _count_drop(self) -> None:
        with self._counts:
            self.dropped += 1
        if self._on_drop is not None:
            with contextlib.suppress(Exception):
                self._on_drop()

    def _failed(self, exc: BaseException) -> None:
        first = self.last_error is None
        with self._counts:
            self.errors += 1
        self.last_error = redact_text(f"{type(exc).__name__}: {exc}")
        if first:  # log transitions only: a full disk must not flood stderr
            log.error("rejection log write failed (%s): %s", self.path, self.last_error)
        if self._on_error is not None:
            with contextlib.suppress(Exception):
                self._on_error(exc)

    # ------------------------------------------------------------------ writer thread

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                assert isinstance(item, bytes)
                self._write_line(item)
            finally:
                with self._progress:
                    self._processed += 1
                    self._progress.notify_all()

    def _write_line(self, line: bytes) -> None:
        try:
            if self.path == "-":
                self._write_stream(line)
            else:
                self._write_file(line)
        except Exception as exc:
            self._failed(exc)
            return
        with self._counts:
            self.written += 1
        if self.last_error is not None:
            log.warning("rejection log writes recovered (%s)", self.path)
            self.last_error = None

    def _write_stream(self, line: bytes) -> None:
        stream = self._stream
        assert stream is not None
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            buffer.write(line)
            buffer.flush()
        else:
            stream.write(line.decode())
            stream.flush()

    def _open(self) -> None:
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            self._size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def _close_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _write_file(self, line: bytes) -> None:
        if self._fd is None:
            self._open()  # retry each line: a fixed permission or freed disk recovers by itself
        if self._size > 0 and self._size + len(line) > self.max_bytes:
            self._rotate()
        fd = self._fd
        assert fd is not None
        before = self._size
        try:
            n = _write(fd, line)  # one write per line; O_APPEND keeps it whole
            while n < len(line):  # a short write only happens when the disk fills mid-line
                n += _write(fd, line[n:])
        except OSError:
            # Take back a partial line so the file never holds a torn record.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)
            raise
        self._size = before + len(line)

    def _rotate(self) -> None:
        self._close_fd()
        try:
            if self.backups <= 0:
                os.truncate(self.path, 0)
            else:
                for i in range(self.backups - 1, 0, -1):
                    src = f"{self.path}.{i}"
                    if os.path.exists(src):
                        os.replace(src, f"{self.path}.{i + 1}")
                os.replace(self.path, f"{self.path}.1")
        finally:
            self._open()
