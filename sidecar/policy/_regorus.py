"""Typed wrapper around regorus (untyped Rust extension), and its quirks in one place.

Quirks handled here:
- errors are RuntimeError with a Rust backtrace appended: `clean_error` strips it;
- evaluating a rule that no policy defines raises "not a valid rule path" instead of
  returning undefined: `Rule.evaluate` maps that to `UNDEFINED`;
- engines are bound to the thread that created them (another thread gets a PanicException,
  a BaseException): callers must create and use them on one thread (the event loop's). Not
  even dropping one elsewhere is allowed ("unsendable, but is being dropped on another
  thread": a warning, and the engine leaks), and the cyclic collector drops an engine caught
  in a reference cycle on whichever thread it happens to run: `Engine.__del__` hands such an
  engine back to its own thread, which drops it the next time it makes one;
- partial-set results come back as Python sets: `to_plain` turns them into sorted lists, the
  way OPA serialises sets.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Final

# regorus errors carry a Rust backtrace; capturing it costs ~0.4 s per error, which would
# make every failing evaluation (and on_error) that slow. Must be set before the first error.
os.environ.setdefault("RUST_LIB_BACKTRACE", "0")

import orjson
import regorus

UNDEFINED: Final = object()

# Raw engines whose wrapper was collected on another thread than theirs, by that thread's id:
# kept alive here until their own thread drops them (`_drop_orphans`). Plain dict and list
# operations only (atomic under the GIL): a finalizer must never wait for a lock.
_ORPHANS: dict[int, list[Any]] = {}


def _drop_orphans() -> None:
    """Drop, on this thread, the engines of this thread that were collected elsewhere."""
    if _ORPHANS:
        _ORPHANS.pop(threading.get_ident(), None)


_LOCATION = re.compile(r"-->\s*(?P<file>.+?):(?P<line>\d+):(?P<col>\d+)")
_ERROR = re.compile(r"^error:\s*(?P<msg>.*)$", re.MULTILINE)


class RegoError(Exception):
    """A regorus parse, compile or evaluation error, with its location when known."""

    def __init__(
        self,
        message: str,
        file: str | None = None,
        line: int | None = None,
        col: int | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.col = col
        self.detail = detail

    def where(self) -> str:
        if self.file is None:
            return ""
        return f"{self.file}:{self.line}:{self.col}"

    def __str__(self) -> str:
        where = self.where()
        return f"{where}: {self.message}" if where else self.message


def clean_error(exc: BaseException) -> RegoError:
    """Turn a regorus exception into a RegoError: message, file, line; backtrace dropped."""
    text = str(exc).split("Stack backtrace:", 1)[0].strip()
    loc = _LOCATION.search(text)
    err = _ERROR.search(text)
    message = err.group("msg").strip() if err else (text.splitlines()[-1] if text else repr(exc))
    if loc is None:
        return RegoError(message, detail=text)
    return RegoError(message, loc.group("file"), int(loc.group("line")), int(loc.group("col")), text)


def is_fatal(exc: BaseException) -> bool:
    """Exceptions never to swallow while catching BaseException (needed for PanicException)."""
    return isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)) or type(exc).__name__ == "CancelledError"


# What regorus gives back as is: nothing inside to convert (checked by exact type: its values
# are the builtin types themselves, and this is the common case of a decision's fields).
_PLAIN = frozenset({str, bool, int, float, type(None)})


def to_plain(value: Any) -> Any:
    """Sets to sorted lists (OPA's JSON form of a set), recursively. A decision is a dict of
    strings, flags and short lists: its scalars are passed over without a call each."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, (set, frozenset)):
        items = [to_plain(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
    if isinstance(value, dict):
        return {k: v if type(v) in _PLAIN else to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _PLAIN else to_plain(v) for v in value]
    return value


class Engine:
    """One regorus engine. Not thread-safe and bound to its creating thread."""

    def __init__(self, raw: Any | None = None) -> None:
        _drop_orphans()
        self._raw: Any = raw if raw is not None else regorus.Engine()
        self._thread = threading.get_ident()

    def __del__(self, _ident: Any = threading.get_ident, _orphans: dict[int, list[Any]] = _ORPHANS) -> None:
        # Collected on another thread (a cycle the collector broke there): keep the raw engine
        # alive for its own thread to drop, instead of dropping it here. (Defaults, not
        # globals: a finalizer may run while the interpreter shuts down.)
        raw = self.__dict__.get("_raw")
        thread = self.__dict__.get("_thread")
        if raw is not None and thread is not None and thread != _ident():
            _orphans.setdefault(thread, []).append(raw)

    def add_policy(self, path: str, text: str) -> str:
        try:
            return str(self._raw.add_policy(path, text))
        except Exception as exc:
            raise clean_error(exc) from None

    def add_data(self, data: dict[str, Any]) -> None:
        try:
            self._raw.add_data_json(orjson.dumps(data).decode())
        except Exception as exc:
            raise clean_error(exc) from None

    def set_input(self, value: Any) -> None:
        self.set_input_json(orjson.dumps(value))

    def set_input_json(self, text: bytes) -> None:
        """The input as JSON text (what `set_input` writes), for a caller that has it already."""
        try:
            self._raw.set_input_json(text.decode())
        except Exception as exc:
            raise clean_error(exc) from None

    def eval_rule(self, rule: str) -> Any:
        """The rule's value (sets as sorted lists), or UNDEFINED."""
        try:
            value = self._raw.eval_rule(rule)
        except Exception as exc:
            if "not a valid rule path" in str(exc):
                return UNDEFINED
            raise clean_error(exc) from None
        return UNDEFINED if value is None else to_plain(value)

    def ast(self) -> list[dict[str, Any]]:
        parsed: list[dict[str, Any]] = orjson.loads(self._raw.get_ast_as_json())
        return parsed

    def clone(self) -> Engine:
        return Engine(self._raw.clone())
