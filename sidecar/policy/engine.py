"""Two Rego engines behind one interface: embedded regorus (default) and an OPA server.

Both answer the same three questions (data.sidecar.decision / visible_tools /
result_decision) for the same policies, and both turn an engine failure into a Decision
shaped by `on_error`, with `error` set so the caller can count it as decision="error".
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

import aiohttp
import orjson

from sidecar.config import PolicySettings
from sidecar.policy._regorus import UNDEFINED, RegoError, is_fatal
from sidecar.policy.decision_log import DecisionLog
from sidecar.policy.loader import (
    DECISION,
    RESULT_DECISION,
    VISIBLE_TOOLS,
    CompiledPolicy,
    PolicyBundle,
    PolicyLoadError,
    PolicyWatcher,
    ReloadHook,
    compile_bundle,
    content_hash,
    read_bundle,
)
from sidecar.policy.reads import ReadsAnalysis, projector
from sidecar.policy.shortcuts import LibraryShortcuts
from sidecar.policy.sources import resolve

log = logging.getLogger("sidecar.policy")

OnError = Literal["deny", "allow"]

# Answers one policy revision remembers (EmbeddedEngine.remembered); all forgotten at once
# when full, and with the revision.
REMEMBERED_ANSWERS = 1024


class ResultAction(StrEnum):
    """What a `tool_result` decision does with the result before the request goes upstream."""

    ALLOW = "allow"  # forwarded as the agent sent it
    WITHHOLD = "withhold"  # the model gets a notice in place of the content
    REDACT = "redact"  # the matched spans are replaced


@dataclass
class Decision:
    """The policy's answer for one call (or result). `error` is set when on_error decided."""

    allow: bool
    reasons: list[str] = field(default_factory=list)
    require_approval: dict[str, Any] | None = None
    retryable: bool = False
    error: str | None = None
    # Id of the rule that decided, when the policy says (the shipped library does): the
    # decision log and `sidecar policy replay` count flips per rule.
    rule: str | None = None
    # Phase tool_result only: `action` as the policy wrote it (see `result_action`), and for
    # `redact` the anomaly kinds whose spans are replaced (None: every located finding).
    action: str | None = None
    redact: list[str] | None = None

    def result_action(self) -> ResultAction:
        """`redact` redacts (whatever `allow` says); otherwise `allow: false`, `withhold` and
        any action the sidecar does not know withhold (fail closed); `allow: true` with no
        action or `allow` forwards."""
        if self.action == ResultAction.REDACT:
            return ResultAction.REDACT
        if not self.allow or self.action not in (None, ResultAction.ALLOW):
            return ResultAction.WITHHOLD
        return ResultAction.ALLOW

    @property
    def outcome(self) -> str:
        """Label for sidecar_policy_decisions_total: allow, deny, approval or error."""
        if self.error is not None:
            return "error"
        if self.allow:
            return "allow"
        return "approval" if self.require_approval else "deny"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "allow": self.allow,
            "reasons": self.reasons,
            "require_approval": self.require_approval,
            "retryable": self.retryable,
        }
        if self.rule is not None:
            out["rule"] = self.rule
        if self.action is not None:
            out["action"] = self.action
        if self.redact is not None:
            out["redact"] = self.redact
        if self.error is not None:
            out["error"] = self.error
        return out


class MalformedDecision(ValueError):
    """The policy returned something that is not a decision document (a policy bug)."""


def decision_from_value(value: Any) -> Decision:
    """Validate a decision document (the contract shape) into a Decision."""
    if not isinstance(value, dict) or not isinstance(value.get("allow"), bool):
        raise MalformedDecision(f"decision must be an object with a boolean 'allow', got {value!r:.200}")
    reasons = value.get("reasons", [])
    if isinstance(reasons, str):
        reasons = [reasons]
    if not isinstance(reasons, list):
        raise MalformedDecision("decision 'reasons' must be a list of strings")
    approval = value.get("require_approval")
    if approval is not None:
        if not isinstance(approval, dict) or not isinstance(approval.get("group"), str):
            raise MalformedDecision("decision 'require_approval' must be null or {group, ttl_s}")
        ttl = approval.get("ttl_s")
        approval = {
            "group": approval["group"],
            "ttl_s": int(ttl) if isinstance(ttl, (int, float)) else None,
        }
    return Decision(
        allow=value["allow"],
        reasons=[str(r) for r in reasons],
        require_approval=approval,
        retryable=bool(value.get("retryable", False)),
        # Optional: only a string names a rule; anything else is ignored, never an error.
        rule=rule if isinstance(rule := value.get("rule"), str) else None,
        # Optional (tool_result): an action that is not a string is kept as text, so it reads
        # as unknown (withhold); a `redact` list that is not strings means every finding.
        action=None if (action := value.get("action")) is None else str(action),
        redact=[str(k) for k in kinds] if isinstance(kinds := value.get("redact"), list) else None,
    )


