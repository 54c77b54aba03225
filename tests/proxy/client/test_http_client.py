"""The upstream client (sidecar/proxy/http_client.py) against servers that answer exact bytes:
what it writes, how it frames and decodes what it reads, when it keeps a connection, and how
each way an answer can fail reaches the caller (as the proxy's UpstreamError, with its cause)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
import trustme
from yarl import URL

from sidecar.exchange.runner import UpstreamCause, UpstreamError
from sidecar.proxy import http_client
from sidecar.proxy.http_client import ClientPool
from sidecar.proxy.upstream import upstream_error

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Server:
    url: URL
    connections: int = 0
    closed: int = 0  # connections the client closed (an end of file where a request would start)
    heads: list[bytes] = field(default_factory=list)  # each request's head, as written


async def read_request(reader: asyncio.StreamReader, server: Server) -> bytes:
    """One request (head and Content-Length body) off the connection; b"" when it closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return b""
    server.heads.append(head)
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


@asynccontextmanager
async def raw_server(answer: Callable[[int], bytes | Script]) -> AsyncIterator[Server]:
    """A server answering the n-th request (0-based, across connections) with `answer(n)`:
    bytes written then the connection kept, or a script that runs on the connection."""
    server = Server(URL("http://127.0.0.1"))
    served = 0

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        server.connections += 1
        try:
            while await read_request(reader, server):
                reply = answer(served)
                served += 1
                if isinstance(reply, bytes):
                    writer.write(reply)
                    await writer.drain()
                else:
                    await reply(reader, writer)
                    return
            server.closed += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(connected, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    server.url = URL(f"http://127.0.0.1:{port}/v1/messages")
    try:
        yield server
    finally:
        listening.close()


def ok(body: bytes = b"{}", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


@asynccontextmanager
async def pool(read_timeout_s: float = 5.0) -> AsyncIterator[ClientPool]:
    client = ClientPool(read_timeout_s, 5.0, failed=upstream_error)
    try:
        yield client
    finally:
        await client.close()


async def fetch(client: ClientPool, url: URL, method: str = "POST", body: bytes = b"{}") -> tuple[int, bytes]:
    async with client.opened(method, url, {"Content-Type": "application/json"}, body) as response:
        return response.status, await response.read()


async def failure(client: ClientPool, url: URL, method: str = "POST") -> UpstreamError:
    with pytest.raises(UpstreamError) as raised:
        await fetch(client, url, method)
    return raised.value


# -- what is written -------------------------------------------------------------------------


async def test_the_request_head_carries_host_length_and_the_callers_headers() -> None:
    async with (
        raw_server(lambda _n: ok()) as server,
        pool() as client,
        client.opened("POST", URL(f"{server.url}?q=1%202", encoded=True), {"X-Api-Key": "k"}, b'{"a": 1}') as r,
    ):
        assert (r.status, r.reason, await r.read()) == (200, "OK", b"{}")
    head = server.heads[0].decode()
    lines = head.split("\r\n")
    assert lines[0] == "POST /v1/messages?q=1%202 HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.url.port}" in lines
    assert "X-Api-Key: k" in lines and "Content-Length: 8" in lines and "Accept: */*" in lines


async def test_a_get_without_a_body_has_no_length_and_a_given_accept_is_kept() -> None:
    async with (
        raw_server(lambda _n: ok()) as server,
        pool() as client,
        client.opened("GET", server.url, {"Accept": "text/event-stream"}, b"") as r,
    ):
        await r.read()
    lines = server.heads[0].decode().split("\r\n")
    assert not any(line.lower().startswith("content-length") for line in lines)
    assert [line for line in lines if line.lower().startswith("accept")] == ["Accept: text/event-stream"]


@pytest.mark.parametrize("name, value", [("X-A", "v\r\nInjected: 1"), ("X-A", "v\nx"), ("X\r\nB", "v")])
async def test_a_header_that_would_split_the_head_is_never_written(name: str, value: str) -> None:
    async with raw_server(lambda _n: ok()) as server, pool() as client:
        with pytest.raises(UpstreamError) as raised:
            async with client.opened("POST", server.url, {name: value}, b"{}"):
                pass
    assert raised.value.cause is UpstreamCause.PROTOCOL and raised.value.status == 502
    assert server.heads == []


async def test_sent_is_awaited_once_the_request_is_written_and_before_its_answer_is_read() -> None:
    """The server answers only once `sent` says so, and `sent` waits until the server has the
    whole request: awaited before the write, or after the answer is read, this never ends."""
    received, answer = asyncio.Event(), asyncio.Event()
    calls: list[int] = []

    async def on_request(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.set()
        await answer.wait()
        writer.write(ok(b"answered"))
        await writer.drain()

    async def sent() -> None:
        calls.append(len(calls))
        await asyncio.wait_for(received.wait(), 5)  # the whole request reached the server
        answer.set()

    async with (
        raw_server(lambda _n: on_request) as server,
        pool() as client,
        client.opened("POST", server.url, {}, b'{"a": 1}', sent) as response,
    ):
        assert (response.status, await response.read()) == (200, b"answered")
    assert calls == [0]


async def test_sent_is_awaited_once_when_a_lost_request_is_sent_again() -> None:
    answers = {0: ok(b"first"), 1: _hang_up, 2: ok(b"again")}
    calls: list[str] = []

    async def sent() -> None:
        calls.append("sent")

    async with raw_server(lambda n: answers[n]) as server, pool() as client:
        assert await fetch(client, server.url, method="GET", body=b"") == (200, b"first")
        async with client.opened("GET", server.url, {}, b"", sent) as response:
            assert await response.read() == b"again"
    assert len(server.heads) == 3 and calls == ["sent"]


async def test_sent_is_not_awaited_when_nothing_could_be_written() -> None:
    calls: list[str] = []

    async def sent() -> None:
        calls.append("sent")

    async with pool() as client:
        with pytest.raises(UpstreamError):
            async with client.opened("POST", URL("http://127.0.0.1:9/v1/messages"), {}, b"{}", sent):
                pass
    assert calls == []


# -- connections kept and dropped --------------------------------------------------------------


async def test_one_connection_serves_requests_in_turn() -> None:
    async with raw_server(lambda n: ok(b'{"n": %d}' % n)) as server, pool() as client:
        answers = [await fetch(client, server.url) for _ in range(5)]
    assert answers == [(200, b'{"n": %d}' % n) for n in range(5)]
    assert server.connections == 1


async def test_connection_close_is_honoured_and_the_next_request_opens_another() -> None:
    async with raw_server(lambda n: ok(b"%d" % n, b"Connection: close\r\n")) as server, pool() as client:
        assert await fetch(client, server.url) == (200, b"0")
        assert await fetch(client, server.url) == (200, b"1")
    assert server.connections == 2


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def answer_then_close(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(ok(b"first"))  # kept alive by its framing, then closed by the server
        await writer.drain()

    async with raw_server(lambda n: answer_then_close if n == 0 else ok(b"second")) as server, pool() as client:
        assert await fetch(client, server.url) == (200, b"first")
        await asyncio.sleep(0.1)  # the close arrives while the connection is idle
        assert await fetch(client, server.url) == (200, b"second")
    assert server.connections == 2


async def test_an_idle_connection_past_the_keepalive_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_client, "KEEPALIVE_S", 0.05)
    async with raw_server(lambda _n: ok()) as server, pool() as client:
        await fetch(client, server.url)
        await asyncio.sleep(0.1)
        await fetch(client, server.url)
    assert server.connections == 2


async def test_an_idle_connection_is_closed_after_the_keepalive_without_another_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_client, "KEEPALIVE_S", 0.1)
    async with raw_server(lambda _n: ok()) as server, pool() as client:
        await fetch(client, server.url)
        await asyncio.sleep(0.05)
        assert server.closed == 0  # still kept
        await asyncio.sleep(0.3)
        assert server.closed == 1  # closed by the client, with no request to find it stale
        assert await fetch(client, server.url) == (200, b"{}")
    assert server.connections == 2


async def test_a_reply_released_unread_closes_its_connection() -> None:
    async with raw_server(lambda _n: ok(b"x" * 100_000)) as server, pool() as client:
        response = await client.request("POST", server.url, {}, b"{}")
        assert response.status == 200
        response.release()  # without reading the body: the connection cannot serve another
        assert await fetch(client, server.url) == (200, b"x" * 100_000)
        assert await fetch(client, server.url) == (200, b"x" * 100_000)
    assert server.connections == 2  # the second connection, read whole, served the third


async def test_bytes_sent_after_a_reply_end_its_connection() -> None:
    async with (
        raw_server(lambda n: ok(b"%d" % n) + (b"HTTP/1.1 200 OK\r\n" if n == 0 else b"")) as server,
        pool() as client,
    ):
        assert await fetch(client, server.url) == (200, b"0")
        assert await fetch(client, server.url) == (200, b"1")
    assert server.connections == 2


async def test_a_reader_that_does_not_read_pauses_the_socket() -> None:
    """Memory is bounded by the client, not by what the upstream sends: while nobody reads, at
    most the high-water mark (and what the kernel buffers) leaves the server."""
    size, piece = 64 * 1024 * 1024, b"y" * 65536
    sent = [0]

    async def flood(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        while sent[0] < size:
            writer.write(piece)
            await writer.drain()
            sent[0] += len(piece)

    async with raw_server(lambda _n: flood) as server, pool() as client:
        response = await client.request("POST", server.url, {}, b"{}")
        try:
            await asyncio.sleep(0.5)
            held = sent[0]
            received = 0
            while data := await response.chunk():
                received += len(data)
        finally:
            response.release()
    assert received == size
    assert held < size // 4, f"the server sent {held} bytes to a reader that read none"


async def _hang_up(_reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
    return  # the request was read; the connection closes without an answer


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_an_idempotent_request_lost_on_a_kept_connection_is_sent_once_more(method: str) -> None:
    answers = {0: ok(b"first"), 1: _hang_up, 2: ok(b"again")}
    async with raw_server(lambda n: answers[n]) as server, pool() as client:
        assert await fetch(client, server.url, method=method, body=b"") == (200, b"first")
        assert await fetch(client, server.url, method=method, body=b"") == (200, b"again")
    assert server.connections == 2 and len(server.heads) == 3


async def test_a_post_lost_on_a_kept_connection_is_never_sent_twice() -> None:
    answers = {0: ok(b"first"), 1: _hang_up, 2: ok(b"twice")}
    async with raw_server(lambda n: answers[n]) as server, pool() as client:
        assert await fetch(client, server.url) == (200, b"first")
        assert (await failure(client, server.url)).cause is UpstreamCause.DISCONNECTED
    assert len(server.heads) == 2  # the model request went out once


async def test_a_get_lost_on_a_new_connection_is_not_sent_again() -> None:
    async with raw_server(lambda n: _hang_up if n == 0 else ok()) as server, pool() as client:
        assert (await failure(client, server.url, method="GET")).cause is UpstreamCause.DISCONNECTED
    assert len(server.heads) == 1


async def test_a_get_whose_answer_began_is_not_sent_again() -> None:
    async def half_head(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")

    answers = {0: ok(b"first"), 1: half_head, 2: ok(b"again")}
    async with raw_server(lambda n: answers[n]) as server, pool() as client:
        assert await fetch(client, server.url, method="GET", body=b"") == (200, b"first")
        assert (await failure(client, server.url, method="GET")).cause is UpstreamCause.DISCONNECTED
    assert len(server.heads) == 2


# -- framing ----------------------------------------------------------------------------------


async def test_a_chunked_reply_is_read_whole() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    async with raw_server(lambda _n: chunked) as server, pool() as client:
        assert await fetch(client, server.url) == (200, b"abcde")
        assert await fetch(client, server.url) == (200, b"abcde")
    assert server.connections == 1


async def test_a_body_framed_by_the_connections_end_is_read_whole() -> None:
    async def until_close(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of ")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"it")

    async with raw_server(lambda _n: until_close) as server, pool() as client:
        assert await fetch(client, server.url) == (200, b"all of it")


async def test_a_head_answer_has_no_body_even_with_a_length() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
    async with raw_server(lambda _n: answer) as server, pool() as client:
        assert await asyncio.wait_for(fetch(client, server.url, method="HEAD", body=b""), 5) == (200, b"")


@pytest.mark.parametrize("status", [204, 304])
async def test_answers_without_a_body_by_their_status(status: int) -> None:
    answer = b"HTTP/1.1 %d X\r\n\r\n" % status
    async with raw_server(lambda _n: answer) as server, pool() as client:
        assert await fetch(client, server.url) == (status, b"")
        assert await fetch(client, server.url) == (status, b"")
    assert server.connections == 1


async def test_an_interim_answer_is_skipped() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + ok(b"done")
    async with (
        raw_server(lambda _n: answer) as server,
        pool() as client,
        client.opened("POST", server.url, {}, b"{}") as response,
    ):
        assert (response.status, await response.read()) == (200, b"done")
        assert "Link" not in response.headers


async def test_repeated_headers_are_kept_and_values_read_as_sent() -> None:
    answer = (
        b"HTTP/1.1 429 Too Many\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
        b"X-Name: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n"
    )
    async with (
        raw_server(lambda _n: answer) as server,
        pool() as client,
        client.opened("POST", server.url, {}, b"{}") as response,
    ):
        assert (response.status, response.reason) == (429, "Too Many")
        assert response.headers.getall("set-cookie") == ["a=1", "b=2"]  # type: ignore[attr-defined]
        assert response.headers["x-name"] == "café"


# -- decoding ---------------------------------------------------------------------------------

PLAIN = b'{"text": "%s"}' % (b"abc" * 5000)


@pytest.mark.parametrize(
    "encoding, encoded",
    [
        ("gzip", gzip.compress(PLAIN)),
        ("x-gzip", gzip.compress(PLAIN)),
        ("deflate", zlib.compress(PLAIN)),
        ("deflate", zlib.compress(PLAIN)[2:-4]),  # raw deflate, as some servers send it
        ("identity", PLAIN),
    ],
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw", "identity"],
)
async def test_encoded_bodies_are_decoded(encoding: str, encoded: bytes) -> None:
    answer = ok(encoded, b"Content-Encoding: %s\r\n" % encoding.encode())
    async with raw_server(lambda _n: answer) as server, pool() as client:
        assert await fetch(client, server.url) == (200, PLAIN)


async def test_a_small_body_that_decodes_to_a_large_one_is_read_in_bounded_pieces() -> None:
    huge = b"0" * (20 * 1024 * 1024)
    answer = ok(gzip.compress(huge), b"Content-Encoding: gzip\r\n")
    async with (
        raw_server(lambda _n: answer) as server,
        pool() as client,
        client.opened("POST", server.url, {}, b"{}") as response,
    ):
        pieces = []
        while piece := await response.chunk():
            pieces.append(len(piece))
    assert sum(pieces) == len(huge)
    assert max(pieces) <= http_client.DECODED_PIECE


@pytest.mark.parametrize(
    "method, answer",
    [
        ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 120\r\n\r\n"),
        ("POST", b"HTTP/1.1 204 No Content\r\nContent-Encoding: gzip\r\n\r\n"),
        ("POST", b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nContent-Length: 0\r\n\r\n"),
    ],
    ids=["head", "204", "empty-200"],
)
async def test_an_encoded_answer_without_a_body_is_empty_not_cut(method: str, answer: bytes) -> None:
    async with raw_server(lambda _n: answer) as server, pool() as client:
        status, body = await fetch(client, server.url, method=method, body=b"")
    assert body == b"" and status in (200, 204)


@pytest.mark.parametrize("encoding", [b"br", b"zstd", b"gzip, br"])
async def test_an_encoding_the_sidecar_cannot_decode_is_refused(encoding: bytes) -> None:
    answer = ok(b"\x00\x01\x02", b"Content-Encoding: " + encoding + b"\r\n")
    async with raw_server(lambda _n: answer) as server, pool() as client:
        error = await failure(client, server.url)
    assert error.cause is UpstreamCause.PROTOCOL and "Content-Encoding" in error.message


@pytest.mark.parametrize("cut", ["corrupt", "truncated"])
async def test_a_body_that_does_not_decode_is_refused(cut: str) -> None:
    whole = gzip.compress(PLAIN)
    body = whole[:10] + b"\xff" * 40 + whole[50:] if cut == "corrupt" else whole[: len(whole) // 2]
    answer = ok(body, b"Content-Encoding: gzip\r\n")
    async with raw_server(lambda _n: answer) as server, pool() as client:
        error = await failure(client, server.url)
    assert error.cause is UpstreamCause.PROTOCOL


# -- failures ---------------------------------------------------------------------------------


async def test_a_body_cut_short_is_a_disconnect_not_an_end() -> None:
    async def short(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 50)

    async with raw_server(lambda _n: short) as server, pool() as client:
        error = await failure(client, server.url)
    assert (error.status, error.cause) == (502, UpstreamCause.DISCONNECTED)
    assert error.message.startswith(f"upstream {server.url.origin()} closed the connection")


async def test_a_chunked_body_cut_short_is_a_disconnect() -> None:
    async def short(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")

    async with raw_server(lambda _n: short) as server, pool() as client:
        assert (await failure(client, server.url)).cause is UpstreamCause.DISCONNECTED


async def test_a_connection_closed_before_any_answer_is_a_disconnect() -> None:
    async with raw_server(lambda _n: _hang_up) as server, pool() as client:
        assert (await failure(client, server.url)).cause is UpstreamCause.DISCONNECTED


@pytest.mark.parametrize(
    "answer",
    [b"NOT HTTP AT ALL\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", b"HTTP/1.1 101 Switching\r\n\r\n"],
)
async def test_an_answer_that_is_not_http_is_a_protocol_error(answer: bytes) -> None:
    async with raw_server(lambda _n: answer) as server, pool() as client:
        error = await failure(client, server.url)
    assert (error.status, error.cause) == (502, UpstreamCause.PROTOCOL)


@pytest.mark.parametrize("shape", ["one-long-line", "many-headers", "endless-interim-answers"])
async def test_an_answer_head_that_never_ends_is_refused_within_a_bound(shape: str) -> None:
    """Memory is the client's to bound: llhttp itself limits neither a line nor the headers."""

    async def endless(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n" if shape != "endless-interim-answers" else b"")
        start = b"X-Long: " if shape == "one-long-line" else b""
        writer.write(start)
        for n in range(100_000):
            if shape == "one-long-line":
                writer.write(b"y" * 1024)
            elif shape == "many-headers":
                writer.write(b"X-H%d: %s\r\n" % (n, b"v" * 100))
            else:
                writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
            await writer.drain()

    async with raw_server(lambda _n: endless) as server, pool() as client:
        error = await asyncio.wait_for(failure(client, server.url), 10)
    assert (error.status, error.cause) == (502, UpstreamCause.PROTOCOL)
    assert f"over {http_client.MAX_HEAD_BYTES} bytes" in error.message


async def test_no_head_within_the_read_timeout_is_a_504() -> None:
    async def silent(_reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    async with raw_server(lambda _n: silent) as server, pool(read_timeout_s=0.2) as client:
        error = await asyncio.wait_for(failure(client, server.url), 3)
    assert (error.status, error.cause) == (504, UpstreamCause.TIMEOUT)


async def test_the_read_timeout_is_the_gap_between_reads_not_the_whole_reply() -> None:
    async def dribble(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n")
        for byte in b"abcdef":  # 6 x 0.1 s: longer than the timeout in all, shorter each
            await asyncio.sleep(0.1)
            writer.write(bytes([byte]))
            await writer.drain()
        await asyncio.sleep(1)

    async with raw_server(lambda _n: dribble) as server, pool(read_timeout_s=0.3) as client:
        assert await fetch(client, server.url) == (200, b"abcdef")


async def test_a_stall_mid_body_is_a_504() -> None:
    async def stall(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc")
        await writer.drain()
        await asyncio.sleep(5)

    async with (
        raw_server(lambda _n: stall) as server,
        pool(read_timeout_s=0.2) as client,
        client.opened("POST", server.url, {}, b"{}") as response,
    ):
        assert await response.chunk() == b"abc"
        with pytest.raises(UpstreamError) as raised:
            await asyncio.wait_for(response.chunk(), 3)
    assert raised.value.cause is UpstreamCause.TIMEOUT


async def test_a_refused_connection_is_502_unreachable() -> None:
    listening = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    listening.close()
    await listening.wait_closed()
    async with pool() as client:
        error = await failure(client, URL(f"http://127.0.0.1:{port}/v1/messages"))
    assert (error.status, error.cause) == (502, UpstreamCause.CONNECT)
    assert "is unreachable" in error.message


async def test_a_closed_pool_sends_nothing() -> None:
    async with raw_server(lambda _n: ok()) as server:
        client = ClientPool(5, 5, failed=upstream_error)
        await client.close()
        assert (await failure(client, server.url)).cause is UpstreamCause.CONNECT
    assert server.heads == []


# -- TLS --------------------------------------------------------------------------------------


@asynccontextmanager
async def tls_server(ca: trustme.CA) -> AsyncIterator[Server]:
    """An HTTPS server for `localhost`, certified by `ca`, answering every request with ok()."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    server = Server(URL("https://localhost"))

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            while await read_request(reader, server):
                writer.write(ok(b"secure"))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(connected, "127.0.0.1", 0, ssl=context)
    server.url = URL(f"https://localhost:{listening.sockets[0].getsockname()[1]}/v1/messages")
    try:
        yield server
    finally:
        listening.close()


async def test_https_to_a_trusted_certificate_keeps_its_connection() -> None:
    ca = trustme.CA()
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    async with tls_server(ca) as server:
        client = ClientPool(5, 5, failed=upstream_error, tls=trusted)
        try:
            assert [await fetch(client, server.url) for _ in range(3)] == [(200, b"secure")] * 3
        finally:
            await client.close()
    assert server.connections == 1
    assert f"Host: localhost:{server.url.port}" in server.heads[0].decode()


async def test_a_certificate_the_system_does_not_trust_fails_the_handshake() -> None:
    async with tls_server(trustme.CA()) as server, pool() as client:
        error = await failure(client, server.url)
    assert (error.status, error.cause) == (502, UpstreamCause.TLS)
    assert "failed the TLS handshake" in error.message
    assert server.heads == []  # nothing was sent over the untrusted connection


async def test_a_connect_that_hangs_is_a_504_after_the_connect_timeout() -> None:
    """A listener whose accept queue is full drops new SYNs (Linux): the connect hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(8):  # a backlog of 0 still queues one or two: fill it
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    await asyncio.sleep(0.2)
    client = ClientPool(5, 0.3, failed=upstream_error)
    try:
        error = await asyncio.wait_for(failure(client, URL(f"http://127.0.0.1:{port}/v1/messages")), 5)
    finally:
        await client.close()
        for s in fillers:
            s.close()
        listener.close()
    assert (error.status, error.cause) == (504, UpstreamCause.TIMEOUT)
    assert "timed out" in error.message
