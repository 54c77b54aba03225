"""A static pass over the parsed policy: what must hold in every branch, reached or not.

regorus reports unknown functions and type errors only when it evaluates them, and a policy
is only ever evaluated along the branches its inputs reach; a misspelled builtin in a rarely
taken branch would pass a smoke test and refuse every call that reaches it (on_error). So
`sidecar policy check` and every (re)load walk the AST regorus parsed (`get_ast_as_json`) and
report, with file and line:

- calls to functions that are neither a builtin nor a function of the policy, builtins the
  embedded engine does not implement, and calls with the wrong number of arguments;
- arguments and operands whose type is known from the source (literals, the results of
  builtins) and that the builtin or operator cannot take (`count(5)`, `1 + "a"`);
- conflicting definitions: a name defined as a function and as a rule, as a set and as a
  complete rule, functions of different arity, two `default`s, a rule that shadows a key of
  data.json at the same path.

Warnings (reported, do not fail unless `--strict`): complete rules with several definitions
whose values differ (they conflict at runtime when two match; use an else chain), and `not`
applied to a call on a reference that may be undefined (OPA evaluates `not f(input.x)` as
undefined when `input.x` is, regorus as true: the two engines would decide differently).

Unsafe variables are found by regorus itself when the policy is first evaluated (it
schedules every rule of every module then, reached or not); `compile_bundle` does that.

Builtin names, arity and argument types come from OPA's capabilities (builtins.json, with
whether regorus implements each), so the same table serves both engines.
"""

from __future__ import annotations

import enum
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sidecar.inspection.markers import MarkerError, MarkerSet
from sidecar.policy.loader import package_of, rule_name

_BUILTINS_FILE = Path(__file__).resolve().parent / "builtins.json"
_LITERAL_KINDS = {
    "String": "string",
    "RawString": "string",
    "Number": "number",
    "Bool": "boolean",
    "Null": "null",
    "Array": "array",
    "ArrayCompr": "array",
    "Object": "object",
    "ObjectCompr": "object",
    "Set": "set",
    "SetCompr": "set",
    "ArithExpr": "number",
}
# Operators regorus/OPA accept on sets as well as numbers (difference, union, intersection).
_SET_OPS = {"Sub", "Minus", "Or", "And"}


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    file: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.severity.value}: {self.message}"


@dataclass(frozen=True)
class Builtin:
    args: tuple[frozenset[str], ...]
    result: frozenset[str] | None
    variadic: bool
    regorus: bool


@cache
def builtins() -> dict[str, Builtin]:
    """The builtin table (see the module docstring)."""
    raw = json.loads(_BUILTINS_FILE.read_text(encoding="utf-8"))["builtins"]
    return {
        name: Builtin(
            tuple(frozenset(a) for a in entry["args"]),
            frozenset(entry["result"]) if entry["result"] else None,
            bool(entry["variadic"]),
            bool(entry["regorus"]),
        )
        for name, entry in raw.items()
    }


def _span(node: Any) -> tuple[int, int]:
    """(line, col) of a node, or of the node a {"Kind": node} wrapper holds."""
    if isinstance(node, dict) and "span" not in node and len(node) == 1:
        node = next(iter(node.values()))
    span = node.get("span") if isinstance(node, dict) else None
    if isinstance(span, dict):
        return int(span.get("line", 0)), int(span.get("col", 0))
    return 0, 0


def inner(node: Any) -> tuple[str, dict[str, Any]]:
    """('Call', body) for {"Call": body}; ('', {}) for anything else (also used by `reads`)."""
    if isinstance(node, dict) and len(node) == 1:
        ((kind, body),) = node.items()
        if isinstance(body, dict):
            return kind, body
    return "", {}


def dotted(node: Any) -> str | None:
    """`a.b.c` for a Var/RefDot chain, None for anything else (brackets, calls)."""
    kind, body = inner(node)
    if kind == "Var":
        return str(body.get("value"))
    if kind == "RefDot":
        base = dotted(body.get("refr"))
        field_ = body.get("field")
        name = field_[1] if isinstance(field_, list) and len(field_) > 1 else None
        return f"{base}.{name}" if base is not None and name is not None else None
    return None


