"""ScriptedModel: a real HTTP server that plays a script in the provider's own wire format.

It stands in for the model provider in tests, in `sidecar demo` and in the benchmarks, so a
proxy can be exercised end to end with no network. Endpoints are matched by path suffix, so
an upstream URL with a path prefix (`http://host:port/anthropic`) works too.
"""

from __future__ import annotations

import asyncio
import gzip as gzip_codec
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any

import orjson
from aiohttp import web

from sidecar.scripted.anthropic import AnthropicFormat
from sidecar.scripted.openai_chat import ChatFormat, OpenAIFormat, openai_error_body
from sidecar.scripted.openai_responses import ResponsesFormat
from sidecar.scripted.script import RecordedRequest, Turn, UpstreamError
from sidecar.scripted.wire import HttpReply, Ids, WireFormat, plan_reply, stream_events

Responder = Callable[[RecordedRequest], Turn | Awaitable[Turn]]

EXHAUSTED_TEXT = "(script exhausted)"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
CONVERSATIONS_PATH = "/v1/conversations"
MODELS_PATH = "/v1/models"
# GET /v1/responses/{id} and GET /v1/responses/{id}/input_items
_RESPONSE_PATH = re.compile(r"/v1/responses/(resp_[A-Za-z0-9]+)(/input_items|/cancel)?$")
# Generous: tests send big histories, and the real APIs accept tens of megabytes.
MAX_BODY = 64 * 1024 * 1024


