"""All settings in one pydantic model: defaults < YAML file < SIDECAR_* environment < CLI flags.

Loading (sidecar/config/loader.py) is pydantic-settings' environment source plus what it does
not do by itself: every value remembers where it came from (file and key, variable, flag) so
an error names the real source, and unknown keys and unknown `SIDECAR_*` variables fail
start-up with a "did you mean". Environment values are strings unless the field's type says
otherwise; nested keys use a double underscore (`SIDECAR_POLICY__ENGINE=opa`); lists and
mappings are JSON (`SIDECAR_REJECTION_LOG__REDACT_KEYS='["password","pin"]'`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

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
    # String values (arguments, raw argument text) longer than this are cut, their size kept:
    # one hostile call cannot write megabytes per line.
    max_value_bytes: int = Field(4096, ge=64)


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


class SlackSettings(_Section):
    """Slack interactive approvals: each new approval is posted to `channel` with approve/deny
    buttons; Slack calls back `POST /slack/interactions` on the admin port, signed with the app's
    signing secret; `users_file` maps Slack user ids to approvers (`USER_ID NAME GROUP,GROUP`)."""

    signing_secret: str = Field(min_length=1)
    bot_token: str = Field(min_length=1)
    channel: str = Field(min_length=1)
    users_file: str = Field(min_length=1)
    # Slack's Web API; tests point it at a stand-in on loopback.
    api_url: str = "https://slack.com/api/"
    timeout_s: float = Field(10.0, gt=0)


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
    # Approvers in this group may decide (and see) approvals of every group. Unset: nobody may
    # decide outside their own groups.
    admin_group: str | None = Field(None, min_length=1, pattern=r"^[^\s,]+$")
    # Slack interactive approvals (docs/approvals.md); off unless configured.
    slack: SlackSettings | None = None


class LimitsSettings(_Section):
    """Bounds on what an upstream or an agent controls: memory never grows with what they send."""

    # A streamed reply is held from its first tool call until the set is checked: above this,
    # the reply is refused (in-stream error), never buffered further.
    max_held_stream_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024)
    # A whole (non-streamed) reply, or a repair round's, is read into memory: above this it is
    # refused with a provider-shaped 502.
    max_reply_bytes: int = Field(32 * 1024 * 1024, ge=64 * 1024)
    # Compiled tool schemas kept (by their size in bytes, LRU).
    schema_cache_bytes: int = Field(64 * 1024 * 1024, ge=1024 * 1024)
    # A declared schema larger than this is not compiled on the event loop: calls to that tool
    # are refused as unusable declarations (a real tool schema is a few KiB).
    max_schema_bytes: int = Field(512 * 1024, ge=1024)


class ResultSettings(_Section):
    """Tool-result inspection (docs/policies.md "Results"): how much of each result is read and
    how secrets are recognised. What is done with a finding is the policy's (`result_decision`);
    which tools are untrusted, size limits and injection markers are in the policy data.
    Unset key lists mean the shipped ones (sidecar/inspection/secrets.py)."""

    max_inspect_bytes: int = Field(1024 * 1024, ge=1024)
    max_spans: int = Field(256, ge=1)
    # Decisions remembered per (session, call id, content), so a result the agent re-sends with
    # its history is rewritten again without another inspection or policy evaluation.
    remember: int = Field(10_000, ge=0)
    # ... for this long at most: an OPA server's policy changes without the sidecar knowing.
    remember_s: float = Field(600.0, gt=0)
    secret_keys: list[str] | None = None
    secret_keys_exact: list[str] | None = None
    secret_key_exclusions: list[str] | None = None
    entropy: bool = True
    entropy_min_length: int = Field(20, ge=12, le=128)
    entropy_max_length: int = Field(256, ge=16, le=4096)
    entropy_max_candidates: int = Field(1000, ge=0)


class InventorySettings(_Section):
    """The tool inventory (`GET /v1/tools`): the latest declaration of each tool per agent and
    provider, least recently declared first out when either bound is reached."""

    max_entries: int = Field(1000, ge=1)
    # Canonical JSON bytes of the kept declarations (name, description, schema).
    max_bytes: int = Field(8 * 1024 * 1024, ge=1024)


Unparsed = Literal["forward", "refuse"]


class UnparsedSettings(_Section):
    """Paths that can carry a model tool call but that no dialect parses (docs/coverage.md):
    `refuse` (the default) answers a provider-shaped 403 naming what to use instead; `forward`
    sends them upstream untouched, unchecked. One key per path class."""

    assistants: Unparsed = "refuse"  # OpenAI Assistants: /v1/assistants, /v1/threads (runs carry tool calls)
    batches: Unparsed = "refuse"  # /v1/batches, /v1/messages/batches (their results carry tool calls)
    realtime: Unparsed = "refuse"  # OpenAI /v1/realtime, /v1/live (sessions carry function calls)
    hosted_agents: Unparsed = "refuse"  # OpenAI /v1/agents, /v1/chatkit; Anthropic /v1/agents, /v1/sessions, ...
    stored_completions: Unparsed = "refuse"  # GET/POST /v1/chat/completions/{id} and the stored list
    unknown: Unparsed = "refuse"  # any path the coverage table does not know


class CoverageSettings(_Section):
    """What the sidecar does with each path (docs/coverage.md)."""

    unparsed: UnparsedSettings = Field(default_factory=UnparsedSettings)
    # GET /v1/responses/{id} (also ?stream=true&starting_after=N) and POST /v1/responses/{id}/cancel:
    # `enforce` checks the stored response like a created one (refused calls removed, never a
    # repair round: that would change the provider's stored state); `refuse` answers 403.
    retrieve: Literal["enforce", "refuse"] = "enforce"
    # `background: true` creates: `enforce` checks what the stream carries (refused calls removed,
    # no repair round); `refuse` answers 403 (use a foreground request).
    background: Literal["enforce", "refuse"] = "enforce"


class TelemetrySettings(_Section):
    tool_label_cap: int = Field(200, ge=1)
    otlp_endpoint: str | None = None
    otlp_metrics: bool = False
    capture_content: bool = False
    log_level: Literal["debug", "info", "warning", "error"] = "info"


def _mcp_endpoint(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"expected the http(s) URL of an MCP endpoint such as http://127.0.0.1:8000/mcp, got {value!r}"
        )
    if parts.fragment:
        raise ValueError("an MCP server URL takes no fragment")
    return value


class McpSettings(_Section):
    """MCP servers reached through the sidecar over Streamable HTTP (docs/mcp.md): a client
    points at `http://<listen>/mcp/<name>` and the sidecar forwards to `servers[<name>]`."""

    servers: dict[str, str] = Field(default_factory=dict)
    # How long after the model path delivered a call its MCP execution is recognised as the
    # same logical call (one decision, one ledger entry, one count).
    correlation_window_s: float = Field(300.0, gt=0)
    # Tool lists remembered (per server and caller credentials), to judge tools/call against.
    max_catalogs: int = Field(256, ge=1)

    @field_validator("servers")
    @classmethod
    def _check_servers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, url in value.items():
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"an MCP server name is one path segment, got {name!r}")
            _mcp_endpoint(url)
        return value


class Settings(BaseSettings):
    """Every setting. `Settings(...)` / `model_validate` take explicit values only (no
    environment is read behind a caller's back); `load_settings` is what reads file and env."""

    model_config = SettingsConfigDict(
        extra="forbid",
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        case_sensitive=False,
        # "null" in the environment is the string "null", never "unset".
        env_parse_none_str=None,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)

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
    # Graceful drain on SIGTERM (docs/operations.md): /readyz turns 503 at once, new connections
    # are still accepted for `drain_delay_s` (while endpoints update), then refused; in-flight
    # exchanges and streams get `shutdown_grace_s` in all (keep it under Kubernetes'
    # terminationGracePeriodSeconds, 30 s by default); held approvals are answered as deferred.
    shutdown_grace_s: float = Field(25.0, gt=0)
    drain_delay_s: float = Field(2.0, ge=0)
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
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    inventory: InventorySettings = Field(default_factory=InventorySettings)
    results: ResultSettings = Field(default_factory=ResultSettings)
    coverage: CoverageSettings = Field(default_factory=CoverageSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    tools: dict[str, ToolSettings] = Field(default_factory=dict)
    # Who the agent is, for the policy input (`input.agent`). Unset: the pod's POD_NAME /
    # POD_NAMESPACE (Downward API), else empty.
    agent_id: str | None = None
    agent_namespace: str | None = None
    # NoDecode: the validator below reads both `team=support,tier=prod` and JSON.
    agent_labels: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)

    _check_listen = field_validator("listen", "admin_listen")(classmethod(lambda cls, v: _host_port(v)))
    _check_upstreams = field_validator("anthropic_upstream", "openai_upstream")(classmethod(lambda cls, v: _origin(v)))

    @field_validator("agent_labels", mode="before")
    @classmethod
    def _labels_from_text(cls, value: Any) -> Any:
        """SIDECAR_AGENT_LABELS arrives as text: accept `team=support,tier=prod` or a JSON object."""
        if isinstance(value, str) and value.lstrip().startswith("{"):
            return orjson.loads(value)
        if isinstance(value, str):
            pairs = [part.partition("=") for part in value.split(",") if part.strip()]
            if any(not sep for _, sep, _ in pairs):
                raise ValueError(f"expected key=value[,key=value...], got {value!r}")
            return {k.strip(): v.strip() for k, _, v in pairs}
        return value

    @model_validator(mode="after")
    def _traits_have_one_source(self) -> Settings:
        """Tool traits live in the policy data (sidecar/policy/traits.py): the embedded engine
        takes the configuration's into that data; an OPA server reads only its own files."""
        if self.policy.engine == "opa":
            named = sorted(n for n, t in self.tools.items() if t.side_effects is not None or t.repeatable is not None)
            if named:
                raise ValueError(
                    f"tools.{named[0]}: side_effects/repeatable cannot be set here with policy.engine=opa "
                    "(OPA reads tool traits from its own data.json: set data.sidecar.tools.<name> there)"
                )
        return self

    def tool(self, name: str) -> ToolSettings:
        return self.tools.get(name) or _NO_OVERRIDES

    def mode_for(self, tool: str) -> str:
        return self.tool(tool).mode or self.enforcement.mode

    def lockdown_for(self, tool: str) -> LockdownSettings:
        return self.tool(tool).lockdown or self.lockdown
