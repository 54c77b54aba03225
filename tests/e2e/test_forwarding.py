"""Transparent forwarding: routing, header hygiene, the upstream allow-list, body limits,
compressed upstream bodies and event-by-event streaming.

Two scripted models stand in for the two providers (`model` for Anthropic, `openai_model`
for OpenAI), so every test can tell which upstream a request reached.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from aiohttp import web
from yarl import URL

from sidecar.app import Running
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn, UpstreamError
from sidecar.telemetry.logs import configure_logging
from tests.e2e.clients import (
    API_KEY_ANTHROPIC,
    API_KEY_OPENAI,
    WEATHER_TOOL_ANTHROPIC,
    WEATHER_TOOL_CHAT,
    WEATHER_TOOL_RESPONSES,
    anthropic_client,
    openai_client,
)
from tests.helpers.serve import serve

USER = [{"role": "user", "content": "Weather?"}]
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": API_KEY_ANTHROPIC}
OPENAI_HEADERS = {"authorization": f"Bearer {API_KEY_OPENAI}"}
MESSAGES_BODY = {"model": "claude-test", "max_tokens": 64, "messages": USER}
CHAT_BODY = {"model": "gpt-test", "messages": USER}
RESPONSES_BODY = {"model": "gpt-test", "input": "Weather?"}
BAD_DAYS = ToolCallSpec("get_weather", {"city": "Paris", "days": "2"})  # lockdown: "2" is not an integer
GOOD_DAYS = ToolCallSpec("get_weather", {"city": "Paris", "days": 2})


@pytest.fixture
async def openai_model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel([]) as scripted:
        yield scripted


@pytest.fixture
async def split(start_sidecar: Any, openai_model: ScriptedModel) -> Running:
    """A sidecar sending Anthropic traffic to `model` and OpenAI traffic to `openai_model`."""
    return await start_sidecar(openai_upstream=openai_model.url)


@pytest.fixture
async def decoy() -> AsyncIterator[tuple[str, list[str]]]:
    """An aiohttp server nobody should reach: (its host:port, the requests it saw)."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.raw_path}")
        return web.Response(text="decoy")

    async with serve(record) as url:
        yield url.removeprefix("http://"), seen


# -- a raw HTTP/1.1 client: nothing between the test and the wire --------------------------


async def raw_http(base: str, head: str, body: bytes = b"") -> tuple[int, list[tuple[str, str]], bytes]:
    """Write `head` (request line + headers, no blank line) and `body` verbatim; read to EOF."""
    url = URL(base)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(head.replace("\n", "\r\n").encode() + b"Connection: close\r\n\r\n" + body)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    header_block, _, payload = data.partition(b"\r\n\r\n")
    lines = header_block.decode("latin-1").split("\r\n")
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:])]
    if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers):
        payload = _dechunk(payload)
    return int(lines[0].split()[1]), headers, payload


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


def _names(headers: list[tuple[str, str]]) -> set[str]:
    return {k.lower() for k, _ in headers}


# -- 1. routing ------------------------------------------------------------------------------

