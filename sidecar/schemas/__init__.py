"""`sidecar schemas`: tool declarations as the model sees them and as the lockdown judges them.

`lint` finds the classic mistakes that make a model call a tool badly (positional names,
free-form objects, money as floats, dates without format…) and predicts what the lockdown
will refuse; `show` prints the schema the lockdown really enforces; `check` validates one
argument object exactly like the proxy does; `snapshot` and `diff` keep golden files of
what the model is shown, for review. `--from ADMIN_URL` reads what a running sidecar has
seen (its `/v1/tools` inventory) instead of a file.
"""

from sidecar.schemas.findings import Finding, Rule, Severity, ToolReport
from sidecar.schemas.lint import LintOptions, lint_file, lint_tool
from sidecar.schemas.load import LoadedFile, LoadedTool, LoadError, load_file

__all__ = [
    "Finding",
    "LintOptions",
    "LoadError",
    "LoadedFile",
    "LoadedTool",
    "Rule",
    "Severity",
    "ToolReport",
    "lint_file",
    "lint_tool",
    "load_file",
]