def undefined_decision() -> Decision:
    """An undefined data.sidecar.decision counts as deny (no policy said yes)."""
    return Decision(False, ["no policy decision for this call (data.sidecar.decision is undefined)"])


def error_decision(on_error: OnError, error: str) -> Decision:
    """What `on_error` makes of a failed evaluation; `error` marks it for the metrics."""
    if on_error == "allow":
        return Decision(True, [f"policy engine error; allowed by on_error=allow: {error}"], error=error)
    return Decision(
        False,
        ["the policy engine failed; the call is refused (on_error=deny)"],
        retryable=False,
        error=error,
    )


def visible_from_value(value: Any) -> list[str] | None:
    if value is UNDEFINED or value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MalformedDecision("visible_tools must be a set or array of tool names")
    return list(value)


def apply_mode(decision: Decision, mode: str) -> tuple[Decision, bool]:
    """Rollout modes: (effective decision, would-have-refused-in-shadow).

    enforce: as decided. shadow: always allowed, flag says whether enforce would refuse.
    off: allowed, no flag (callers normally skip evaluation altogether).
    """
    if mode == "enforce":
        return decision, False
    if mode == "shadow":
        if decision.allow:
            return decision, False
        return replace(decision, allow=True, require_approval=None, retryable=False), True
    if mode == "off":
        return Decision(True, [], None, False, decision.error), False
    raise ValueError(f"unknown policy mode {mode!r}")


@runtime_checkable
class PolicyEngine(Protocol):
    name: str

    async def decide(self, input: dict[str, Any]) -> Decision: ...

    def quick_decision(self, call: dict[str, Any]) -> Decision | None:
        """The decision for a call from its own fields alone (`tool`, `call`, `validation`,
        `replay`, `approval` of the input), when the engine can give it without the rest of
        the input; None: ask `decide` with the whole input."""
        ...

    async def visible_tools(self, input: dict[str, Any]) -> list[str] | None: ...

    def quick_visible_tools(self, names: list[str]) -> list[str] | None:
        """`visible_tools` from the declared names alone (`input.tools`), when the engine can
        give it without the rest of the input; None: ask `visible_tools`."""
        ...

    async def result_decision(self, input: dict[str, Any]) -> Decision | None: ...

    def health(self) -> dict[str, Any]: ...

    def stale_seconds(self) -> float:
        """How long the policy in force has been behind its source (0 when current)."""
        ...

    async def close(self) -> None: ...


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."


class _Interpreting:
    """Turns a rule's raw value (or an evaluation error) into what callers get: the same
    for every engine, so both give the same decisions for the same values."""

    on_error: OnError
    eval_errors: int
    name: str
    decision_log: DecisionLog | None = None

    def _revision(self) -> str | None:
        return None

    def quick_decision(self, call: dict[str, Any]) -> Decision | None:
        return None

    def quick_visible_tools(self, names: list[str]) -> list[str] | None:
        return None

    def _record(self, document: dict[str, Any], decision: Decision) -> Decision:
        """The decision log line for a tool_call decision (when the log is configured)."""
        if self.decision_log is not None:
            self.decision_log.record(document, decision, engine=self.name, revision=self._revision())
        return decision

    async def _close_log(self) -> None:
        if self.decision_log is not None:
            await asyncio.to_thread(self.decision_log.close)

    def _decision(self, value: Any, error: str | None, *, required: bool) -> Decision | None:
        """The Decision of a rule's value; an undefined value is `undefined_decision()` where a
        decision is `required` (a call), else None (a result: nothing to say). The undefined
        decision is made only when needed: building it on every call cost about 1.5 us."""
        if error is not None:
            return error_decision(self.on_error, error)
        if value is UNDEFINED:
            return undefined_decision() if required else None
        try:
            return decision_from_value(value)
        except MalformedDecision as exc:
            self.eval_errors += 1
            return error_decision(self.on_error, str(exc))

    def _visible(self, value: Any, error: str | None) -> list[str] | None:
        """On error: None (all visible). Hiding is not the safety net: every call is decided."""
        if error is not None:
            return None
        try:
            return visible_from_value(value)
        except MalformedDecision as exc:
            self.eval_errors += 1
            log.warning("%s", exc)
            return None


