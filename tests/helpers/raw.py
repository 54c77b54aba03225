"""Helpers for the robustness tests: raw requests to the sidecar and a log that must stay clean."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import orjson
import pytest

ENDPOINTS = {
    "/v1/messages": "anthropic",
    "/v1/chat/completions": "openai_chat",
    "/v1/responses": "openai_responses",
}
HEADERS = {
    "/v1/messages": {"anthropic-version": "2023-06-01", "x-api-key": "test"},
    "/v1/chat/completions": {"authorization": "Bearer test"},
    "/v1/responses": {"authorization": "Bearer test"},
}


def assert_provider_error(path: str, body: Any) -> None:
    """The error shape the provider's SDK raises its normal API error for."""
    assert isinstance(body, dict), body
    if path == "/v1/messages":
        assert body.get("type") == "error" and isinstance(body["error"]["message"], str), body
        assert isinstance(body["error"]["type"], str)
    else:
        assert isinstance(body.get("error"), dict) and isinstance(body["error"]["message"], str), body


def assert_clean_log(caplog: pytest.LogCaptureFixture) -> None:
    """No unhandled exception anywhere: aiohttp's 'Error handling request', any traceback."""
    bad = [
        r
        for r in caplog.records
        if r.exc_info is not None or "Error handling request" in r.getMessage() or r.levelno >= logging.ERROR
    ]
    assert not bad, [f"{r.name}: {r.getMessage()}" for r in bad]


async def post(session: aiohttp.ClientSession, url: str, path: str, body: bytes | Any) -> tuple[int, str, bytes]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    headers = {**HEADERS[path], "content-type": "application/json"}
    async with session.post(url + path, data=data, headers=headers) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.read()
