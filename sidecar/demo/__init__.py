"""`sidecar demo`: an offline tour. A scripted model, a real sidecar, and a support agent
using the official Anthropic SDK, one scene per capability."""

from sidecar.demo.runner import run_demo

__all__ = ["run_demo"]