ROUTES = [
    # method, target, headers, body, provider, path seen upstream, query seen upstream
    ("POST", "/v1/messages", ANTHROPIC_HEADERS, MESSAGES_BODY, "anthropic", "/v1/messages", {}),
    ("POST", "/v1/chat/completions", OPENAI_HEADERS, CHAT_BODY, "openai", "/v1/chat/completions", {}),
    ("POST", "/v1/responses", OPENAI_HEADERS, RESPONSES_BODY, "openai", "/v1/responses", {}),
    # Endpoint-specific paths win over misleading headers.
    ("POST", "/v1/chat/completions", ANTHROPIC_HEADERS, CHAT_BODY, "openai", "/v1/chat/completions", {}),
    ("POST", "/v1/messages/count_tokens", OPENAI_HEADERS, MESSAGES_BODY, "anthropic", "/v1/messages/count_tokens", {}),
    # Paths both providers serve: the SDK's headers decide.
    (
        "GET",
        "/v1/models?limit=2&after_id=a%26b",
        ANTHROPIC_HEADERS,
        None,
        "anthropic",
        "/v1/models",
        {"limit": "2", "after_id": "a&b"},
    ),
    ("GET", "/v1/models?x=%2F%20y+z", OPENAI_HEADERS, None, "openai", "/v1/models", {"x": "/ y z"}),
    ("DELETE", "/v1/files/file-abc", {"x-api-key": "k"}, None, "anthropic", "/v1/files/file-abc", {}),
    ("PATCH", "/v1/files/file-abc?q=1", OPENAI_HEADERS, {"a": 1}, "openai", "/v1/files/file-abc", {"q": "1"}),
    # Explicit prefixes always work, whatever the headers say.
    ("POST", "/anthropic/v1/messages", OPENAI_HEADERS, MESSAGES_BODY, "anthropic", "/v1/messages", {}),
    ("GET", "/anthropic/v1/models", {}, None, "anthropic", "/v1/models", {}),
    ("POST", "/openai/v1/chat/completions", ANTHROPIC_HEADERS, CHAT_BODY, "openai", "/v1/chat/completions", {}),
    ("GET", "/openai/v1/models?limit=1", ANTHROPIC_HEADERS, None, "openai", "/v1/models", {"limit": "1"}),
]


@pytest.mark.parametrize(("method", "target", "headers", "body", "provider", "path", "query"), ROUTES)
async def test_routing(model, openai_model, split, method, target, headers, body, provider, path, query):
    data = orjson.dumps(body) if body is not None else None
    direct = model if provider == "anthropic" else openai_model
    async with aiohttp.ClientSession() as session:
        url = URL(split.proxy_url + target, encoded=True)
        async with session.request(method, url, data=data, headers=headers) as response:
            via_sidecar = (response.status, await response.read())
        async with session.request(method, URL(direct.url + path, encoded=True), data=data, headers=headers) as r:
            straight = (r.status, await r.read())
    other = openai_model if direct is model else model
    assert other.requests == []
    assert len(direct.requests) == 2
    forwarded, reference = direct.requests
    assert (forwarded.method, forwarded.path, forwarded.query) == (method, path, query)
    assert forwarded.body == (data or b"")  # untouched
    if "tool" not in target:  # bodies carry fresh ids: compare status and shape
        assert via_sidecar[0] == straight[0]
        assert orjson.loads(via_sidecar[1]).keys() == orjson.loads(straight[1]).keys()
    assert reference.path == path


async def test_sdk_endpoints_reach_their_provider(model, openai_model, split):
    model.add_turns(Turn(text="hi from anthropic"))
    openai_model.add_turns(Turn(text="hi from openai"), Turn(text="responses"))
    async with anthropic_client(split.proxy_url) as a, openai_client(split.proxy_url) as o:
        a_models = [m.id async for m in a.models.list()]
        counted = await a.messages.count_tokens(model="claude-test", messages=USER)
        message = await a.messages.create(model="claude-test", max_tokens=16, messages=USER)
        o_models = [m.id async for m in o.models.list()]
        chat = await o.chat.completions.create(model="gpt-test", messages=USER)
        response = await o.responses.create(model="gpt-test", input="hi")
    assert a_models and all(m.startswith("claude") for m in a_models)
    assert counted.input_tokens > 0
    assert message.content[0].text == "hi from anthropic"
    assert o_models and not any(m.startswith("claude") for m in o_models)
    assert chat.choices[0].message.content == "hi from openai"
    assert response.output_text == "responses"
    assert [r.path for r in model.requests] == ["/v1/models", "/v1/messages/count_tokens", "/v1/messages"]
    assert [r.path for r in openai_model.requests] == ["/v1/models", "/v1/chat/completions", "/v1/responses"]


