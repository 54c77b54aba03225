"""Hold mode (the request waits for the human, streams stay alive) and webhook notification."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx2 as httpx
import pytest
from aiohttp import web

import tests.e2e.agents as agents_module
from sidecar.scripted import Turn
from tests.approvals.conftest import OUTSIDE, TOOLS, admin, cli, metric, pending, send, wait_for_pending
from tests.e2e.agents import AGENTS
from tests.e2e.clients import anthropic_client
from tests.helpers.serve import serve


class TeeTransport(httpx.AsyncHTTPTransport):
    """Keeps every byte the sidecar sent, so the test can see the SSE keep-alives the SDK
    (rightly) hides from its caller."""

    def __init__(self) -> None:
        super().__init__()
        self.raw = bytearray()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        inner, raw = response.stream, self.raw

        class Stream(httpx.AsyncByteStream):
            async def __aiter__(self):
                async for chunk in inner:  # type: ignore[union-attr]
                    raw.extend(chunk)
                    yield chunk

            async def aclose(self) -> None:
                await inner.aclose()  # type: ignore[union-attr]

        return httpx.Response(
            response.status_code, headers=response.headers, stream=Stream(), extensions=response.extensions
        )


HOLD = {"tools": {"support_replies_send": {"approval_mode": "hold"}}, "enforcement": {"keepalive_interval_s": 0.05}}


async def test_hold_stream_waits_for_the_approval(model, start_approvals, monkeypatch):
    running = await start_approvals(**HOLD)
    tee = TeeTransport()
    monkeypatch.setattr(
        agents_module,
        "anthropic_client",
        lambda url, **kw: anthropic_client(url, http_client=httpx.AsyncClient(transport=tee), **kw),
    )
    model.add_turns([Turn(text="I will send the reply now.", tool_calls=[send(OUTSIDE)])])
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "held"})

    asking = asyncio.ensure_future(agent.ask(stream=True))
    [held] = await wait_for_pending(running)
    assert not asking.done()
    done = await cli(running.admin_url, "approve", held["id"])
    assert done.code == 0, done.err
    received = await asking

    assert received.calls == [("support_replies_send", OUTSIDE)]
    content = received.raw.content
    assert [b.type for b in content] == ["text", "tool_use"]  # nothing lost, nothing reordered
    assert content[0].text == "I will send the reply now."
    assert received.stop == "tool_use"
    raw = bytes(tee.raw)
    # The text went out before the hold, keep-alives while the human decided, the call after.
    text_at = raw.index(b"text_delta")
    assert raw.count(b"event: ping", text_at) >= 1
    assert raw.rindex(b"event: ping") < raw.index(b"tool_use")
    assert len([r for r in model.requests if r.protocol]) == 1  # no repair round was needed
    _, record = await admin(running, "GET", f"/approvals/{held['id']}")
    assert record["status"] == "consumed"


async def test_hold_denied_and_timeout(model, start_approvals):
    running = await start_approvals(**HOLD)
    agent = AGENTS["chat"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "held-deny"})
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="It was denied.")])
    asking = asyncio.ensure_future(agent.ask(stream=False))
    [held] = await wait_for_pending(running)
    status, _ = await admin(running, "POST", f"/approvals/{held['id']}/deny", body={"comment": "wrong customer"})
    assert status == 200
    received = await asking
    assert received.calls == [] and received.text == "It was denied."
    output = AGENTS["chat"].tool_outputs([r for r in model.requests if r.protocol][-1])[0]
    assert output["reasons"] == ["denied by alice: wrong customer"]

    # Nobody decides within hold_timeout_s: the call is deferred like in defer mode.
    quick = await start_approvals(approvals={"mode": "hold", "hold_timeout_s": 0.2})
    agent = AGENTS["chat"](quick.proxy_url, TOOLS, headers={"X-Sidecar-Session": "held-long"})
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Still waiting for approval.")])
    assert (await agent.ask(stream=False)).calls == []
    output = AGENTS["chat"].tool_outputs([r for r in model.requests if r.protocol][-1])[0]
    [waiting] = await pending(quick)
    assert (output["status"], output["approval_id"]) == ("approval_required", waiting["id"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_agent_gone_while_held_leaves_no_check_running(model, start_approvals, stream):
    """The checks of a reply run as a task of their own (sidecar/exchange/runner.py): when
    the agent goes away during them (here: held for approval), that task is cancelled and
    waited for, for a whole reply as for a stream."""
    running = await start_approvals(**HOLD)
    agent = AGENTS["chat"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": f"held-gone-{stream}"})
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)])])
    asking = asyncio.ensure_future(agent.ask(stream=stream))
    await wait_for_pending(running)

    def checking() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if "settle" in repr(t.get_coro())]

    assert checking()  # the reply's checks, waiting for the human
    asking.cancel()  # the agent goes away: its connection closes
    with contextlib.suppress(asyncio.CancelledError):
        await asking
    for _ in range(200):
        if not checking():
            break
        await asyncio.sleep(0.01)
    assert not checking()


async def test_webhook_is_retried_until_delivered(model, start_approvals):
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        """Answers 500 twice, then 200."""
        received.append(await request.json())
        return web.Response(status=500 if len(received) <= 2 else 200)

    async with serve(hook) as base_url:
        url = base_url + "/hook"
        running = await start_approvals(approvals={"webhook_url": url, "webhook_retries": 3, "webhook_backoff_s": 0.01})
        model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Awaiting approval.")])
        await AGENTS["anthropic"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "hooked"}).ask(False)
        await running.sidecar.approvals.notifier.drain()
        [waiting] = await pending(running)

        assert len(received) == 3 and received[0] == received[2]
        payload = received[-1]
        base = f"{running.admin_url}/approvals/{waiting['id']}"
        assert payload == {
            "event": "approval_requested",
            "id": waiting["id"],
            "tool": "support_replies_send",
            "session": "hooked",
            "group": "support-leads",
            "reasons": waiting["reasons"],
            "arguments": OUTSIDE,
            "args_hash": waiting["args_hash"],
            "created": waiting["created"],  # the same ISO-8601 UTC times as the admin API
            "expires": waiting["expires"],
            "approve_url": base + "/approve",
            "deny_url": base + "/deny",
            "show_url": base,
        }
        assert await metric(running, "sidecar_approval_webhook_failures_total") == 0


async def test_webhook_failure_is_counted_and_never_blocks(model, start_approvals):
    release = asyncio.Event()
    calls = 0

    async def stuck(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        await release.wait()  # the receiver hangs until the agent got its answer
        return web.Response(status=503)

    async with serve(stuck) as base_url:
        url = base_url + "/hook"
        running = await start_approvals(approvals={"webhook_url": url, "webhook_retries": 1, "webhook_backoff_s": 0.01})
        model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Awaiting approval.")])
        received = await AGENTS["chat"](running.proxy_url, TOOLS).ask(stream=True)
        assert received.text == "Awaiting approval."  # answered while the webhook hangs
        release.set()
        await running.sidecar.approvals.notifier.drain()
        assert calls == 2  # one try and one retry
        assert await metric(running, "sidecar_approval_webhook_failures_total") == 1
