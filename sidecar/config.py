"""All settings in one pydantic model: YAML file, then SIDECAR_* environment, then CLI flags.

Nested keys use a double underscore in the environment: `SIDECAR_POLICY__ENGINE=opa`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

ENV_PREFIX = "SIDECAR_"


class ConfigError(Exception):
    """A configuration problem, worded for the operator (names the key)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return value


def _origin(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"expected an http(s) URL such as https://api.anthropic.com, got {value!r}")
    if parts.query or parts.fragment:
        raise ValueError("an upstream URL takes no query or fragment")
    return value.rstrip("/")


class LockdownSettings(_Section):
    """Argument lockdown rules (all on by default)."""

    enabled: bool = True
    reject_unknown_properties: bool = True
    assert_formats: bool = True
    reject_null_for_non_nullable: bool = True


class ToolSettings(_Section):
    """Per-tool overrides, keyed by tool name under `tools:`."""

    mode: Literal["enforce", "observe", "block"] | None = None
    lockdown: LockdownSettings | None = None
    side_effects: bool | None = None
    # A side-effecting tool whose identical repeats are legitimate (replays are let through).
    repeatable: bool | None = None
    approval_mode: Literal["defer", "hold"] | None = None


# Tools without a `tools:` entry (most of them) share one empty override, never mutated.
_NO_OVERRIDES = ToolSettings.model_construct()


class EnforcementSettings(_Section):
    mode: Literal["enforce", "observe", "block"] = "enforce"
    max_repair_rounds: int = Field(2, ge=0, le=10)
    keepalive_interval_s: float = Field(5.0, gt=0)


class RejectionLogSettings(_Section):
    """`path: "-"` writes to stdout (for cluster log collection)."""

    path: str = "-"
    max_bytes: int = Field(50 * 1024 * 1024, ge=1024)
    backups: int = Field(5, ge=0)
    redact_keys: list[str] = Field(
        default_factory=lambda: ["password", "secret", "token", "api_key", "authorization", "credential"]
    )


class DecisionLogSettings(_Section):
    """One JSON line per tool-call decision with its full input (redacted), for `sidecar policy
    replay`. Off by default: it records every call's arguments, allowed ones included (customer
    addresses, amounts), which operators should opt into. `path: "-"` writes to stdout."""

    path: str | None = None
    max_bytes: int = Field(50 * 1024 * 1024, ge=1024)
    backups: int = Field(5, ge=0)
    redact_keys: list[str] = Field(
        default_factory=lambda: ["password", "secret", "token", "api_key", "authorization", "credential"]
    )


class PolicySettings(_Section):
    engine: Literal["embedded", "opa"] = "embedded"
    mode: Literal["enforce", "shadow", "off"] = "enforce"
    on_error: Literal["deny", "allow"] = "deny"
    opa_url: str = "http://127.0.0.1:8181"
    opa_timeout_s: float = Field(0.25, gt=0)
    opa_token: str | None = None
    reload_interval_s: float = Field(0.5, gt=0)
    decision_log: DecisionLogSettings = Field(default_factory=DecisionLogSettings)


class StateSettings(_Section):
    backend: Literal["memory", "sqlite", "redis"] = "memory"
    sqlite_path: str = "sidecar-state.db"
    redis_url: str = "redis://127.0.0.1:6379/0"
    on_unavailable: Literal["fail_closed", "fail_open"] = "fail_closed"
    ledger_ttl_s: float = Field(24 * 3600, gt=0)
    max_entries_per_session: int = Field(1000, ge=1)
    max_entries_total: int = Field(100_000, ge=1)
    max_result_bytes: int = Field(4096, ge=0)


class ApprovalSettings(_Section):
    mode: Literal["defer", "hold"] = "defer"
    hold_timeout_s: float = Field(300.0, gt=0)
    default_ttl_s: int = Field(3600, ge=1)
    webhook_url: str | None = None
    webhook_retries: int = Field(3, ge=0)
    # First retry delay; doubles per attempt (bounded by webhook_retries).
    webhook_backoff_s: float = Field(0.5, gt=0)
    webhook_timeout_s: float = Field(5.0, gt=0)
    # How often pending approvals are expired and the pending gauge is recounted.
    sweep_interval_s: float = Field(5.0, gt=0)
    # Hold mode: how often the store is polled for a decision made on another replica.
    poll_interval_s: float = Field(0.2, gt=0)
    # Admin API URL people can reach, for the approve/deny links in notifications
    # (default: the address the admin port is bound to).
    admin_url: str | None = None


