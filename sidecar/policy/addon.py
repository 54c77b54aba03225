"""What every policy addon needs: the engine, metrics, session counts, agent identity, time."""

from __future__ import annotations

from sidecar.addons import Addon
from sidecar.config import Settings
from sidecar.policy.engine import PolicyEngine
from sidecar.policy.inputs import Clock, SessionCounter, agent_identity
from sidecar.telemetry.metrics import Metrics


class PolicyAddon(Addon):
    def __init__(
        self, settings: Settings, engine: PolicyEngine, metrics: Metrics, state: SessionCounter | None = None
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.state = state
        self.mode = settings.policy.mode
        self.agent = agent_identity(settings)
        self.clock = Clock()
