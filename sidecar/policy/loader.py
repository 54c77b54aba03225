"""Reading a policy directory, compiling it for regorus, and watching it for changes.

A bundle is every `*.rego` file (minus `*_test.rego`) and every `data.json` under the
directory. Dot-entries are skipped: a Kubernetes ConfigMap mount keeps the real files in
`..2024_…/` behind a `..data` symlink and exposes them as top-level symlinks, so walking the
dot-directories would load every file twice. `data.json` in a subdirectory `a/b/` lands
under `data.a.b`, as with `opa run`.

The watcher polls: ConfigMap updates swap the `..data` symlink atomically, which inotify on
the top-level symlinks does not report and which can keep mtimes unchanged, so it compares a
hash of the content read through the (resolved) paths instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from sidecar.policy._regorus import UNDEFINED, Engine, RegoError, is_fatal
from sidecar.policy.shortcuts import LibraryShortcuts
from sidecar.policy.sources import PolicyLoadError as PolicyLoadError
from sidecar.policy.sources import resolve

log = logging.getLogger("sidecar.policy")

DECISION: Final = "data.sidecar.decision"
VISIBLE_TOOLS: Final = "data.sidecar.visible_tools"
RESULT_DECISION: Final = "data.sidecar.result_decision"
ENTRY_POINTS: Final = (DECISION, VISIBLE_TOOLS, RESULT_DECISION)

# Inputs evaluated once at load: regorus reports unknown functions and other evaluation
# errors only when it first evaluates them.
SAMPLE_CALL: Final[dict[str, Any]] = {
    "version": 1,
    "phase": "tool_call",
    "provider": "anthropic",
    "model": "sample",
    "agent": {"id": "sample", "namespace": "default", "labels": {}},
    "session": {"id": "sample", "source": "header", "calls_total": 0, "calls_by_tool": {}},
    "tool": {
        "name": "sample_tool",
        "declared": True,
        "kind": "function",
        "schema_hash": "",
        "previous_schema_hash": None,
    },
    "call": {"id": "sample", "args": {}, "args_hash": "", "index": 0, "parallel": 1},
    "validation": {"valid": True, "errors": []},
    "replay": {"count": 0, "first_seen": None},
    "approval": {"status": "none", "id": None, "approved_by": None},
    "time": "1970-01-01T00:00:00Z",
}
SAMPLE_LIST: Final[dict[str, Any]] = {**SAMPLE_CALL, "phase": "tool_list", "tools": ["sample_tool"]}
SAMPLE_RESULT: Final[dict[str, Any]] = {
    **SAMPLE_CALL,
    "phase": "tool_result",
    "result": {"is_error": False, "bytes": 0, "anomalies": []},
}


@dataclass(frozen=True)
class PolicyBundle:
    """The sources of one policy revision (pure data: safe to build in any thread)."""

    directory: str | None  # the directory to watch; None for the packaged library
    modules: tuple[tuple[str, str], ...]  # (display path, text)
    data: dict[str, Any]
    revision: str
    read_at: float = field(default_factory=time.time)


def _visible(path: Path, root: Path) -> bool:
    return not any(part.startswith(".") for part in path.relative_to(root).parts)


def policy_files(directory: str | os.PathLike[str], *, tests: bool = False) -> tuple[list[Path], list[Path]]:
    """(rego files, data.json files) under `directory`, sorted; tests only if asked."""
    root = Path(directory)
    if not root.is_dir():
        raise PolicyLoadError(f"policy directory not found: {directory}")
    rego: list[Path] = []
    data: list[Path] = []
    for current, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        base = Path(current)
        for name in sorted(files):
            path = base / name
            if not _visible(path, root):
                continue
            if name.endswith(".rego") and (tests or not name.endswith("_test.rego")):
                rego.append(path)
            elif name == "data.json":
                data.append(path)
    return rego, data


def _merge_at(target: dict[str, Any], prefix: tuple[str, ...], value: Any, source: str) -> None:
    for key in prefix:
        target = target.setdefault(key, {})
    if not isinstance(value, dict):
        raise PolicyLoadError(f"{source}: the top level must be a JSON object")
    for key, item in value.items():
        if key in target and isinstance(target[key], dict) and isinstance(item, dict):
            _merge_at(target, (key,), item, source)
        elif key in target:
            raise PolicyLoadError(f"{source}: key {key!r} is already defined by another data.json")
        else:
            target[key] = item


def read_bundle(spec: str | os.PathLike[str] | None, *, tests: bool = False) -> PolicyBundle:
    """Read the sources of a policy spec (a directory, `builtin` or None for the packaged
    default, `example:NAME`); blocking file I/O, so run it in a thread from async code."""
    source = resolve(spec)
    mods: list[tuple[str, str]] = []
    data: dict[str, Any] = {}
    raw_data = b""
    try:
        for root in source.roots:
            rego_paths, data_paths = policy_files(root, tests=tests)
            for path in rego_paths:
                mods.append((source.display(path, root), path.read_text(encoding="utf-8")))
            for path in data_paths:
                raw = path.read_bytes()
                raw_data += raw
                shown = source.display(path, root)
                try:
                    loaded = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise PolicyLoadError(f"{shown}: invalid JSON: {exc}") from None
                _merge_at(data, path.parent.relative_to(root).parts, loaded, shown)
    except OSError as exc:
        raise PolicyLoadError(f"cannot read policy file: {exc}") from None
    if not mods:
        raise PolicyLoadError(f"no .rego files in {source.spec}")
    return PolicyBundle(source.directory, tuple(mods), data, _revision(tuple(mods), raw_data))


def _revision(modules: tuple[tuple[str, str], ...], data: bytes) -> str:
    digest = hashlib.sha256()
    for name, text in modules:
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(text.encode())
        digest.update(b"\0")
    digest.update(data)
    return digest.hexdigest()[:16]


def content_hash(directory: str | os.PathLike[str]) -> str:
    """Hash of every policy source under `directory`, read through resolved symlinks."""
    digest = hashlib.sha256()
    rego, data = policy_files(directory)
    for path in [*rego, *data]:
        digest.update(str(path).encode())
        digest.update(b"\0")
        try:
            digest.update(path.resolve().read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()


@dataclass
class CompiledPolicy:
    """A validated regorus engine for one bundle, plus which entry points it defines."""

    bundle: PolicyBundle
    engine: Engine
    defined: frozenset[str]
    thread_id: int
    loaded_at: float
    warnings: tuple[str, ...] = ()  # lint warnings (sidecar/policy/lint.py); errors refuse the load
    # Answers of this revision remembered by the input fields their rule reads (see
    # sidecar/policy/reads.py and EmbeddedEngine.visible_tools): rule -> the projector that
    # cuts an input to what it reads (reads.projector; None: its reads cannot be bounded, never
    # remembered), and (rule, the input so cut, as JSON) -> value.
    projectors: dict[str, Callable[[dict[str, Any]], dict[str, Any]] | None] = field(default_factory=dict)
    answers: dict[tuple[str, bytes], Any] = field(default_factory=dict)
    # The shipped rules' shortcut decisions answered in Python (sidecar/policy/shortcuts.py):
    # None unless this bundle's rules are the shipped ones, unchanged.
    shortcuts: LibraryShortcuts | None = None


def compile_bundle(bundle: PolicyBundle, *, require_decision: bool = True) -> CompiledPolicy:
    """Parse, add data, evaluate every entry point once (regorus then finds unsafe variables
    in every rule), and lint every branch (sidecar/policy/lint.py: unknown functions, arity,
    types, conflicts, data types). Any error refuses the bundle: a reload keeps the last good.

    Must run on the thread that will evaluate (regorus engines are thread-bound).
    """
    import threading

    engine = Engine()
    try:
        for name, text in bundle.modules:
            engine.add_policy(name, text)
    except RegoError as exc:
        raise PolicyLoadError(str(exc)) from None
    try:
        engine.add_data(bundle.data)
    except RegoError as exc:
        raise PolicyLoadError(f"policy data: {exc}") from None
    defined: set[str] = set()
    for rule, sample in (
        (DECISION, SAMPLE_CALL),
        (VISIBLE_TOOLS, SAMPLE_LIST),
        (RESULT_DECISION, SAMPLE_RESULT),
    ):
        engine.set_input(sample)
        try:
            value = engine.eval_rule(rule)
        except BaseException as exc:
            if is_fatal(exc):
                raise
            raise PolicyLoadError(f"evaluating {rule} at load: {exc}") from None
        if value is not UNDEFINED or _rule_exists(engine, rule):
            defined.add(rule)
    if require_decision and DECISION not in defined:
        raise PolicyLoadError("no policy defines data.sidecar.decision (package sidecar)")
    from sidecar.policy.lint import Severity, lint, lint_data  # (lint reads this module's AST helpers)

    findings = [*lint_data(bundle.data), *lint(engine.ast(), bundle.data)]
    errors = [str(f) for f in findings if f.severity is Severity.ERROR]
    if errors:
        raise PolicyLoadError("\n".join(errors))
    warnings = tuple(str(f) for f in findings if f.severity is Severity.WARNING)
    shortcuts = LibraryShortcuts.for_policy(bundle.modules, bundle.data)
    return CompiledPolicy(
        bundle, engine, frozenset(defined), threading.get_ident(), time.time(), warnings, shortcuts=shortcuts
    )


def _rule_exists(engine: Engine, rule: str) -> bool:
    """Whether some module defines `rule` (regorus raises for undefined paths, see _regorus)."""
    package, _, name = rule.rpartition(".")
    for module in engine.ast():
        ast = module.get("ast", {})
        if "data." + _ref(ast.get("package", {}).get("refr")) != package:
            continue
        for item in ast.get("rules", []):
            if rule_name(item) == name:
                return True
    return False


def _ref(node: Any) -> str:
    """Dotted name of a regorus AST ref (Var / RefDot)."""
    if not isinstance(node, dict):
        return ""
    if "Var" in node:
        return str(node["Var"].get("value", ""))
    if "RefDot" in node:
        inner = node["RefDot"]
        field_ = inner.get("field")
        name = field_[1] if isinstance(field_, list) and len(field_) > 1 else ""
        return f"{_ref(inner.get('refr'))}.{name}"
    if "RefBrack" in node:
        return _ref(node["RefBrack"].get("refr"))
    return ""


def rule_name(item: dict[str, Any]) -> str:
    """First segment of a rule's head ('test_x' for `test_x if …`), '' if not found."""
    spec = item.get("Spec") or item.get("Default") or {}
    head = spec.get("head") or {}
    for value in head.values():
        if isinstance(value, dict) and "refr" in value:
            return _ref(value["refr"]).split(".", 1)[0]
    if "refr" in spec:
        return _ref(spec["refr"]).split(".", 1)[0]
    return ""