class TelemetrySettings(_Section):
    tool_label_cap: int = Field(200, ge=1)
    otlp_endpoint: str | None = None
    otlp_metrics: bool = False
    capture_content: bool = False
    log_level: Literal["debug", "info", "warning", "error"] = "info"


class Settings(_Section):
    listen: str = "127.0.0.1:8080"
    # Not 9090 (Prometheus), 9091/9093 (Pushgateway, Alertmanager), 9100 (node exporter), 9464
    # (OpenTelemetry's Prometheus exporter), 8181 (OPA), 9901 / 15000-15090 (Envoy, Istio):
    # ports an agent's pod or the operator's machine commonly runs already.
    admin_listen: str = "127.0.0.1:9477"
    anthropic_upstream: str = "https://api.anthropic.com"
    openai_upstream: str = "https://api.openai.com"
    policies: str | None = None
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    upstream_timeout_s: float = Field(600.0, gt=0)
    upstream_connect_timeout_s: float = Field(10.0, gt=0)
    session_header: str = "X-Sidecar-Session"
    admin_token: str | None = None
    admin_token_file: str | None = None
    enforcement: EnforcementSettings = Field(default_factory=EnforcementSettings)
    lockdown: LockdownSettings = Field(default_factory=LockdownSettings)
    rejection_log: RejectionLogSettings = Field(default_factory=RejectionLogSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    state: StateSettings = Field(default_factory=StateSettings)
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    tools: dict[str, ToolSettings] = Field(default_factory=dict)
    # Who the agent is, for the policy input (`input.agent`). Unset: the pod's POD_NAME /
    # POD_NAMESPACE (Downward API), else empty.
    agent_id: str | None = None
    agent_namespace: str | None = None
    agent_labels: dict[str, str] = Field(default_factory=dict)

    _check_listen = field_validator("listen", "admin_listen")(classmethod(lambda cls, v: _host_port(v)))
    _check_upstreams = field_validator("anthropic_upstream", "openai_upstream")(classmethod(lambda cls, v: _origin(v)))

    @field_validator("agent_labels", mode="before")
    @classmethod
    def _labels_from_text(cls, value: Any) -> Any:
        """SIDECAR_AGENT_LABELS arrives as text: accept `team=support,tier=prod`."""
        if isinstance(value, str):
            pairs = [part.partition("=") for part in value.split(",") if part.strip()]
            if any(not sep for _, sep, _ in pairs):
                raise ValueError(f"expected key=value[,key=value...], got {value!r}")
            return {k.strip(): v.strip() for k, _, v in pairs}
        return value

    def tool(self, name: str) -> ToolSettings:
        return self.tools.get(name) or _NO_OVERRIDES

    def mode_for(self, tool: str) -> str:
        return self.tool(tool).mode or self.enforcement.mode

    def lockdown_for(self, tool: str) -> LockdownSettings:
        return self.tool(tool).lockdown or self.lockdown


def _set_path(target: dict[str, Any], path: list[str], value: Any) -> None:
    for key in path[:-1]:
        nested = target.setdefault(key, {})
        if not isinstance(nested, dict):
            raise ConfigError(f"{'.'.join(path)}: cannot set a nested key under a scalar")
        target = nested
    target[path[-1]] = value


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if path[0] not in Settings.model_fields:
            continue  # e.g. SIDECAR_SESSION used by scripts: not a setting
        try:
            value = yaml.safe_load(raw) if raw else raw
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (dict, list)) and path[-1] not in ("redact_keys", "tools"):
            value = raw
        if isinstance(value, (int, float, bool)) and path[0] in ("listen", "admin_listen"):
            value = raw
        _set_path(out, path, value)
    return out


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _describe(error: ValidationError, source: str) -> str:
    lines = [f"invalid configuration ({source}):"]
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "(root)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"  {key}: {message}")
    return "\n".join(lines)


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    flags: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """File < environment < flags. Raises ConfigError naming the key and the problem."""
    data: dict[str, Any] = {}
    source = "defaults"
    if config_file is not None:
        source = str(config_file)
        try:
            loaded = yaml.safe_load(Path(config_file).read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {config_file}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {config_file} is not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {config_file}: the top level must be a mapping")
        data = loaded
    data = _merge(data, _env_overrides(dict(os.environ if environ is None else environ)))
    data = _merge(data, {k: v for k, v in (flags or {}).items() if v is not None})
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None
