"""`sidecar demo`: one sidecar for every scene, told in order and in plain words, and a summary
read from the real /v1/status that agrees with what the scenes showed."""

from __future__ import annotations

import shlex

from sidecar.demo.runner import ADMIN_TOKEN, play

# The model scenes, plus the MCP scene (a refund and its replay, a denied reply) on the same tools.
EXPECTED = {
    "payments_refund": {"allow": 2, "replay": 2},
    "support_tickets_search": {"allow": 2, "reject": 1},
    "support_replies_send": {"allow": 1, "approval": 1, "deny": 2},
}


async def _play() -> tuple[list[str], object]:
    lines: list[str] = []
    result = await play(say=lines.append)
    return lines, result


def _scenes(lines: list[str]) -> list[list[str]]:
    starts = [i for i, line in enumerate(lines) if line.startswith("\n== ")]
    return [lines[a:b] for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]


async def test_the_summary_from_v1_status_agrees_with_the_scenes():
    lines, result = await _play()
    assert result.shown == EXPECTED  # tallied from the traffic the scripted model saw
    assert result.counted == EXPECTED  # GET /v1/status of the one sidecar every scene ran through
    assert result.repair_rounds_shown == result.repair_rounds_counted == 4
    assert result.agrees
    summary = next(scene for scene in _scenes(lines) if "What the sidecar counted" in scene[0])
    rows = {line.split("  ")[1].strip(): line.split()[-3:] for line in summary[2:8]}
    assert summary[1].split() == ["payments_refund", "support_replies_send", "support_tickets_search"]
    assert rows == {
        "allowed": ["2", "1", "2"],
        "refused: arguments": ["0", "0", "1"],
        "denied by policy": ["0", "2", "0"],
        "waiting for approval": ["0", "1", "0"],
        "answered from the ledger": ["2", "0", "0"],
        "calls": ["4", "4", "3"],
    }
    assert "  These are exactly the verdicts and repair rounds the scenes above showed." in summary


async def test_each_verdict_comes_before_the_models_correction_in_plain_words():
    lines, _ = await _play()
    scenes = _scenes(lines)[:5]
    words = ["allowed", "refused: arguments", "answered from the ledger", "waiting for approval", "denied by policy"]
    for scene, word in zip(scenes, words, strict=True):
        verdict = next(i for i, line in enumerate(scene) if line.startswith(f"  sidecar  {word}"))
        repair = [i for i, line in enumerate(scene) if "(repair round)" in line]
        if word != "allowed":  # a refusal: the sidecar's verdict, then what the model does with it
            assert repair and verdict < repair[0], scene
            assert "the agent never sees this call" in scene[verdict + 1]
        else:
            assert repair == []
    assert not any("→ repair" in line or "{'" in line for line in lines)  # no internal words, no raw dicts


async def test_the_approval_is_granted_through_the_real_cli_with_a_command_that_can_be_copied():
    lines, result = await _play()
    [listing, approve] = result.commands
    for command in (listing, approve):
        env, program, *args = shlex.split(command)
        assert env == f"SIDECAR_ADMIN_TOKEN={ADMIN_TOKEN}" and program == "sidecar"
        assert args[args.index("--admin-url") + 1].startswith("http://127.0.0.1:")
    assert shlex.split(approve)[2:5] == ["approvals", "approve", shlex.split(approve)[4]]
    approval_id = shlex.split(approve)[4]
    assert approval_id.startswith("apr_")
    at = lines.index(f"  lead     $ {approve}")
    assert lines[at + 1].split()[:4] == [f"{approval_id}:", "approved", "by", "lee"]  # the CLI's own output
    scene = next(s for s in _scenes(lines) if "Human approval" in s[0])
    after = scene[scene.index(f"  lead     $ {approve}") :]
    assert any(line.startswith("  sidecar  allowed: support_replies_send") for line in after)


async def test_the_mcp_scene_gets_the_same_answers_from_the_same_policy():
    lines, _ = await _play()
    scene = next(s for s in _scenes(lines) if s[0].startswith("\n== 6. MCP"))
    text = "\n".join(scene)
    assert "hidden by the policy: internal_debug_dump" in text
    said = [line.split(":")[0].strip() for line in scene if line.startswith("  sidecar  ")]
    assert said == [
        "sidecar  hidden by the policy",
        "sidecar  allowed",
        "sidecar  answered from the ledger",
        "sidecar  denied by policy",
    ]
    assert sum("runs payments_refund" in line for line in scene) == 1  # the server ran the refund once


async def test_the_demo_ends_with_what_to_do_next():
    lines, _ = await _play()
    closing = _scenes(lines)[-1]
    assert closing[0] == "\n== What next"
    text = "\n".join(closing)
    assert "export ANTHROPIC_BASE_URL=http://127.0.0.1:8080" in text and "OPENAI_BASE_URL" in text
    assert "sidecar status" in text and "/metrics" in text and "sidecar policy test" in text