def rule_line(item: dict[str, Any]) -> int:
    spec = item.get("Spec") or item.get("Default") or {}
    span = spec.get("span") or {}
    return int(span.get("line", 0))


def package_of(module: dict[str, Any]) -> str:
    return "data." + _ref(module.get("ast", {}).get("package", {}).get("refr"))


ReloadHook = Callable[[bool, str | None], None]


class PolicyWatcher:
    """Polls a policy directory and hands changed bundles to `apply` (on the loop thread).

    `apply` compiles and swaps, or raises PolicyLoadError to keep the last good revision.
    """

    def __init__(
        self,
        directory: str,
        interval_s: float,
        current_hash: str,
        apply: Callable[[PolicyBundle], None],
        on_error: Callable[[str], None],
    ) -> None:
        self.directory = directory
        self.interval_s = interval_s
        self._hash = current_hash
        self._failed_hash: str | None = None
        self._apply = apply
        self._on_error = on_error
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="policy-watcher")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def poll_once(self) -> None:
        """One check: read and hash in a thread, compile here (the loop's thread)."""
        try:
            new_hash = await asyncio.to_thread(content_hash, self.directory)
        except PolicyLoadError as exc:
            self._report(str(exc), "missing")
            return
        if new_hash == self._failed_hash:
            return
        if new_hash == self._hash and self._failed_hash is None:
            return
        # (A revert to the revision in force after a broken one is loaded again, so the
        # error clears: the running policy never changed, but health must say it is fine.)
        try:
            bundle = await asyncio.to_thread(read_bundle, self.directory)
            self._apply(bundle)
        except (PolicyLoadError, RegoError) as exc:
            self._report(str(exc), new_hash)
            return
        self._hash = new_hash
        self._failed_hash = None

    def _report(self, error: str, failed_hash: str) -> None:
        if failed_hash != self._failed_hash:  # count and log each broken revision once
            self._failed_hash = failed_hash
            self._on_error(error)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.poll_once()
            except Exception:  # never let the watcher die
                log.exception("policy watcher failed")
