"""Where `schemas lint|snapshot|diff` read declarations: a JSON file, or what a running sidecar
has seen (`--from ADMIN_URL`, its `GET /v1/tools` inventory), so a platform team can check
what is really deployed rather than what a repository says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sidecar.model import ToolDeclaration
from sidecar.schemas.load import LoadedFile, LoadedTool, LoadError, load_file
from sidecar.telemetry.status_cli import fetch_admin_json

TOOLS_PATH = "/v1/tools"


def is_admin_url(spec: str) -> bool:
    return spec.startswith(("http://", "https://"))


def read_sources(
    files: Iterable[str], spec: str | None, agent: str | None = None, provider: str | None = None
) -> list[LoadedFile]:
    """The FILE arguments, then `--from` (a file or an admin URL); LoadError when none is given."""
    loaded = [load_file(path) for path in files]
    if spec is not None:
        loaded += load_source(spec, agent, provider)
    if not loaded:
        raise LoadError("name the declarations to read: FILE… or --from FILE|ADMIN_URL")
    return loaded


def load_source(spec: str, agent: str | None = None, provider: str | None = None) -> list[LoadedFile]:
    """A file gives one LoadedFile; an admin URL one per (agent, provider) of its inventory,
    narrowed to `agent` / `provider` when given. LoadError when nothing usable is there."""
    if not is_admin_url(spec):
        return [load_file(spec)]
    base = spec.rstrip("/").removesuffix(TOOLS_PATH)
    try:
        document = fetch_admin_json(base, TOOLS_PATH)
    except RuntimeError as exc:
        raise LoadError(str(exc)) from None
    files = inventory_files(document, base + TOOLS_PATH)
    chosen = [f for f in files if (agent is None or f.agent == agent) and (provider is None or f.provider == provider)]
    if not chosen:
        seen = ", ".join(f"agent {f.agent or '(none)'} / {f.provider}" for f in files) or "nothing yet"
        wanted = " and ".join(w for w in (agent and f"agent {agent}", provider and f"provider {provider}") if w)
        raise LoadError(
            f"{base}{TOOLS_PATH}: no tool declarations"
            + (f" for {wanted}" if wanted else "")
            + f" (the inventory holds: {seen}; it fills as the agent sends requests)"
        )
    return chosen


def inventory_files(document: Any, url: str) -> list[LoadedFile]:
    """The `/v1/tools` document as one LoadedFile per (agent, provider), tools by name."""
    items = document.get("tools") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise LoadError(f"{url}: not a tool inventory (no `tools` list)")
    groups: dict[tuple[str, str], LoadedFile] = {}
    for i, item in enumerate(items):
        if not (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("schema"), dict)
            and isinstance(item.get("agent", ""), str)
            and isinstance(item.get("provider", ""), str)
        ):
            raise LoadError(f"{url}: entry {i} is not a tool declaration")
        agent, provider = item.get("agent", ""), item.get("provider", "")
        group = groups.get((agent, provider))
        if group is None:
            label = f"{url} (agent {agent or '(none)'}, {provider})"
            group = groups[(agent, provider)] = LoadedFile(label, "inventory", agent=agent, provider=provider)
        description = item.get("description")
        declaration = ToolDeclaration.create(
            item["name"], item["schema"], description if isinstance(description, str) else ""
        )
        group.tools.append(LoadedTool(declaration, provider, f"/tools/{i}/schema"))
    return [groups[key] for key in sorted(groups)]


def declarations_by_name(files: Iterable[LoadedFile]) -> dict[str, ToolDeclaration]:
    """One declaration per tool name, for snapshots. Several agents or providers declaring one
    name differently cannot be told apart in a snapshot directory: LoadError, naming them."""
    chosen: dict[str, tuple[ToolDeclaration, str]] = {}
    for file in files:
        for tool in file.tools:
            decl = tool.declaration
            kept = chosen.get(decl.name)
            if kept is not None and (kept[0].schema_hash, kept[0].description) != (decl.schema_hash, decl.description):
                raise LoadError(
                    f"tool {decl.name!r} is declared differently in {kept[1]} and in {file.path}: "
                    "choose one with --agent / --provider (or --from one file)"
                )
            chosen[decl.name] = (decl, file.path)
    return {name: decl for name, (decl, _) in sorted(chosen.items())}