async def test_explicit_prefixes_with_sdks(model, openai_model, split):
    model.add_turns(Turn(tool_calls=[BAD_DAYS]), Turn(tool_calls=[GOOD_DAYS]))
    openai_model.add_turns(Turn(tool_calls=[BAD_DAYS]), Turn(tool_calls=[GOOD_DAYS]))
    # One session per client: the two conversations begin alike, so their derived sessions
    # would merge, and the second delivery of the same get_weather call would be a replay
    # (unlisted tools are side-effecting under the packaged default policy).
    anthropic_session = {"default_headers": {"X-Sidecar-Session": "prefix-anthropic"}}
    openai_session = {"default_headers": {"X-Sidecar-Session": "prefix-openai"}}
    async with (
        anthropic_client(split.proxy_url + "/anthropic", **anthropic_session) as a,
        openai_client(split.proxy_url + "/openai", **openai_session) as o,
    ):
        message = await a.messages.create(
            model="claude-test", max_tokens=64, messages=USER, tools=[WEATHER_TOOL_ANTHROPIC]
        )
        chat = await o.chat.completions.create(model="gpt-test", messages=USER, tools=[WEATHER_TOOL_CHAT])
    # Parsed as well as routed: the refused call was repaired on both.
    assert [b.input for b in message.content if b.type == "tool_use"] == [GOOD_DAYS.arguments]
    calls = chat.choices[0].message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in calls] == [GOOD_DAYS.arguments]
    assert [r.path for r in model.requests] == ["/v1/messages"] * 2
    assert [r.path for r in openai_model.requests] == ["/v1/chat/completions"] * 2


async def test_upstream_path_prefix(model, openai_model, start_sidecar):
    running = await start_sidecar(anthropic_upstream=model.url + "/anth", openai_upstream=openai_model.url + "/oai/v2/")
    model.add_turns(Turn(text="a"))
    openai_model.add_turns(Turn(text="o"))
    async with anthropic_client(running.proxy_url) as a, openai_client(running.proxy_url) as o:
        await a.messages.create(model="claude-test", max_tokens=16, messages=USER)
        await o.chat.completions.create(model="gpt-test", messages=USER)
        await o.models.list()
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            URL(running.proxy_url + "/v1/models?after_id=a%26b", encoded=True), headers=ANTHROPIC_HEADERS
        ) as response,
    ):
        assert response.status == 200
    assert [(r.path, r.query) for r in model.requests] == [
        ("/anth/v1/messages", {}),
        ("/anth/v1/models", {"after_id": "a&b"}),
    ]
    assert [r.path for r in openai_model.requests] == ["/oai/v2/v1/chat/completions", "/oai/v2/v1/models"]


# -- 2. header hygiene ---------------------------------------------------------------------

CREDENTIALS = {
    "x-api-key": API_KEY_ANTHROPIC,
    "authorization": f"Bearer {API_KEY_OPENAI}",
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "tools-2024-05-16,prompt-caching-2024-07-31",
    "openai-organization": "org-sidecar-test",
    "openai-project": "proj_sidecar_test",
}
HOP_REQUEST = [
    ("Connection", "keep-alive, X-Hop-Named"),
    ("Connection", "X-Hop-Second"),
    ("X-Hop-Named", "1"),
    ("X-Hop-Second", "1"),
    ("Keep-Alive", "timeout=5, max=100"),
    ("TE", "trailers"),
    ("Trailer", "X-Checksum"),
    ("Upgrade", "h2c"),
    ("Proxy-Authorization", "Basic cHJveHk6c2VjcmV0"),
    ("Proxy-Connection", "keep-alive"),
    ("Proxy-Custom", "1"),
]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_request_headers(model, sidecar, chunked):
    model.add_turns(Turn(text="ok"))
    body = orjson.dumps(MESSAGES_BODY)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
    wire = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if chunked else body
    lines = [
        "POST /v1/messages HTTP/1.1",
        "Host: elsewhere.example:443",
        "Content-Type: application/json",
        framing,
        "X-Sidecar-Session: session-42",
        *(f"{k}: {v}" for k, v in CREDENTIALS.items()),
        *(f"{k}: {v}" for k, v in HOP_REQUEST),
    ]
    status, _, payload = await raw_http(sidecar.proxy_url, "\n".join(lines) + "\n", wire)
    assert status == 200, payload
    (seen,) = model.requests
    for name, value in CREDENTIALS.items():
        assert seen.headers[name] == value
    dropped = {k.lower() for k, _ in HOP_REQUEST} | {"x-sidecar-session", "transfer-encoding"}
    assert dropped.isdisjoint(seen.headers), dropped & set(seen.headers)
    assert seen.headers["host"] == URL(model.url).raw_authority
    assert seen.headers["content-length"] == str(len(body))
    assert seen.body == body