def _walk(node: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (kind, body) node under `node`."""
    if isinstance(node, dict):
        kind, body = inner(node)
        if kind:
            yield kind, body
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


@dataclass
class _Definition:
    kind: str  # complete, set, function, default
    arity: int
    value: str
    line: int
    col: int
    file: str


@dataclass
class _Package:
    name: str
    definitions: dict[str, list[_Definition]] = field(default_factory=lambda: defaultdict(list))


class PolicyLinter:
    """One pass over the modules of a bundle; `findings` after `run()`."""

    def __init__(self, modules: list[dict[str, Any]], data: dict[str, Any]) -> None:
        self.modules = modules
        self.data = data
        self.findings: list[Finding] = []
        self.packages: dict[str, _Package] = {}

    def run(self) -> list[Finding]:
        for module in self.modules:
            self._collect(module)
        for package in self.packages.values():
            self._conflicts(package)
        for module in self.modules:
            self._calls(module)
        return sorted(self.findings, key=lambda f: (f.file, f.line, f.col, f.message))

    def _add(self, severity: Severity, file: str, node: Any, message: str) -> None:
        line, col = _span(node)
        self.findings.append(Finding(severity, file, line, col, message))

    # --- definitions and conflicts ------------------------------------------------------

    def _collect(self, module: dict[str, Any]) -> None:
        file = str(module.get("source", {}).get("file", ""))
        package = self.packages.setdefault(package_of(module), _Package(package_of(module)))
        for item in module.get("ast", {}).get("rules", []):
            name = rule_name(item)
            if not name:
                continue
            if "Default" in item:
                spec = item["Default"]
                line, col = _span(spec)
                value = json.dumps(_strip(spec.get("value")), sort_keys=True)
                package.definitions[name].append(_Definition("default", 0, value, line, col, file))
                continue
            spec = item.get("Spec") or {}
            head_kind, head = inner(spec.get("head"))
            line, col = _span(spec)
            if head_kind == "Func":
                args = head.get("args") or []
                package.definitions[name].append(_Definition("function", len(args), "", line, col, file))
            elif head_kind == "Set":
                package.definitions[name].append(_Definition("set", 0, "", line, col, file))
            else:
                partial = "RefBrack" in (head.get("refr") or {})
                assign = head.get("assign") or {}
                value = json.dumps(_strip(assign.get("value")), sort_keys=True) if assign else "true"
                kind = "object" if partial else "complete"
                package.definitions[name].append(_Definition(kind, 0, value, line, col, file))

    def _conflicts(self, package: _Package) -> None:
        prefix = package.name.removeprefix("data.").split(".")
        shadowed = _lookup(self.data, prefix)
        for name, defs in package.definitions.items():
            first = defs[0]
            kinds = {d.kind for d in defs} - {"default"}
            if len(kinds) > 1:
                what = " and ".join(sorted(kinds))
                self.findings.append(
                    Finding(Severity.ERROR, first.file, first.line, first.col, f"{name} is defined as {what}")
                )
            defaults = [d for d in defs if d.kind == "default"]
            for extra in defaults[1:]:
                self.findings.append(
                    Finding(Severity.ERROR, extra.file, extra.line, extra.col, f"{name} has more than one default")
                )
            arities = {d.arity for d in defs if d.kind == "function"}
            if len(arities) > 1:
                self.findings.append(
                    Finding(
                        Severity.ERROR,
                        first.file,
                        first.line,
                        first.col,
                        f"function {name} is defined with {' and '.join(map(str, sorted(arities)))} arguments",
                    )
                )
            complete = [d for d in defs if d.kind == "complete"]
            if len({d.value for d in complete}) > 1:
                self.findings.append(
                    Finding(
                        Severity.WARNING,
                        complete[1].file,
                        complete[1].line,
                        complete[1].col,
                        f"{name} has {len(complete)} definitions with different values: when two match, "
                        "evaluation fails with a conflict; chain them with else",
                    )
                )
            if isinstance(shadowed, dict) and name in shadowed:
                self.findings.append(
                    Finding(
                        Severity.ERROR,
                        first.file,
                        first.line,
                        first.col,
                        f"rule {package.name}.{name} has the same path as a key of the policy data (data.json)",
                    )
                )

    # --- calls, arity, types -----------------------------------------------------------

    def _functions(self, module: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
        """(functions callable by short name -> arity, import alias -> package path)."""
        own = self.packages.get(package_of(module))
        local = {n: d[0].arity for n, d in (own.definitions.items() if own else []) if d[0].kind == "function"}
        aliases: dict[str, str] = {}
        text = str(module.get("source", {}).get("contents", ""))
        for item in module.get("ast", {}).get("imports", []):
            path = dotted(item.get("refr"))
            if not path or not path.startswith("data."):
                continue
            alias = item.get("as")
            if isinstance(alias, dict) and "start" in alias:
                aliases[text[alias["start"] : alias["end"]]] = path
            else:
                aliases[path.rsplit(".", 1)[-1]] = path
        return dict(local), aliases

    def _user_function(self, name: str, local: dict[str, int], aliases: dict[str, str]) -> int | None:
        """Arity of a policy function called as `name`, or None if it is none."""
        if name in local:
            return local[name]
        head, _, rest = name.partition(".")
        full = f"{aliases[head]}.{rest}" if head in aliases and rest else name
        package, _, short = full.rpartition(".")
        defs = self.packages.get(package)
        if defs is not None and short in defs.definitions and defs.definitions[short][0].kind == "function":
            return defs.definitions[short][0].arity
        return None

    def _calls(self, module: dict[str, Any]) -> None:
        file = str(module.get("source", {}).get("file", ""))
        local, aliases = self._functions(module)
        table = builtins()
        for kind, body in _walk(module.get("ast", {}).get("rules", [])):
            if kind == "Call":
                self._call(file, body, local, aliases, table)
            elif kind == "ArithExpr":
                self._arith(file, body, table)
            elif kind == "NotExpr":
                self._negation(file, body)

    def _call(
        self,
        file: str,
        body: dict[str, Any],
        local: dict[str, int],
        aliases: dict[str, str],
        table: dict[str, Builtin],
    ) -> None:
        name = dotted(body.get("fcn"))
        if name is None:
            return
        params = body.get("params") or []
        user = self._user_function(name, local, aliases)
        if user is not None:
            if len(params) not in (user, user + 1):
                self._add(Severity.ERROR, file, body, f"{name} takes {user} argument(s), called with {len(params)}")
            return
        builtin = table.get(name)
        if builtin is None:
            self._add(Severity.ERROR, file, body, f"unknown function {name}")
            return
        if not builtin.regorus:
            self._add(
                Severity.ERROR,
                file,
                body,
                f"{name} is an OPA builtin the embedded engine (regorus) does not implement",
            )
        if not builtin.variadic and len(params) not in (len(builtin.args), len(builtin.args) + 1):
            self._add(
                Severity.ERROR,
                file,
                body,
                f"{name} takes {len(builtin.args)} argument(s), called with {len(params)}",
            )
            return
        for index, (param, accepted) in enumerate(zip(params, builtin.args, strict=False)):
            known = _static_kind(param, table)
            if known is not None and known not in accepted:
                self._add(
                    Severity.ERROR,
                    file,
                    param,
                    f"argument {index + 1} of {name} must be {' or '.join(sorted(accepted))}, got {known}",
                )

    def _arith(self, file: str, body: dict[str, Any], table: dict[str, Builtin]) -> None:
        accepted = {"number", "set"} if body.get("op") in _SET_OPS else {"number"}
        for side in ("lhs", "rhs"):
            known = _static_kind(body.get(side), table)
            if known is not None and known not in accepted:
                op = str(body.get("op", "")).lower()
                self._add(Severity.ERROR, file, body, f"operator {op} cannot take a {known}")

    def _negation(self, file: str, body: dict[str, Any]) -> None:
        for kind, inner in _walk(body):
            if kind != "Call":
                continue
            for param in inner.get("params") or []:
                ref = dotted(param)
                if ref is not None and "." in ref:
                    self._add(
                        Severity.WARNING,
                        file,
                        param,
                        f"`not` over a call on {ref}: if {ref} is undefined, OPA evaluates this as undefined "
                        "and regorus as true; bind it to a value first (e.g. a helper with an else default)",
                    )
                    return


def _static_kind(node: Any, table: dict[str, Builtin]) -> str | None:
    """The JSON kind of an expression when the source fixes it, else None."""
    kind, body = inner(node)
    if kind in _LITERAL_KINDS:
        return _LITERAL_KINDS[kind]
    if kind == "Call":
        name = dotted(body.get("fcn"))
        builtin = table.get(name or "")
        if builtin is not None and builtin.result is not None and len(builtin.result) == 1:
            (only,) = builtin.result
            return only
    if kind == "UnaryExpr":
        return "number"
    return None


def _strip(node: Any) -> Any:
    """An AST node without positions, to compare two expressions."""
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k not in ("span", "eidx", "sidx", "qidx")}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _lookup(data: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def lint(ast: list[dict[str, Any]], data: dict[str, Any]) -> list[Finding]:
    """Findings for the parsed modules `ast` (regorus' get_ast_as_json) and their data."""
    return PolicyLinter(ast, data).run()


# --- the policy data (data.sidecar) ------------------------------------------------------

_BOOL, _INT, _NUM, _STR, _LIST, _OBJ = "boolean", "integer", "number", "string", "array", "object"
_TOOL_KEYS: dict[str, str] = {
    "side_effects": _BOOL,
    "repeatable": _BOOL,
    "hidden": _BOOL,
    "allow": _BOOL,
    "max_calls_per_session": _INT,
    "max_result_bytes": _INT,
    "untrusted": _BOOL,
    "schema_hash": _STR,
    "schema_pin": _STR,
    "blocked_recipients": _OBJ,
    "approval": _OBJ,
}
_SECTION_KEYS: dict[str, dict[str, str]] = {
    "blocked_recipients": {"recipient_arg": _STR, "domains": _LIST, "on_invalid": _STR},
    "approval": {
        "always": _BOOL,
        "amount_arg": _STR,
        "max_amount": _NUM,
        "min_amount": _NUM,
        "recipient_arg": _STR,
        "allowed_domains": _LIST,
        "on_invalid": _STR,
        "group": _STR,
        "ttl_s": _INT,
    },
}
_CHOICES = {"on_invalid": ("deny", "approval"), "schema_pin": ("deny", "approval")}
_DOMAIN_LISTS = ("domains", "allowed_domains")


def _kind_ok(value: Any, kind: str) -> bool:
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {_STR: str, _LIST: list, _OBJ: dict}[kind])


def _domain_problem(entry: Any) -> str | None:
    if not isinstance(entry, str):
        return f"{entry!r} is not a string"
    if entry.isascii():
        return None
    name = entry.removeprefix("*.")
    try:
        ascii_form = name.encode("idna").decode("ascii")
    except UnicodeError:
        return f"{entry!r} is not ASCII and not a valid international domain name"
    prefix = "*." if entry.startswith("*.") else ""
    return f"{entry!r} is not ASCII, so it never matches (domains are compared in punycode); write {prefix}{ascii_form}"


def lint_data(data: dict[str, Any], where: str = "data.json") -> list[Finding]:
    """Type errors and unmatchable entries in `data.sidecar.tools` (warnings for unknown keys,
    which are often typos: a misspelled `max_amout` silently turns a threshold off)."""
    out: list[Finding] = []

    def add(severity: Severity, path: str, message: str) -> None:
        out.append(Finding(severity, where, 0, 0, f"{path}: {message}"))

    sidecar = data.get("sidecar") if isinstance(data, dict) else None
    if isinstance(sidecar, dict) and "results" in sidecar:
        _check_results(sidecar["results"], add)
    tools = sidecar.get("tools") if isinstance(sidecar, dict) else None
    if tools is None:
        return out
    if not isinstance(tools, dict):
        add(Severity.ERROR, "sidecar.tools", "must be an object")
        return out
    entries = [(f"sidecar.tools.{name}", entry) for name, entry in tools.items()]
    unlisted = sidecar.get("unlisted_tool") if isinstance(sidecar, dict) else None
    if unlisted is not None:
        entries.append(("sidecar.unlisted_tool", unlisted))
    for path, entry in entries:
        if not isinstance(entry, dict):
            add(Severity.ERROR, path, "must be an object")
            continue
        _check_keys(entry, _TOOL_KEYS, path, add)
        for section, keys in _SECTION_KEYS.items():
            value = entry.get(section)
            if isinstance(value, dict):
                _check_keys(value, keys, f"{path}.{section}", add)
                for list_key in _DOMAIN_LISTS:
                    for item in value.get(list_key) or [] if isinstance(value.get(list_key), list) else []:
                        problem = _domain_problem(item)
                        if problem is not None:
                            add(Severity.ERROR, f"{path}.{section}.{list_key}", problem)
    return out


_RESULT_KEYS: dict[str, str] = {
    "block_anomalies": _LIST,
    "redact_anomalies": _LIST,
    "max_result_bytes": _INT,
    "injection_markers": _LIST,
    "extra_injection_markers": _LIST,
}


def _check_results(results: Any, add: Any) -> None:
    """`data.sidecar.results`: key types, and markers the inspector can compile (RE2)."""
    if not isinstance(results, dict):
        add(Severity.ERROR, "sidecar.results", "must be an object")
        return
    _check_keys(results, _RESULT_KEYS, "sidecar.results", add)
    try:
        MarkerSet.from_data(results)
    except MarkerError as exc:
        add(Severity.ERROR, "sidecar.results", str(exc))


def _check_keys(entry: dict[str, Any], keys: dict[str, str], path: str, add: Any) -> None:
    for key, value in entry.items():
        kind = keys.get(key)
        if kind is None:
            add(Severity.WARNING, f"{path}.{key}", "unknown key (the shipped rules do not read it)")
        elif not _kind_ok(value, kind):
            add(Severity.ERROR, f"{path}.{key}", f"must be a {kind}, got {json.dumps(value)}")
        elif key in _CHOICES and value not in _CHOICES[key]:
            add(Severity.ERROR, f"{path}.{key}", f"must be one of {', '.join(_CHOICES[key])}, got {value!r}")
