"""Fixtures for the scripted model tests: SDK clients and a raw HTTP session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from sidecar.scripted import ScriptedModel


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel(seed=7) as m:
        yield m


@pytest.fixture
def claude(model: ScriptedModel) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=model.url, api_key="test", max_retries=0)


@pytest.fixture
def oai(model: ScriptedModel) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=model.url + "/v1", api_key="test", max_retries=0)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield session


Post = Callable[..., Awaitable[tuple[int, bytes, dict[str, str]]]]


@pytest.fixture
def post(model: ScriptedModel, http: aiohttp.ClientSession) -> Post:
    """POST JSON to the model and return (status, raw body bytes, headers)."""

    async def _post(
        path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[int, bytes, dict[str, str]]:
        async with http.post(model.url + path, json=body, headers=headers) as resp:
            return resp.status, await resp.read(), dict(resp.headers)

    return _post
