"""The tool-list answer is remembered by the input fields the policy reads (sidecar/policy/reads.py):
the walk finds those fields through helpers, packages and imports, gives up on what it cannot
bound, and a remembered answer is never given for an input the policy would answer otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.policy import EmbeddedEngine
from sidecar.policy.loader import compile_bundle, read_bundle
from sidecar.policy.reads import ReadsAnalysis, project, shape_of
from tests.policy.conftest import settings
from tests.policy.test_reload import wait_for

HEAD = (
    "package sidecar\nimport rego.v1\n"
    'decision := {"allow": true, "reasons": ["v1"], "require_approval": null, "retryable": false}\n'
)


def top_fields(analysis: ReadsAnalysis, rule: str) -> tuple[str, ...] | None:
    """The top-level input fields of the paths `rule` may read, sorted (None: unbounded)."""
    paths = analysis.input_paths(rule)
    return None if paths is None else tuple(sorted({path[0] for path in paths}))


def fields(tmp_path: Path, *modules: str, rule: str = "data.sidecar.visible_tools") -> tuple[str, ...] | None:
    for index, text in enumerate(modules):
        (tmp_path / f"m{index}.rego").write_text(text)
    compiled = compile_bundle(read_bundle(str(tmp_path)))
    return top_fields(ReadsAnalysis(compiled.engine.ast()), rule)


@pytest.mark.parametrize("policies", [None, "example:support"])
def test_shipped_library_reads(policies: str | None) -> None:
    """The shipped tool list reads the tool names only: its answer holds across sessions."""
    analysis = ReadsAnalysis(compile_bundle(read_bundle(policies)).engine.ast())
    assert top_fields(analysis, "data.sidecar.visible_tools") == ("tools",)
    assert top_fields(analysis, "data.sidecar.result_decision") == ("result", "tool")
    decision = top_fields(analysis, "data.sidecar.decision")
    assert decision is not None and {"call", "session", "tool"} <= set(decision)
    # ... and of those, the paths: no call id, hash or session id reaches the engine.
    paths = analysis.input_paths("data.sidecar.decision")
    assert paths is not None
    assert {("call", "args"), ("session", "calls_by_tool"), ("tool", "name"), ("replay", "count")} <= set(paths)
    assert not {("call",), ("session",), ("call", "id"), ("call", "args_hash"), ("session", "id")} & set(paths)


def test_paths_stop_at_the_first_part_chosen_at_evaluation(tmp_path: Path) -> None:
    main = HEAD + (
        "visible_tools contains name if {\n some name in input.tools\n"
        " input.session.calls_by_tool[name] > 0\n"  # the key is a variable: the whole map
        ' input["agent"]["labels"].team == "a"\n'  # constant brackets are a path too
        " x := input.call\n x.id\n"  # the call as a value: all of it
        " input.call.args.path\n"
        " input.items[0].name\n"  # a number index: the whole list
        "}\n"
    )
    (tmp_path / "m.rego").write_text(main)
    analysis = ReadsAnalysis(compile_bundle(read_bundle(str(tmp_path))).engine.ast())
    assert analysis.input_paths("data.sidecar.visible_tools") == (
        ("agent", "labels", "team"),
        ("call",),
        ("call", "args", "path"),
        ("items",),
        ("session", "calls_by_tool"),
        ("tools",),
    )
    assert analysis.input_shape("data.sidecar.visible_tools") == {
        "agent": {"labels": {"team": {}}},
        "call": {},
        "items": {},
        "session": {"calls_by_tool": {}},
        "tools": {},
    }


def test_a_projection_keeps_what_a_path_can_tell_apart() -> None:
    shape = shape_of((("tool", "name"), ("call", "args"), ("session",), ("session", "id")))
    assert shape == {"tool": {"name": {}}, "call": {"args": {}}, "session": {}}
    document = {
        "tool": {"name": "t", "kind": "function"},
        "call": {"id": "c1", "args": {"a": [1, {"b": None}]}},
        "session": {"id": "s", "calls_total": 3},
        "time": "t1",
    }
    assert project(document, shape) == {
        "tool": {"name": "t"},
        "call": {"args": {"a": [1, {"b": None}]}},
        "session": {"id": "s", "calls_total": 3},
    }
    # absent stays absent, null stays null, and a value that is not an object is kept whole
    assert project({"tool": {}, "call": None}, shape) == {"tool": {}, "call": None}
    assert project({"tool": ["name"], "call": "x"}, shape) == {"tool": ["name"], "call": "x"}


def test_reads_follow_helpers_packages_and_imports(tmp_path: Path) -> None:
    main = HEAD.replace("import rego.v1\n", "import rego.v1\nimport data.helpers as h\nimport data.other.limit\n") + (
        "visible_tools contains name if {\n some name in input.tools\n allowed(name)\n h.flag\n limit > 0\n}\n"
        "allowed(name) if input.session.id != name\n"
    )
    helpers = 'package helpers\nimport rego.v1\nflag if input["agent"].id\n'
    other = (
        "package other\nimport rego.v1\n"
        "limit := n if { n := input.session.calls_total } else := 1\nunused if input.call\n"
    )
    assert fields(tmp_path, main, helpers, other) == ("agent", "session", "tools")


@pytest.mark.parametrize(
    "body",
    [
        "some name in input.tools\n x := input\n",  # the whole input
        'some name in input.tools\n k := "tools"\n input[k]\n',  # a field chosen at evaluation
        "some name in input.tools\n time.now_ns() > 0\n",  # the clock
        "some name in input.tools\n data.sidecar.decision\n data\n",  # the whole data document
    ],
)
def test_unbounded_reads_are_not_remembered(tmp_path: Path, body: str) -> None:
    assert fields(tmp_path, HEAD + "visible_tools contains name if {\n " + body + "}\n") is None


def test_a_whole_package_counts_all_its_rules(tmp_path: Path) -> None:
    main = HEAD + "visible_tools contains name if {\n some name in input.tools\n data.extra.x\n}\n"
    extra = "package extra\nimport rego.v1\nx := data.extra.sub\n"
    sub = "package extra.sub\nimport rego.v1\na := input.model\nb := input.provider\n"
    assert fields(tmp_path, main, extra, sub) == ("model", "provider", "tools")


async def test_remembered_answer_follows_every_field_read(tmp_path: Path) -> None:
    """A policy that reads the session: two sessions get their own answers; the same session
    and tools are answered without evaluating again."""
    (tmp_path / "p.rego").write_text(
        HEAD + "visible_tools contains name if {\n some name in input.tools\n name != input.session.id\n}\n"
    )
    engine = EmbeddedEngine(settings(reload_interval_s=0.1), str(tmp_path))
    evaluated: list[str] = []
    real = engine.evaluate

    def counting(rule: str, document: dict[str, object]) -> object:
        evaluated.append(rule)
        return real(rule, document)

    engine.evaluate = counting  # type: ignore[method-assign]
    try:
        for _ in range(3):
            assert await engine.visible_tools({"tools": ["a", "b"], "session": {"id": "a"}, "time": "t1"}) == ["b"]
        assert len(evaluated) == 1  # the time changed nothing the rule reads
        assert await engine.visible_tools({"tools": ["a", "b"], "session": {"id": "b"}}) == ["a"]
        assert await engine.visible_tools({"tools": ["a", "c"], "session": {"id": "a"}}) == ["c"]
        assert len(evaluated) == 3
    finally:
        await engine.close()


async def test_a_new_revision_forgets_remembered_answers(tmp_path: Path) -> None:
    (tmp_path / "p.rego").write_text(HEAD + "visible_tools contains name if some name in input.tools\n")
    engine = EmbeddedEngine(settings(reload_interval_s=0.1), str(tmp_path))
    try:
        assert await engine.visible_tools({"tools": ["a", "b"]}) == ["a", "b"]
        (tmp_path / "p.rego").write_text(
            HEAD.replace('"v1"', '"v2"')
            + 'visible_tools contains name if {\n some name in input.tools\n name != "a"\n}\n'
        )
        await wait_for(engine, "v2")
        assert await engine.visible_tools({"tools": ["a", "b"]}) == ["b"]
    finally:
        await engine.close()


def _engine_inputs(engine: EmbeddedEngine) -> list[dict[str, object]]:
    """Every input document the engine's regorus engine is given from now on."""
    import orjson

    compiled = engine._current()
    assert compiled is not None
    given: list[dict[str, object]] = []
    real = compiled.engine.set_input_json

    def spy(text: bytes) -> None:
        given.append(orjson.loads(text))
        real(text)

    compiled.engine.set_input_json = spy  # type: ignore[method-assign]
    return given