async def test_response_headers(model, sidecar):
    hop = {
        "Connection": "X-Hop-Named",
        "X-Hop-Named": "1",
        "Keep-Alive": "timeout=5",
        "Upgrade": "h2c",
        "Trailer": "X-Checksum",
        "Proxy-Authenticate": "Basic",
        "Proxy-Custom": "1",
        "Retry-After": "7",
        "X-End-To-End": "kept",
    }
    turn = Turn(error=UpstreamError(429, headers=hop))
    head = "POST /v1/messages HTTP/1.1\nHost: x\nContent-Type: application/json\nanthropic-version: 2023-06-01\n"
    body = orjson.dumps(MESSAGES_BODY)
    head += f"Content-Length: {len(body)}\n"
    model.add_turns(turn)
    _, direct, _ = await raw_http(model.url, head, body)
    assert {"x-hop-named", "keep-alive", "upgrade", "proxy-custom"} <= _names(direct)  # the upstream sent them
    model.add_turns(turn)
    status, headers, payload = await raw_http(sidecar.proxy_url, head, body)
    assert status == 429
    assert orjson.loads(payload)["error"]["type"] == "rate_limit_error"
    names = _names(headers)
    assert {"x-hop-named", "keep-alive", "upgrade", "trailer", "proxy-authenticate", "proxy-custom"}.isdisjoint(names)
    assert all("x-hop" not in v.lower() for k, v in headers if k.lower() == "connection")
    assert ("Retry-After", "7") in headers and ("X-End-To-End", "kept") in headers


async def test_secrets_never_logged(model, start_sidecar, tmp_path, caplog, capfd):
    """Known keys travel through successes, repairs, errors and a broken stream; no log shows them."""
    org, project = CREDENTIALS["openai-organization"], CREDENTIALS["openai-project"]
    secrets = [API_KEY_ANTHROPIC, API_KEY_OPENAI, org, project, "cHJveHk6c2VjcmV0"]
    handler = configure_logging("debug")  # the JSON stderr handler the CLI installs, captured by capfd
    sidecar_logger = logging.getLogger("sidecar")
    sidecar_logger.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG, logger="sidecar")
    caplog.set_level(logging.DEBUG, logger="aiohttp")  # the sidecar's HTTP server and client
    try:
        running = await start_sidecar(upstream_timeout_s=0.5)
        model.add_turns(
            Turn(tool_calls=[BAD_DAYS]),
            Turn(tool_calls=[GOOD_DAYS]),  # rejected, repaired
            Turn(tool_calls=[BAD_DAYS]),
            Turn(error=UpstreamError(401)),  # repair round fails upstream
            Turn(tool_calls=[BAD_DAYS]),
            Turn(tool_calls=[GOOD_DAYS]),  # the same over OpenAI
            Turn(error=UpstreamError(401)),
            Turn(text="slow words that never finish arriving", delay_s=2),  # stream times out
        )
        extra = {"Proxy-Authorization": "Basic cHJveHk6c2VjcmV0", "x-api-key": API_KEY_ANTHROPIC}
        async with (
            # One session per client (see test_explicit_prefixes_with_sdks: else the OpenAI
            # GOOD_DAYS would be a replay of the Anthropic one under the default policy).
            anthropic_client(running.proxy_url, default_headers={**extra, "X-Sidecar-Session": "sec-a"}) as a,
            openai_client(
                running.proxy_url,
                default_headers={**extra, "X-Sidecar-Session": "sec-o"},
                organization=org,
                project=project,
            ) as o,
        ):
            tools: Any = [WEATHER_TOOL_ANTHROPIC]
            await a.messages.create(model="claude-test", max_tokens=64, messages=USER, tools=tools)
            await a.messages.create(model="claude-test", max_tokens=64, messages=USER, tools=tools)
            await o.chat.completions.create(model="gpt-test", messages=USER, tools=[WEATHER_TOOL_CHAT])
            with pytest.raises(openai.AuthenticationError):
                await o.responses.create(model="gpt-test", input="x")
            with pytest.raises(anthropic.APIStatusError):
                async with a.messages.stream(model="claude-test", max_tokens=64, messages=USER) as stream:
                    async for _ in stream:
                        pass
            await a.models.list()
        await running.stop()  # flushes the rejection log
    finally:
        handler.flush()  # every line the log writer holds
        sidecar_logger.removeHandler(caplog.handler)
        sidecar_logger.removeHandler(handler)
        sidecar_logger.propagate = True
        sidecar_logger.setLevel(logging.NOTSET)
    rejection_log = (tmp_path / "rejections.jsonl").read_text()
    captured = capfd.readouterr()
    ours = [r for r in caplog.records if r.name.split(".")[0] in ("sidecar", "aiohttp")]  # not the SDKs' logs
    logged = "\n".join(r.getMessage() + repr(r.__dict__) for r in ours)
    assert rejection_log.count("\n") >= 3, "the run must have produced rejection records"
    assert "ended early" in logged and "repair round" in logged, "the run must have produced warnings"
    assert captured.err
    for text in (rejection_log, captured.out, captured.err, logged):
        for secret in secrets:
            assert secret not in text
    # Yet every one of them did travel upstream.
    travelled = "\n".join(repr(r.headers) for r in model.requests)
    assert all(secret in travelled for secret in secrets[:4])