class EmbeddedEngine(_Interpreting):
    """regorus in-process. Everything runs synchronously on the event loop's thread.

    regorus engines are bound to their creating thread; if this object is used from a
    thread other than the one that compiled the current revision (e.g. built before the
    loop started in another thread), it recompiles that revision for the calling thread
    rather than letting regorus panic.
    """

    name = "embedded"

    def __init__(
        self,
        settings: PolicySettings,
        policies_dir: str | None,
        *,
        strict: bool = True,
        on_reload: ReloadHook | None = None,
        data_overlay: dict[str, Any] | None = None,
    ) -> None:
        self.on_error: OnError = settings.on_error
        self.decision_log = DecisionLog.from_settings(settings.decision_log, settings.mode)
        self.reload_interval_s = settings.reload_interval_s
        self.policies_dir = policies_dir
        self.on_reload = on_reload
        self._overlay = data_overlay or {}
        self.reload_errors = 0
        self.eval_errors = 0
        self._error: str | None = None
        self._stale_since: float | None = None
        self._compiled: CompiledPolicy | None = None
        self._watcher: PolicyWatcher | None = None
        self._local = threading.local()
        initial_hash = ""
        watched: str | None = None
        try:
            # A directory is watched for changes; the packaged library (None, `builtin`,
            # `example:NAME`) is part of the installed package and never changes.
            watched = resolve(policies_dir).directory
            if watched is not None:
                initial_hash = content_hash(watched)
            self._compiled = compile_bundle(self._overlaid(read_bundle(policies_dir)))
        except PolicyLoadError as exc:
            if strict:
                raise
            self._fail(str(exc))
        if watched is not None:
            self._watcher = PolicyWatcher(watched, settings.reload_interval_s, initial_hash, self._apply, self._fail)
        self._start_watcher()

    # --- loading -------------------------------------------------------------------------

    def _overlaid(self, bundle: PolicyBundle) -> PolicyBundle:
        """The bundle with the configuration's per-tool traits written into its data: one
        document the policy and every guard read (see `sidecar/policy/traits.py`)."""
        if not self._overlay:
            return bundle
        return replace(bundle, data=merge_data(bundle.data, self._overlay))

    def _start_watcher(self) -> None:
        if self._watcher is None or self._watcher.running:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # started by the first async call, or by start()
        self._watcher.start()

    @property
    def data(self) -> dict[str, Any]:
        """The `data` document of the policy in force (per-tool settings live there)."""
        return self._compiled.bundle.data if self._compiled is not None else {}

    async def start(self) -> None:
        """Start hot reload now (it otherwise starts with the first decision)."""
        self._start_watcher()

    def _apply(self, bundle: PolicyBundle) -> None:
        compiled = compile_bundle(self._overlaid(bundle))  # raises PolicyLoadError: last good one stays
        self._compiled = compiled
        self._error = None
        self._stale_since = None
        log.info("policy reload", extra={"ok": True, "revision": bundle.revision})
        if self.on_reload is not None:
            self.on_reload(True, None)

    def _fail(self, error: str) -> None:
        self.reload_errors += 1
        self._error = error
        if self._stale_since is None:
            self._stale_since = time.time()
        log.error(
            "policy reload failed; keeping the last good policy: %s",
            error,
            extra={"ok": False, "error": error},
        )
        if self.on_reload is not None:
            self.on_reload(False, error)

    async def reload_now(self) -> None:
        """Check the directory once, right now (tests, admin endpoints)."""
        if self._watcher is not None:
            await self._watcher.poll_once()

    def _current(self) -> CompiledPolicy | None:
        compiled = self._compiled
        if compiled is None or compiled.thread_id == threading.get_ident():
            return compiled
        # Another thread: use (or build) that thread's own copy, kept thread-local so it is
        # also dropped on that thread when the thread ends (regorus refuses to drop an engine
        # elsewhere). Should this engine go away first, the copy is dropped where that happens:
        # regorus refuses, and the copy leaks (one per thread and revision). The sidecar itself
        # evaluates on the loop's thread only.
        local: CompiledPolicy | None = getattr(self._local, "compiled", None)
        if local is None or local.bundle.revision != compiled.bundle.revision:
            local = compile_bundle(compiled.bundle)
            self._local.compiled = local
        return local

    # --- evaluation ----------------------------------------------------------------------

    def evaluate(self, rule: str, input: dict[str, Any]) -> Any:
        """Raw value of `rule` for `input` (UNDEFINED if undefined). Raises on errors.

        The engine gets only the input paths the rule can read (sidecar/policy/reads.py),
        which answers the same: regorus parses the input it is given. The benchmark's call
        decision is 691 bytes with the top-level fields `decision` reads and 404 with only
        its paths (no call id, hash, position, session id); measured in a sidecar under load
        (c=64, five alternated pairs), 1029 -> 1013 us of CPU per request."""
        compiled = self._current()
        if compiled is None:
            raise PolicyLoadError(f"no policy loaded: {self._error}")
        if rule not in compiled.defined:
            return UNDEFINED
        if rule == DECISION and compiled.shortcuts is not None:
            answer = compiled.shortcuts.decision(input)  # the shipped rules' shortcuts, in Python
            if answer is not None:
                return answer
        read = self._read_part(compiled, rule, input)
        compiled.engine.set_input_json(orjson.dumps(input if read is None else read))
        return compiled.engine.eval_rule(rule)

    @staticmethod
    def _read_part(compiled: CompiledPolicy, rule: str, input: dict[str, Any]) -> dict[str, Any] | None:
        """`input` cut to the paths `rule` can read (absent ones stay absent: undefined is not
        null in Rego), or None when its reads cannot be bounded."""
        if rule not in compiled.projectors:
            shape = ReadsAnalysis(compiled.engine.ast()).input_shape(rule)
            compiled.projectors[rule] = None if shape is None else projector(shape)
        cut = compiled.projectors[rule]
        return None if cut is None else cut(input)

    def remembered(self, rule: str, input: dict[str, Any]) -> Any:
        """`evaluate`, answered from memory when this revision already answered an input that
        agrees on every field the rule can read (sidecar/policy/reads.py). The tool list is
        asked on every request with a new session, count and time, which it does not read."""
        compiled = self._current()
        if compiled is None or rule not in compiled.defined:
            return self.evaluate(rule, input)
        read = self._read_part(compiled, rule, input)
        if read is None:
            return self.evaluate(rule, input)
        key = (rule, orjson.dumps(read))
        if key in compiled.answers:
            return compiled.answers[key]
        value = self.evaluate(rule, input)
        if len(compiled.answers) >= REMEMBERED_ANSWERS:
            compiled.answers.clear()
        compiled.answers[key] = value
        return value

    def _guarded(self, rule: str, input: dict[str, Any], *, remember: bool = False) -> tuple[Any, str | None]:
        try:
            return (self.remembered(rule, input) if remember else self.evaluate(rule, input)), None
        except BaseException as exc:  # PanicException is a BaseException
            if is_fatal(exc):
                raise
            self.eval_errors += 1
            log.warning("policy evaluation failed: %s", exc)
            return UNDEFINED, _short(exc)

    def decide_sync(self, input: dict[str, Any]) -> Decision:
        decision = self._decision(*self._guarded(DECISION, input), required=True)
        assert decision is not None
        return decision

    async def decide(self, input: dict[str, Any]) -> Decision:
        self._start_watcher()
        return self._record(input, self.decide_sync(input))

    def quick_decision(self, call: dict[str, Any]) -> Decision | None:
        """A shortcut's answer (sidecar/policy/shortcuts.py): they read the call's own fields
        only, so the caller need not build the rest of the input (session counts, agent, time;
        skipping it counted 1.9% fewer instructions per whole reply, bench/README.md). None
        when the rules are not the shipped ones, when no shortcut answers, and when a decision
        log is configured: its line records the whole input."""
        shortcuts = self._shortcuts()
        if shortcuts is None or self.decision_log is not None:
            return None
        value = shortcuts.decision(call)
        return None if value is None else decision_from_value(value)

    def quick_visible_tools(self, names: list[str]) -> list[str] | None:
        """The shipped rules' `visible_tools` reads `input.tools` alone (shortcuts.py)."""
        shortcuts = self._shortcuts()
        return None if shortcuts is None else shortcuts.visible_tools(names)

    def _shortcuts(self) -> LibraryShortcuts | None:
        """The policy in force's Python shortcuts (None: not the shipped rules, or no policy)."""
        self._start_watcher()
        compiled = self._current()
        return None if compiled is None else compiled.shortcuts

    def _revision(self) -> str | None:
        compiled = self._compiled
        return compiled.bundle.revision if compiled is not None else None

    async def visible_tools(self, input: dict[str, Any]) -> list[str] | None:
        self._start_watcher()
        return self._visible(*self._guarded(VISIBLE_TOOLS, input, remember=True))

    async def result_decision(self, input: dict[str, Any]) -> Decision | None:
        self._start_watcher()
        return self._decision(*self._guarded(RESULT_DECISION, input), required=False)

    def health(self) -> dict[str, Any]:
        compiled = self._compiled
        return {
            "ok": compiled is not None and self._error is None,
            # A good policy decides (the last good one while a reload fails): the sidecar serves.
            "serving": compiled is not None,
            "error": self._error,
            "stale_seconds": round(self.stale_seconds(), 3),
            "loaded_at": compiled.loaded_at if compiled else None,
            "revision": compiled.bundle.revision if compiled else None,
            "engine": self.name,
            "reload_errors": self.reload_errors,
        }

    def stale_seconds(self) -> float:
        since = self._stale_since
        return 0.0 if since is None else max(0.0, time.time() - since)

    async def close(self) -> None:
        if self._watcher is not None:
            await self._watcher.stop()
            self._watcher = None
        # The compiled policy is dropped here, on the thread that built it: regorus refuses to
        # drop an engine on another thread (a warning, and the engine leaks), and a closed
        # engine may linger in a reference cycle (its watcher's cancelled task) until a
        # collection runs on any thread. Decisions after this are refused: no policy.
        self._compiled = None
        await self._close_log()