class ScriptedModel:
    """A scripted stand-in for the Anthropic and OpenAI APIs.

    Turns are consumed in order, one per model request, whatever the protocol; a `responder`
    callable (sync or async) replaces the list for dynamic scripts. Pairing checks run first
    and never consume a turn. With `loop=True` the script cycles; otherwise an exhausted
    script answers "(script exhausted)" and counts it in `exhausted_count`.
    """

    def __init__(
        self,
        turns: Iterable[Turn] = (),
        *,
        responder: Responder | None = None,
        loop: bool = False,
        seed: int | None = None,
        pad_json: bool = True,
    ) -> None:
        self._script: list[Turn] = list(turns)
        self._cursor = 0
        self.responder = responder
        self.loop = loop
        self.requests: list[RecordedRequest] = []
        self.exhausted_count = 0
        # Model requests the client abandoned before the reply was complete (the handler was
        # cancelled or a write failed): how a test sees that a proxy cancelled upstream.
        self.disconnects = 0
        self.url = ""
        ids = self._ids = Ids(seed)
        self._anthropic = AnthropicFormat(ids, pad_json=pad_json)
        self._openai = ChatFormat(ids)  # also shapes OpenAI 404s and model lists
        self._responses = ResponsesFormat(ids)  # also holds the conversations
        self._formats: list[WireFormat] = [self._anthropic, self._openai, self._responses]
        self._runner: web.AppRunner | None = None
        self.app = web.Application(client_max_size=MAX_BODY)
        self.app.router.add_route("*", "/{tail:.*}", self._handle)

    # ---- script ----------------------------------------------------------------------------

    def add_turns(self, *turns: Turn | Iterable[Turn]) -> None:
        """Append turns (each argument a Turn or an iterable of Turns)."""
        for item in turns:
            self._script.extend([item] if isinstance(item, Turn) else item)

    def reset(self, seed: int | None = None) -> None:
        """Clear the script, the recorded requests and the stored Responses state.

        With a seed, ids restart from it: the same script then yields the same bytes.
        """
        if seed is not None:
            self._ids.rng.seed(seed)
        self._script.clear()
        self._cursor = 0
        self.requests.clear()
        self.exhausted_count = 0
        self.disconnects = 0
        for fmt in self._formats:
            fmt.reset()

    @property
    def remaining(self) -> int:
        """Turns not yet played (always the full script length when looping)."""
        return len(self._script) - self._cursor

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """Requests to the three model endpoints (those that consume or check turns)."""
        return [r for r in self.requests if r.protocol is not None]

    async def _next_turn(self, recorded: RecordedRequest) -> Turn:
        if self.responder is not None:
            result = self.responder(recorded)
            return await result if inspect.isawaitable(result) else result
        if self._cursor >= len(self._script) and self.loop and self._script:
            self._cursor = 0
        if self._cursor >= len(self._script):
            self.exhausted_count += 1
            return Turn(text=EXHAUSTED_TEXT)
        turn = self._script[self._cursor]
        self._cursor += 1
        return turn

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on host:port (0 picks a free port) and return the base URL."""
        if self._runner is not None:
            return self.url
        runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        self._runner = runner
        bound_port = runner.addresses[0][1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound_port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedModel:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # ---- HTTP ------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        # By the path's shape, with or without /v1 (POST /messages, Azure's deployment paths).
        fmt = next((f for f in self._formats if request.path.endswith(f.path.removeprefix("/v1"))), None)
        if request.method != "POST":
            fmt = None
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = None
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            json=parsed,
            protocol=fmt.protocol if fmt else None,
            query=dict(request.query),
        )
        self.requests.append(recorded)
        anthropic = "anthropic-version" in recorded.headers
        if request.method == "POST" and request.path.endswith(COUNT_TOKENS_PATH):
            return self._json(self._anthropic, HttpReply(200, {"input_tokens": _tokens(body)}))
        if request.method == "POST" and request.path.endswith(CONVERSATIONS_PATH):
            return self._json(self._responses, HttpReply(200, self._responses.create_conversation(parsed)))
        if fmt is not None:
            try:
                return await self._model_request(request, fmt, recorded)
            except asyncio.CancelledError:
                self.disconnects += 1
                raise
        stored = _RESPONSE_PATH.search(request.path)
        if stored is not None and stored.group(2) == "/cancel" and request.method == "POST":
            return self._json(self._responses, self._responses.cancel(stored.group(1)))
        if stored is not None and request.method == "GET" and stored.group(2) != "/cancel":
            return await self._stored_response(request, stored.group(1), stored.group(2) is not None)
        if request.method == "GET" and request.path.endswith(MODELS_PATH):
            return self._json(self._anthropic if anthropic else self._openai, HttpReply(200, _model_list(anthropic)))
        return self._not_found(recorded, anthropic)

    async def _model_request(
        self, request: web.Request, fmt: WireFormat, recorded: RecordedRequest
    ) -> web.StreamResponse:
        body = recorded.json
        if not isinstance(body, dict):
            return self._json(fmt, fmt.invalid_request("We could not parse the JSON body of your request."))
        rejection = fmt.check_headers(body, recorded.headers) or fmt.check(body)
        if rejection is not None:
            return self._json(fmt, rejection)
        turn = await self._next_turn(recorded)
        if turn.first_byte_delay_s:
            await asyncio.sleep(turn.first_byte_delay_s)
        streaming = bool(body.get("stream"))
        if turn.error is not None and not (streaming and turn.stream_error_after is not None):
            return self._json(fmt, fmt.http_error(turn.error, fmt.request_id()), turn.gzip)
        if turn.stream_error_after is not None and not streaming:
            return self._json(fmt, fmt.http_error(UpstreamError(), fmt.request_id()), turn.gzip)
        try:
            reply = plan_reply(fmt, turn, body, len(recorded.body))
        except ValueError as exc:  # a turn no real API could answer with: say so in a 400
            return self._json(fmt, fmt.invalid_request(f"scripted model: {exc}"))
        if not streaming:
            fmt.remember(reply)
            answer = fmt.body(reply)
            if fmt is self._responses and body.get("background") is True:
                answer = self._responses.queued(reply)
            return self._json(fmt, HttpReply(200, answer), turn.gzip, reply.request_id)
        events = stream_events(fmt, reply)
        if turn.stream_error_after is not None:
            cut = min(max(0, turn.stream_error_after), len(events) - 1)
            events = events[:cut] + fmt.stream_error(reply, turn.error or UpstreamError())
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                fmt.request_id_header: reply.request_id,
            }
        )
        try:
            await response.prepare(request)
            for seq, event in enumerate(events):
                if seq and turn.delay_s:
                    await asyncio.sleep(turn.delay_s)
                elif not seq and turn.first_event_delay_s:
                    await asyncio.sleep(turn.first_event_delay_s)
                await response.write(fmt.encode(event, seq))
            await response.write_eof()
        except ConnectionResetError:
            self.disconnects += 1
            return response  # the client went away mid-stream: nothing to finish
        if turn.stream_error_after is None:
            fmt.remember(reply)
        return response

    async def _stored_response(self, request: web.Request, response_id: str, items: bool) -> web.StreamResponse:
        """GET /v1/responses/{id} (and `?stream=true&starting_after=N`), GET …/input_items."""
        fmt = self._responses
        if items:
            return self._json(fmt, fmt.input_items(response_id))
        if request.query.get("stream") != "true" or response_id not in fmt.replies:
            return self._json(fmt, fmt.retrieve(response_id))
        after = int(request.query.get("starting_after", "-1"))
        events = stream_events(fmt, fmt.replies[response_id])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        for seq, event in enumerate(events):
            if seq > after:
                await response.write(fmt.encode(event, seq))
        await response.write_eof()
        return response

    def _json(
        self, fmt: WireFormat, reply: HttpReply, gzip: bool = False, request_id: str | None = None
    ) -> web.Response:
        option = orjson.OPT_INDENT_2 if fmt.pretty_body else 0
        data = orjson.dumps(reply.body, option=option)
        rid = request_id or str(reply.body.get("request_id") or fmt.request_id())
        headers = {"Content-Type": "application/json", fmt.request_id_header: rid, **reply.headers}
        if gzip:
            data = gzip_codec.compress(data)
            headers["Content-Encoding"] = "gzip"
        return web.Response(status=reply.status, body=data, headers=headers)

    def _not_found(self, recorded: RecordedRequest, anthropic: bool) -> web.Response:
        if anthropic:
            fmt: WireFormat = self._anthropic
            rid = fmt.request_id()
            body = fmt.error_body(404, "not_found_error", "Not Found", None, None, rid)
        else:
            fmt = self._openai
            body = openai_error_body(
                f"Invalid URL ({recorded.method} {recorded.path})", "invalid_request_error", None, None
            )
        return self._json(fmt, HttpReply(404, body))


def _tokens(body: bytes) -> int:
    """Deterministic token estimate: a quarter of the request bytes."""
    return max(1, len(body) // 4)


def _model_list(anthropic: bool) -> dict[str, Any]:
    if anthropic:
        data = [
            {
                "type": "model",
                "id": m,
                "display_name": m.replace("-", " ").title(),
                "created_at": "2025-09-29T00:00:00Z",
            }
            for m in AnthropicFormat.models
        ]
        return {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
    return {
        "object": "list",
        "data": [
            {"id": m, "object": "model", "created": 1715367049, "owned_by": "system"} for m in OpenAIFormat.models
        ],
    }