# -- 3. only the configured upstreams --------------------------------------------------------


async def test_requests_cannot_choose_the_destination(model, start_sidecar, decoy):
    where, seen = decoy
    # Unknown paths are refused by default (docs/coverage.md): forwarded here, to see where they go.
    running = await start_sidecar(
        anthropic_upstream=model.url + "/prefix", coverage={"unparsed": {"unknown": "forward"}}
    )
    sent = "anthropic-version: 2023-06-01\n"
    cases = [
        (f"GET http://{where}/x HTTP/1.1\nHost: {where}\n", "/prefix/x"),
        (f"GET http://{where}//{where}/x?k=v HTTP/1.1\nHost: {where}\n", f"/prefix/{where}/x"),
        (f"GET /x HTTP/1.1\nHost: {where}\n", "/prefix/x"),
        (
            f"GET /x HTTP/1.1\nHost: s\nX-Forwarded-Host: {where}\nForwarded: host={where}\n"
            f"X-Forwarded-Port: {where.rsplit(':', 1)[1]}\nX-Original-URL: http://{where}/x\n",
            "/prefix/x",
        ),
        (f"GET //{where}/x HTTP/1.1\nHost: s\n", f"/prefix/{where}/x"),
        ("GET /..//x HTTP/1.1\nHost: s\n", "/prefix/x"),
        ("GET /../../x HTTP/1.1\nHost: s\n", "/prefix/x"),
        ("GET /%2e%2e/%2E%2E/x HTTP/1.1\nHost: s\n", "/prefix/x"),
        (f"GET /..//{where}/x HTTP/1.1\nHost: s\n", f"/prefix/{where}/x"),
    ]
    for head, path in cases:
        model.requests.clear()
        status, _, _ = await raw_http(running.proxy_url, head + sent)
        assert status == 404  # the scripted model's own answer for an unknown path
        assert [r.path for r in model.requests] == [path], head
    status, _, _ = await raw_http(running.proxy_url, f"CONNECT {where} HTTP/1.1\nHost: {where}\n" + sent)
    assert seen == []


# -- 4. body limit ---------------------------------------------------------------------------


