"""The sidecar keeps no cookies: one upstream client serves every agent, so a cookie the
provider sets on one agent's answer (a CDN's bot-management cookie, say) must never ride on
another agent's request. Cookies pass through as the agents send and receive them."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.helpers.serve import serve

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "Hello."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 2},
}
BODY = orjson.dumps({"model": "claude-test", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi."}]})
HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01", "content-type": "application/json"}


class _Provider:
    """Answers every request, sets a cookie on each answer, and keeps the Cookie headers it got."""

    def __init__(self) -> None:
        self.cookies: list[str | None] = []

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.cookies.append(request.headers.get("Cookie"))
        body = orjson.dumps(MESSAGE if request.method == "POST" else {"data": [], "has_more": False})
        response = web.Response(body=body, content_type="application/json")
        response.headers["Set-Cookie"] = f"__cf_bm=answer{len(self.cookies)}; Path=/; HttpOnly"
        return response


async def _send(url: str, method: str, path: str, extra: dict[str, str] | None = None) -> tuple[int, str | None]:
    """One agent's request (its own client, which keeps no cookies either): status, Set-Cookie."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        data = BODY if method == "POST" else None
        async with http.request(method, url + path, data=data, headers={**HEADERS, **(extra or {})}) as response:
            await response.read()
            return response.status, response.headers.get("Set-Cookie")


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/messages"), ("GET", "/v1/models")])
async def test_a_cookie_set_for_one_agent_never_reaches_the_provider_again(
    start_sidecar: Any, method: str, path: str
) -> None:
    provider = _Provider()
    async with serve(provider.handle) as upstream:
        # By a name, as a provider is reached: a cookie jar keeps no cookie of an IP address.
        sidecar = await start_sidecar(anthropic_upstream=upstream.replace("127.0.0.1", "localhost"))
        first = await _send(sidecar.proxy_url, method, path)
        second = await _send(sidecar.proxy_url, method, path)
        own = await _send(sidecar.proxy_url, method, path, {"Cookie": "agent=mine"})
    # The agents get the provider's cookies, as they would without the sidecar...
    assert first == (200, "__cf_bm=answer1; Path=/; HttpOnly")
    assert second == (200, "__cf_bm=answer2; Path=/; HttpOnly")
    assert own[0] == 200
    # ...and the provider only ever gets what each agent sent itself.
    assert provider.cookies == [None, None, "agent=mine"]