async def test_the_engine_gets_only_the_fields_a_rule_reads(tmp_path: Path) -> None:
    """A call decision's input reaches regorus without the fields `decision` never reads; a
    field it reads that is absent stays absent (undefined, not null), and the answer is the
    one the whole input gets."""
    (tmp_path / "p.rego").write_text(
        "package sidecar\nimport rego.v1\n"
        'decision := {"allow": false, "reasons": ["no tool"], "require_approval": null, "retryable": false} if {\n'
        " not input.tool\n"
        '} else := {"allow": true, "reasons": [input.tool.name], "require_approval": null, "retryable": false}\n'
    )
    engine = EmbeddedEngine(settings(reload_interval_s=0.1), str(tmp_path))
    try:
        assert (await engine.decide({"tool": {"name": "t"}})).reasons == ["t"]
        given = _engine_inputs(engine)
        decision = await engine.decide({"tool": {"name": "t"}, "time": "t1", "agent": {"id": "a"}})
        assert decision.allow and decision.reasons == ["t"]
        assert given == [{"tool": {"name": "t"}}]
        absent = await engine.decide({"time": "t1"})
        assert not absent.allow and absent.reasons == ["no tool"]
        assert given[-1] == {}
        null = await engine.decide({"tool": None})
        assert given[-1] == {"tool": None}  # present as null: not the same as absent
        assert null.reasons != ["no tool"]
    finally:
        await engine.close()


