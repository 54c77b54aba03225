"""Rego policies: the embedded (regorus) and OPA-server engines behind one interface."""

from sidecar.policy.engine import (
    Decision,
    EmbeddedEngine,
    OpaEngine,
    PolicyEngine,
    apply_mode,
    build_engine,
)
from sidecar.policy.loader import PolicyLoadError

__all__ = [
    "Decision",
    "EmbeddedEngine",
    "OpaEngine",
    "PolicyEngine",
    "PolicyLoadError",
    "apply_mode",
    "build_engine",
]