class OpaError(Exception):
    """The OPA server could not answer (timeout, connection, HTTP status, bad body)."""


class _OpaClient:
    """Typed wrapper around opa-python-client's AsyncOpaClient.

    AsyncOpaClient is used as is for the request (POST /v1/data/<path> with {"input": …},
    bearer token, one aiohttp session), with its own retries off (retries=0) and its session
    timeout set to opa_timeout_s. Two things it cannot do are added here: an overall deadline
    that also covers connection set-up and body reading (asyncio.timeout), and a path prefix
    in opa_url (its root_url is host:port/v1 only, so root_url is set after construction).
    """

    def __init__(self, url: str, timeout_s: float, token: str | None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"policy.opa_url must be an http(s) URL, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = parts.scheme == "https"
        self._token = token
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def _open(self) -> Any:
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    from opa_client import AsyncOpaClient

                    client = AsyncOpaClient(
                        host=self._host,
                        port=self._port,
                        ssl=self._ssl,
                        token=self._token,
                        retries=0,
                        timeout=self.timeout_s,
                    )
                    client.root_url = f"{self.url}/v1"
                    await client.__aenter__()
                    self._client = client
        return self._client

    async def query(self, package: str, rule: str, input: dict[str, Any]) -> tuple[bool, Any]:
        """(defined, value) of data.<package>.<rule>; raises OpaError."""
        client = await self._open()
        try:
            async with asyncio.timeout(self.timeout_s):
                body = await client.query_rule(input, package, rule)
        except TimeoutError:
            raise OpaError(f"OPA did not answer within {self.timeout_s}s") from None
        except aiohttp.ClientResponseError as exc:
            raise OpaError(f"OPA answered HTTP {exc.status}") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise OpaError(f"OPA request failed: {_short(exc) or type(exc).__name__}") from None
        if not isinstance(body, dict):
            raise OpaError("OPA answered with something that is not a JSON object")
        return ("result" in body), body.get("result")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close_connection()
            self._client = None


class OpaEngine(_Interpreting):
    """A real OPA server over its REST Data API. The server loads the policies itself
    (`opa run --server --watch policies/`), so hot reload is OPA's job here."""

    name = "opa"

    def __init__(self, settings: PolicySettings) -> None:
        self.on_error: OnError = settings.on_error
        self.decision_log = DecisionLog.from_settings(settings.decision_log, settings.mode)
        self._client = _OpaClient(settings.opa_url, settings.opa_timeout_s, settings.opa_token)
        self.eval_errors = 0
        self.reload_errors = 0
        self._error: str | None = None
        self._last_ok: float | None = None
        self._failing_since: float | None = None

    async def _query(self, rule: str, input: dict[str, Any]) -> tuple[Any, str | None]:
        try:
            package, _, name = rule.removeprefix("data.").rpartition(".")
            defined, value = await self._client.query(package, name, input)
        except OpaError as exc:
            self.eval_errors += 1
            self._error = str(exc)
            if self._failing_since is None:
                self._failing_since = time.time()
            log.warning("OPA query %s failed: %s", rule, exc)
            return UNDEFINED, str(exc)
        self._error = None
        self._failing_since = None
        self._last_ok = time.time()
        return (value if defined else UNDEFINED), None

    async def decide(self, input: dict[str, Any]) -> Decision:
        decision = self._decision(*await self._query(DECISION, input), required=True)
        assert decision is not None
        return self._record(input, decision)

    async def visible_tools(self, input: dict[str, Any]) -> list[str] | None:
        return self._visible(*await self._query(VISIBLE_TOOLS, input))

    async def result_decision(self, input: dict[str, Any]) -> Decision | None:
        return self._decision(*await self._query(RESULT_DECISION, input), required=False)

    def health(self) -> dict[str, Any]:
        return {
            "ok": self._error is None,
            # Without answers from OPA nothing is decided (every call is refused by on_error).
            "serving": self._error is None,
            "error": self._error,
            "loaded_at": self._last_ok,
            "revision": None,
            "engine": self.name,
            "url": self._client.url,
        }

    def stale_seconds(self) -> float:
        """Seconds since OPA stopped answering (its own reloads are OPA's to report)."""
        since = self._failing_since
        return 0.0 if since is None else max(0.0, time.time() - since)

    async def close(self) -> None:
        await self._client.close()
        await self._close_log()


def build_engine(
    settings: PolicySettings,
    policies_dir: str | None,
    *,
    strict: bool = True,
    on_reload: Callable[[bool, str | None], None] | None = None,
    data_overlay: dict[str, Any] | None = None,
) -> EmbeddedEngine | OpaEngine:
    """The configured engine. Embedded: loads `policies_dir` now (a directory, or the packaged
    library: None or `builtin` for the safe default, `example:NAME` for an example) and
    raises PolicyLoadError if it is broken, unless strict=False (then it starts unhealthy,
    decides by on_error, and picks the policy up once fixed). Call from the thread that runs
    the event loop."""
    if settings.engine == "opa":
        return OpaEngine(settings)
    return EmbeddedEngine(settings, policies_dir, strict=strict, on_reload=on_reload, data_overlay=data_overlay)


def merge_data(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`overlay` written over `base`, objects merged key by key (a copy; neither is changed)."""
    merged = dict(base)
    for key, value in overlay.items():
        current = merged.get(key)
        merged[key] = merge_data(current, value) if isinstance(current, dict) and isinstance(value, dict) else value
    return merged


__all__ = [
    "Decision",
    "EmbeddedEngine",
    "OpaEngine",
    "PolicyEngine",
    "PolicyLoadError",
    "RegoError",
    "ResultAction",
    "apply_mode",
    "build_engine",
    "decision_from_value",
    "error_decision",
]