async def test_a_rule_whose_reads_are_unbounded_gets_the_whole_input(tmp_path: Path) -> None:
    (tmp_path / "p.rego").write_text(
        "package sidecar\nimport rego.v1\n"
        'decision := {"allow": true, "reasons": [k | some k, _ in input], "require_approval": null,'
        ' "retryable": false}\n'
    )
    engine = EmbeddedEngine(settings(reload_interval_s=0.1), str(tmp_path))
    try:
        assert (await engine.decide({"tool": {}, "time": "t1"})).reasons
        given = _engine_inputs(engine)
        decision = await engine.decide({"tool": {"name": "t"}, "time": "t1"})
        assert sorted(decision.reasons) == ["time", "tool"]
        assert given == [{"tool": {"name": "t"}, "time": "t1"}]
    finally:
        await engine.close()


async def test_a_remembered_answer_tells_an_absent_field_from_a_null_one(tmp_path: Path) -> None:
    """Rego reads an absent field as undefined and a null one as null: they are two inputs."""
    (tmp_path / "p.rego").write_text(
        HEAD + 'visible_tools contains "absent" if not input.tools\n'
        'visible_tools contains "null" if input.tools == null\n'
    )
    engine = EmbeddedEngine(settings(reload_interval_s=0.1), str(tmp_path))
    try:
        assert await engine.visible_tools({"session": {"id": "a"}}) == ["absent"]
        assert await engine.visible_tools({"tools": None}) == ["null"]
        assert await engine.visible_tools({}) == ["absent"]
    finally:
        await engine.close()


async def test_the_shipped_decision_gets_no_ids_and_decides_the_same() -> None:
    """The shipped library's call decision reaches regorus without the call's id, hash and
    position or the session's id; the decision is the one the whole input gets. (A replay:
    a first call of an unlisted tool is answered without regorus, sidecar/policy/shortcuts.py.)"""
    from sidecar.policy.loader import SAMPLE_CALL

    engine = EmbeddedEngine(settings(), None)
    try:
        document = {**SAMPLE_CALL, "tool": {**SAMPLE_CALL["tool"], "name": "transfer"}, "replay": {"count": 1}}
        compiled = engine._current()
        assert compiled is not None
        compiled.engine.set_input(document)
        whole = compiled.engine.eval_rule("data.sidecar.decision")
        given = _engine_inputs(engine)
        decision = await engine.decide(document)
        assert (decision.allow, decision.reasons, decision.rule) == (whole["allow"], whole["reasons"], whole["rule"])
        [sent] = given
        assert "id" not in sent["call"] and "args_hash" not in sent["call"] and "index" not in sent["call"]
        assert "id" not in sent["session"] and "calls_total" not in sent["session"]
        assert sent["call"]["args"] == document["call"]["args"] and sent["tool"]["name"] == "transfer"
    finally:
        await engine.close()