async def test_body_limit_with_sdks(model, start_sidecar):
    running = await start_sidecar(max_body_bytes=2048)
    big = [{"role": "user", "content": "x" * 4000}]
    async with anthropic_client(running.proxy_url) as a, openai_client(running.proxy_url) as o:
        with pytest.raises(anthropic.APIStatusError) as a_error:
            await a.messages.create(model="claude-test", max_tokens=16, messages=big)
        with pytest.raises(openai.APIStatusError) as c_error:
            await o.chat.completions.create(model="gpt-test", messages=big)
        with pytest.raises(openai.APIStatusError) as r_error:
            await o.responses.create(model="gpt-test", input="x" * 4000)
    assert a_error.value.status_code == 413
    assert a_error.value.body["error"]["type"] == "request_too_large"
    for error in (c_error.value, r_error.value):
        assert error.status_code == 413
        assert error.body["type"] == "invalid_request_error"
        assert "2048" in error.body["message"]
    assert model.requests == []


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_body_limit_on_the_wire(model, start_sidecar, chunked):
    running = await start_sidecar(max_body_bytes=2048)

    async def post(path: str, body: bytes) -> tuple[int, bytes]:
        async def pieces() -> AsyncIterator[bytes]:
            for i in range(0, len(body), 500):
                yield body[i : i + 500]

        data: Any = pieces() if chunked else body
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                running.proxy_url + path, data=data, headers={**ANTHROPIC_HEADERS, "content-type": "application/json"}
            ) as response,
        ):
            return response.status, await response.read()

    def padded(size: int) -> bytes:
        body = orjson.dumps({**MESSAGES_BODY, "pad": ""})
        return body.replace(b'"pad":""', b'"pad":"' + b"x" * (size - len(body)) + b'"')

    for path in ("/v1/messages", "/v1/messages/count_tokens", "/anthropic/v1/files"):
        status, payload = await post(path, padded(2049))
        assert status == 413
        assert orjson.loads(payload)["error"]["type"] == "request_too_large"
    assert model.requests == []
    model.add_turns(Turn(text="fits"))
    status, payload = await post("/v1/messages", padded(2048))
    assert status == 200 and b"fits" in payload
    assert model.requests[0].body == padded(2048)


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_compressed_request_bodies_are_read_and_forwarded_plain(model, sidecar, path):
    """A gzip request body is decoded on arrival: model requests are checked like any other,
    and what goes upstream is the plain body without a stale Content-Encoding."""
    plain = orjson.dumps({**MESSAGES_BODY, "tools": [WEATHER_TOOL_ANTHROPIC]})
    headers = {**ANTHROPIC_HEADERS, "content-type": "application/json", "content-encoding": "gzip"}
    model.add_turns([Turn(tool_calls=[BAD_DAYS]), Turn(text="repaired")])
    async with (
        aiohttp.ClientSession() as session,
        session.post(sidecar.proxy_url + path, data=gzip.compress(plain), headers=headers) as response,
    ):
        assert response.status == 200
    first = model.requests[0]
    assert first.body == plain
    assert "content-encoding" not in first.headers
    if path == "/v1/messages":  # the refused call was repaired: the sidecar read the body
        assert len(model.model_requests) == 2


# -- 5. compressed upstream bodies -----------------------------------------------------------

TOOLS = {
    "anthropic": ("/v1/messages", {**MESSAGES_BODY, "tools": [WEATHER_TOOL_ANTHROPIC]}),
    "openai_chat": ("/v1/chat/completions", {**CHAT_BODY, "tools": [WEATHER_TOOL_CHAT]}),
    "openai_responses": ("/v1/responses", {**RESPONSES_BODY, "tools": [WEATHER_TOOL_RESPONSES]}),
}


def _arguments(protocol: str, body: dict[str, Any]) -> list[Any]:
    if protocol == "anthropic":
        return [b["input"] for b in body["content"] if b["type"] == "tool_use"]
    if protocol == "openai_chat":
        return [json.loads(c["function"]["arguments"]) for c in body["choices"][0]["message"]["tool_calls"]]
    return [json.loads(i["arguments"]) for i in body["output"] if i["type"] == "function_call"]


