"""All settings in one pydantic model (`settings`), loaded from defaults, a YAML file, the
`SIDECAR_*` environment and flags, each value remembering where it came from (`loader`)."""

from sidecar.config.loader import load_settings
from sidecar.config.settings import (
    ENV_PREFIX,
    ApprovalSettings,
    ConfigError,
    DecisionLogSettings,
    EnforcementSettings,
    InventorySettings,
    LimitsSettings,
    LockdownSettings,
    McpSettings,
    PolicySettings,
    RejectionLogSettings,
    Settings,
    SlackSettings,
    StateSettings,
    TelemetrySettings,
    ToolSettings,
)

__all__ = [
    "ENV_PREFIX",
    "ApprovalSettings",
    "ConfigError",
    "DecisionLogSettings",
    "EnforcementSettings",
    "InventorySettings",
    "LimitsSettings",
    "LockdownSettings",
    "McpSettings",
    "PolicySettings",
    "RejectionLogSettings",
    "Settings",
    "SlackSettings",
    "StateSettings",
    "TelemetrySettings",
    "ToolSettings",
    "load_settings",
]
