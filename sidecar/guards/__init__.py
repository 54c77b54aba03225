"""Guards: small classes, one concern each, run in order on every tool call.

declared + arguments (lockdown) -> replay -> policy -> approval. The first refusal wins.
"""

from sidecar.guards.base import Guard, GuardChain

__all__ = ["Guard", "GuardChain"]
