"""`sidecar schemas`: see how the argument lockdown will judge a team's tool declarations.

Tool schemas are usually written for lenient deserializers; before lockdown is switched on
(`enforcement.mode: observe` first), `lint` predicts rejections and weak repair hints, `show`
prints the schema the lockdown really enforces, and `check` validates one argument object
exactly like the proxy does.
"""

from sidecar.schemas.lint import Finding, ToolReport, lint_file, lint_tool
from sidecar.schemas.load import LoadedFile, LoadedTool, LoadError, load_file

__all__ = [
    "Finding",
    "LoadError",
    "LoadedFile",
    "LoadedTool",
    "ToolReport",
    "lint_file",
    "lint_tool",
    "load_file",
]