@pytest.mark.parametrize("protocol", list(TOOLS))
async def test_gzip_upstream(model, sidecar, protocol):
    path, body = TOOLS[protocol]
    model.add_turns(Turn(tool_calls=[BAD_DAYS], gzip=True), Turn(tool_calls=[GOOD_DAYS], gzip=True))
    headers = ANTHROPIC_HEADERS if protocol == "anthropic" else OPENAI_HEADERS
    status, response_headers, payload = await raw_http(
        sidecar.proxy_url,
        f"POST {path} HTTP/1.1\nHost: s\nContent-Type: application/json\nAccept-Encoding: gzip\n"
        + "".join(f"{k}: {v}\n" for k, v in headers.items())
        + f"Content-Length: {len(orjson.dumps(body))}\n",
        orjson.dumps(body),
    )
    assert status == 200
    assert "content-encoding" not in _names(response_headers)
    lengths = [v for k, v in response_headers if k.lower() == "content-length"]
    assert lengths in ([], [str(len(payload))])
    # Read through the gzip: the refused call was seen and repaired.
    assert _arguments(protocol, orjson.loads(payload)) == [GOOD_DAYS.arguments]
    assert len(model.requests) == 2
    assert model.requests[0].headers["accept-encoding"] == "gzip, deflate"


async def test_gzip_passthrough_and_errors(model, sidecar):
    model.add_turns(Turn(error=UpstreamError(529), gzip=True), Turn(error=UpstreamError(400), gzip=True))
    async with anthropic_client(sidecar.proxy_url) as a, openai_client(sidecar.proxy_url) as o:
        with pytest.raises(anthropic.APIStatusError) as a_error:
            await a.messages.create(model="claude-test", max_tokens=16, messages=USER)
        with pytest.raises(openai.BadRequestError):
            await o.chat.completions.create(model="gpt-test", messages=USER)
    assert a_error.value.status_code == 529
    assert a_error.value.body["error"]["type"] == "overloaded_error"
    # And what the scripted model sent was really compressed.
    model.add_turns(Turn(text="zipped", gzip=True))
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.post(model.url + "/v1/messages", json=MESSAGES_BODY, headers=ANTHROPIC_HEADERS) as response,
    ):
        assert response.headers["Content-Encoding"] == "gzip"
        assert b"zipped" in gzip.decompress(await response.read())


# -- 6. streaming, event by event ------------------------------------------------------------

STREAMS = {
    "anthropic": ("/v1/messages", {**MESSAGES_BODY, "stream": True}, ANTHROPIC_HEADERS, b"text_delta"),
    "openai_chat": ("/v1/chat/completions", {**CHAT_BODY, "stream": True}, OPENAI_HEADERS, b'"content":"'),
    "openai_responses": ("/v1/responses", {**RESPONSES_BODY, "stream": True}, OPENAI_HEADERS, b"output_text.delta"),
}


@pytest.mark.parametrize("protocol", list(STREAMS))
async def test_the_response_head_never_waits_for_the_first_event(model, sidecar, protocol):
    """The agent's response head goes out with the events read together with the upstream's
    head (one send); when none came with it, at once: never after the model's time to its
    first token, which an agent's client would wait out with no answer at all."""
    path, body, headers, marker = STREAMS[protocol]
    model.add_turns(Turn(text="words after a long think", first_event_delay_s=2))
    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        async with asyncio.timeout(1):  # the head, well before the first event
            response = await session.post(sidecar.proxy_url + path, json=body, headers=headers)
        async with response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            rest = await response.read()
    assert marker in rest
    assert time.perf_counter() - started >= 2  # the events did wait for the model


@pytest.mark.parametrize("protocol", list(STREAMS))
async def test_stream_is_forwarded_as_it_arrives(model, sidecar, protocol):
    path, body, headers, marker = STREAMS[protocol]
    model.add_turns(Turn(text="one two three four five six seven eight nine", delay_s=0.15))
    arrivals: list[tuple[float, bytes]] = []
    started = time.perf_counter()
    async with (
        aiohttp.ClientSession() as session,
        session.post(sidecar.proxy_url + path, json=body, headers=headers) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for chunk in response.content.iter_any():
            arrivals.append((time.perf_counter() - started, chunk))
    total = arrivals[-1][0]
    first_text = next(at for at, chunk in arrivals if marker in chunk)
    assert len(arrivals) >= 5  # many writes, not one buffered body
    assert first_text < total * 0.5, (first_text, total)
    # Chunks keep arriving throughout the stream, not in a burst at the end.
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
    assert sum(1 for gap in gaps if gap > 0.05) >= 5
