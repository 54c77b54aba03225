"""Policy-and-observability sidecar proxy for LLM agents."""

__version__ = "0.1.0"
