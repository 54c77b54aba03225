"""Responses over WebSocket are refused, with the HTTP alternative named (docs/coverage.md):
the OpenAI Agents SDK's WebSocket model gets a clear error instead of a hang or a bypass."""

from __future__ import annotations

import aiohttp
import orjson
import pytest
from agents import Agent, Runner
from agents.models.openai_responses import OpenAIResponsesWSModel

from tests.e2e.clients import openai_client
from tests.helpers.metrics import scrape


async def test_agents_sdk_websocket_model_gets_a_clear_error(model, sidecar):
    async with openai_client(sidecar.proxy_url) as client:
        agent = Agent(name="a", instructions="be brief", model=OpenAIResponsesWSModel("gpt-test", client))
        with pytest.raises(Exception) as raised:
            await Runner.run(agent, "hi")
    chain = []
    error: BaseException | None = raised.value
    while error is not None:  # the SDK wraps the handshake failure
        chain.append(error)
        error = error.__cause__ or error.__context__
    shown = " ".join(str(e) for e in chain) + " ".join(
        str(getattr(getattr(e, "response", None), "body", b"")) for e in chain
    )
    assert "400" in shown
    assert "POST /v1/responses with stream: true" in shown
    assert model.requests == []  # nothing reached the provider
    metrics = await scrape(sidecar.admin_url)
    assert metrics.value("sidecar_requests_refused_total", reason="websocket") >= 1


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/realtime?model=gpt-realtime", "/v1/messages"])
async def test_every_websocket_upgrade_is_refused_provider_shaped(model, sidecar, path):
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as raised:
            await session.ws_connect(sidecar.proxy_url + path)
        assert raised.value.status == 400
        async with session.get(
            sidecar.proxy_url + path, headers={"Upgrade": "websocket", "Connection": "Upgrade"}
        ) as response:
            body = orjson.loads(await response.read())
    message = body["error"]["message"]
    assert "does not enforce WebSocket" in message and "stream: true" in message
    assert model.requests == []
