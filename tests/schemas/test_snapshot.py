"""`sidecar schemas snapshot` and `diff`: deterministic golden files, and the review of changes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from sidecar.model import ToolDeclaration, declaration_hash
from sidecar.schemas.snapshot import SnapshotError, file_name, read_snapshots, render, write_snapshots
from tests.schemas.conftest import Run, as_json

TOOLS: list[dict[str, Any]] = [
    {
        "name": "tickets_search",
        "description": "Find support tickets",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for"},
                "status": {"type": "string", "enum": ["open", "closed"], "description": "Ticket state"},
                "limit": {"type": "integer", "minimum": 1.0, "maximum": 100},
            },
            "required": ["query"],
        },
    },
    {
        "name": "payments_refund",
        "description": "Refund an order",
        "input_schema": {
            "type": "object",
            "properties": {"amount_cents": {"type": "integer", "description": "Euro cents"}},
            "required": ["amount_cents"],
        },
    },
]


def write(path: Path, tools: list[dict[str, Any]]) -> str:
    path.write_bytes(orjson.dumps(tools))
    return str(path)


def edited(change: Any) -> list[dict[str, Any]]:
    tools = copy.deepcopy(TOOLS)
    change(tools[0]["input_schema"]["properties"])
    return tools


def test_snapshot_writes_one_deterministic_file_per_tool(run: Run, tmp_path: Path) -> None:
    source = write(tmp_path / "tools.json", TOOLS)
    out = tmp_path / "golden"
    code, text, _ = run("snapshot", "--out", str(out), "--from", source)
    assert code == 0, text
    assert sorted(p.name for p in out.iterdir()) == ["payments_refund.json", "tickets_search.json"]
    data = (out / "tickets_search.json").read_bytes()
    document = orjson.loads(data)
    declaration = ToolDeclaration.create("tickets_search", TOOLS[0]["input_schema"], "Find support tickets")
    assert document["schema_hash"] == declaration.schema_hash
    assert document["declaration_hash"] == declaration_hash(declaration)
    assert document["schema"]["properties"]["limit"]["minimum"] == 1  # canonical number
    assert list(document) == sorted(document) and data.endswith(b"}\n") and b'\n  "description"' in data
    # Same declaration, keys in another order: the same bytes.
    shuffled = copy.deepcopy(TOOLS)
    shuffled[0]["input_schema"] = dict(reversed(list(shuffled[0]["input_schema"].items())))
    again = tmp_path / "again"
    assert run("snapshot", "--out", str(again), "--from", write(tmp_path / "b.json", shuffled))[0] == 0
    assert (again / "tickets_search.json").read_bytes() == data
    # Re-running leaves identical files alone.
    code, text, _ = run("snapshot", "--out", str(out), "--from", source)
    assert code == 0 and "0 written, 2 unchanged, 0 removed" in text


def test_round_trip_has_no_changes(run: Run, tmp_path: Path) -> None:
    source = write(tmp_path / "tools.json", TOOLS)
    run("snapshot", "--out", str(tmp_path / "golden"), "--from", source)
    code, text, _ = run("diff", str(tmp_path / "golden"), "--from", source)
    assert (code, text) == (0, f"no changes: 2 tool(s) match {tmp_path / 'golden'}\n")
    assert (
        read_snapshots(tmp_path / "golden")["tickets_search"].schema_hash
        == ToolDeclaration.create("tickets_search", TOOLS[0]["input_schema"]).schema_hash
    )


def _rename(props: dict[str, Any]) -> None:
    props["text"] = props.pop("query")


def _add_member(props: dict[str, Any]) -> None:
    props["status"]["enum"].append("pending")


def _retype(props: dict[str, Any]) -> None:
    props["limit"]["type"] = "number"


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (_rename, "~ tickets_search: query renamed to text (same schema)"),
        (_add_member, '~ tickets_search status: enum + "pending"'),
        (_retype, "~ tickets_search limit: type integer -> number"),
    ],
)
def test_diff_detects_the_change(run: Run, tmp_path: Path, change: Any, line: str) -> None:
    run("snapshot", "--out", str(tmp_path / "golden"), "--from", write(tmp_path / "tools.json", TOOLS))
    code, text, _ = run("diff", str(tmp_path / "golden"), "--from", write(tmp_path / "new.json", edited(change)))
    assert code == 1
    assert line in text.splitlines()
    assert text.rstrip().endswith("accept them with `sidecar schemas snapshot`")


def test_a_rename_keeps_required_as_it_was(run: Run, tmp_path: Path) -> None:
    """`query` was required and `text` is optional: the diff says both, not just "renamed"."""
    run("snapshot", "--out", str(tmp_path / "golden"), "--from", write(tmp_path / "tools.json", TOOLS))
    code, text, _ = run("diff", str(tmp_path / "golden"), "--from", write(tmp_path / "new.json", edited(_rename)))
    assert code == 1
    assert text.splitlines()[:2] == [
        "~ tickets_search: query renamed to text (same schema)",
        "~ tickets_search text: now optional",
    ]
    renamed = edited(_rename)
    renamed[0]["input_schema"]["required"] = ["text"]
    code, text, _ = run("diff", str(tmp_path / "golden"), "--from", write(tmp_path / "r.json", renamed), "--json")
    assert code == 1
    [change] = as_json(text)["changes"]
    assert change["kind"] == "field_renamed" and change["text"] == (
        "~ tickets_search: query renamed to text (same schema)"
    )


def test_added_and_removed_tools_and_stale_files(run: Run, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    run("snapshot", "--out", str(golden), "--from", write(tmp_path / "tools.json", TOOLS))
    other = {"name": "tickets_close", "description": "Close a ticket", "input_schema": {"type": "object"}}
    now = write(tmp_path / "now.json", [TOOLS[0], other])
    code, text, _ = run("diff", str(golden), "--from", now)
    assert code == 1 and text.splitlines()[:2] == ["- tool payments_refund", "+ tool tickets_close"]
    code, text, _ = run("snapshot", "--out", str(golden), "--from", now)
    assert code == 0 and "removed " in text and not (golden / "payments_refund.json").exists()
    assert run("diff", str(golden), "--from", now)[0] == 0


def test_unusable_snapshots_are_refused(run: Run, tmp_path: Path) -> None:
    source = write(tmp_path / "tools.json", TOOLS)
    golden = tmp_path / "golden"
    run("snapshot", "--out", str(golden), "--from", source)
    path = golden / "tickets_search.json"
    document = orjson.loads(path.read_bytes())
    document["description"] = "edited by hand"
    path.write_bytes(orjson.dumps(document))
    code, _, err = run("diff", str(golden), "--from", source)
    assert code == 2 and "do not match the content" in err
    path.write_bytes(render(ToolDeclaration.create("tickets_search", TOOLS[0]["input_schema"], "Find support tickets")))
    (golden / "notes.json").write_text('{"not": "a snapshot"}')
    code, _, err = run("snapshot", "--out", str(golden), "--from", source)
    assert code == 2 and "not a tool snapshot" in err and (golden / "notes.json").exists()
    code, _, err = run("diff", str(tmp_path / "missing"), "--from", source)
    assert code == 2 and "no such directory" in err


def test_file_names_are_safe_for_any_tool_name(tmp_path: Path) -> None:
    assert file_name("tickets_search") == "tickets_search.json"
    names = ["Search", "search", "a/b", "../etc/passwd", "con", "x" * 200, "mcp.server.tool", "résumé", "a b", ""]
    files = {name: file_name(name) for name in names}
    assert len({f.lower() for f in files.values()}) == len(names)  # distinct, even case-insensitively
    for name, file in files.items():
        assert "/" not in file and file.endswith(".json") and not file.startswith(".") and len(file) <= 80, name
    declarations = {n: ToolDeclaration.create(n, {"type": "object", "properties": {}}, "d") for n in names}
    write_snapshots(tmp_path / "golden", declarations)
    assert set(read_snapshots(tmp_path / "golden")) == set(names)
    assert sorted(p.name for p in (tmp_path / "golden").iterdir()) == sorted(files.values())


def test_two_snapshots_of_one_tool_are_refused(tmp_path: Path) -> None:
    declaration = ToolDeclaration.create("t", {"type": "object", "properties": {}}, "d")
    write_snapshots(tmp_path, {"t": declaration})
    (tmp_path / "copy.json").write_bytes(render(declaration))
    with pytest.raises(SnapshotError, match="a second snapshot of tool 't'"):
        read_snapshots(tmp_path)
