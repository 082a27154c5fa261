"""The generating legs' HTTP client (``tandem.router.engine_http``) over loopback.

Real servers on 127.0.0.1: aiohttp for well-formed answers, raw asyncio servers for the
answers aiohttp would not send (garbage, an answer ended by closing the connection).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from tandem.router.engine_http import EngineBrokeOff, EngineClient, EngineConnectError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Serve = Callable[[Handler], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def raw_server(answer: bytes, *, close: bool) -> tuple[asyncio.Server, str]:
    """A server that reads a request head and writes ``answer`` (then closes, if asked)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        if close:
            writer.close()
        else:
            await reader.read()  # hold the connection until the client goes

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response(
        {"path": request.path, "body": body.decode(), "id": request.headers.get("X-Id")},
        headers={"Retry-After": "3"},
    )


async def test_whole_answers_reuse_one_connection(serve: Serve) -> None:
    url = await serve(echo)
    client = EngineClient()
    try:
        for n in range(3):
            answer = await client.post(f"{url}/v1/completions", b'{"n":%d}' % n, {"X-Id": str(n)},
                                       connect_timeout_s=1.0)  # fmt: skip
            await answer.head()
            assert answer.status == 200
            assert answer.headers["content-type"] == "application/json; charset=utf-8"
            assert answer.headers["retry-after"] == "3"
            body = await answer.read()
            want = b'{"path": "/v1/completions", "body": "{\\"n\\":%d}", "id": "%d"}'
            assert body == want % (n, n)
            answer.release()
        assert client.connects == 1
        assert client.idle_connections() == 1
    finally:
        await client.close()
    assert client.idle_connections() == 0


async def test_a_stream_reaches_the_sink_in_order(serve: Serve) -> None:
    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        for i in range(20):
            await answer.write(b"data: %d\n\n" % i)
            await asyncio.sleep(0.001)
        await answer.write_eof()
        return answer

    url = await serve(stream)
    client = EngineClient()
    try:
        for _ in range(2):
            answer = await client.post(url + "/s", b"{}", {}, connect_timeout_s=1.0)
            await answer.head()
            assert answer.headers["transfer-encoding"] == "chunked"
            got = [await answer.first_chunk()]
            answer.stream(got.append)
            await answer.wait()
            assert answer.complete
            assert b"".join(got) == b"".join(b"data: %d\n\n" % i for i in range(20))
            answer.release()
        assert client.connects == 1
    finally:
        await client.close()


async def test_a_paused_stream_waits_and_resumes(serve: Serve) -> None:
    chunk = b"x" * 4096

    async def big(request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = web.StreamResponse()
        await answer.prepare(request)
        for _ in range(256):  # 1 MiB, more than the socket buffers hold
            await answer.write(chunk)
        await answer.write_eof()
        return answer

    url = await serve(big)
    client = EngineClient()
    try:
        answer = await client.post(url + "/big", b"{}", {}, connect_timeout_s=1.0)
        await answer.head()
        got: list[bytes] = []

        def sink(data: bytes) -> None:
            got.append(data)
            answer.pause()

        answer.stream(sink)
        await answer.wait()
        assert answer.paused and not answer.complete
        seen = len(got)
        await asyncio.sleep(0.1)  # nothing is read while paused
        assert len(got) == seen
        answer.stream(got.append)
        answer.resume()
        await answer.wait()
        assert answer.complete
        assert b"".join(got) == chunk * 256
        answer.release()
    finally:
        await client.close()


async def test_an_unfinished_answer_is_never_reused(serve: Serve) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = web.StreamResponse()
        await answer.prepare(request)
        await answer.write(b"part")
        await asyncio.sleep(0.3 if request.path == "/slow" else 0)
        await answer.write_eof()
        return answer

    url = await serve(slow)
    client = EngineClient()
    try:
        answer = await client.post(url + "/slow", b"{}", {}, connect_timeout_s=1.0)
        await answer.head()
        assert not answer.complete
        answer.release()  # head only: the body was not read
        answer = await client.post(url + "/a", b"{}", {}, connect_timeout_s=1.0)
        await answer.head()
        await answer.read()
        answer.release()
        assert client.connects == 2
    finally:
        await client.close()


async def test_idle_connections_expire(serve: Serve) -> None:
    url = await serve(echo)
    client = EngineClient(keepalive_s=0.2)
    try:
        answer = await client.post(url + "/a", b"{}", {}, connect_timeout_s=1.0)
        await answer.read()
        answer.release()
        assert client.idle_connections() == 1
        await asyncio.sleep(0.6)
        assert client.idle_connections() == 0
    finally:
        await client.close()


async def test_a_connection_the_engine_closed_is_not_reused() -> None:
    server, url = await raw_server(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", close=True
    )
    client = EngineClient()
    try:
        for _ in range(2):
            answer = await client.post(url + "/a", b"{}", {}, connect_timeout_s=1.0)
            assert await answer.read() == b"ok"
            answer.release()
        assert client.connects == 2
        assert client.idle_connections() == 0
    finally:
        await client.close()
        server.close()


async def test_an_answer_ended_by_closing_the_connection_is_whole() -> None:
    server, url = await raw_server(b"HTTP/1.0 200 OK\r\n\r\nuntil the end", close=True)
    client = EngineClient()
    try:
        answer = await client.post(url + "/a", b"{}", {}, connect_timeout_s=1.0)
        await answer.head()
        assert await answer.read() == b"until the end"
        answer.release()
        assert client.idle_connections() == 0
    finally:
        await client.close()
        server.close()


@pytest.mark.parametrize(
    "raw",
    [b"NOT HTTP AT ALL\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"],
    ids=["garbage", "cut-short"],
)
async def test_a_broken_answer_is_an_error(raw: bytes) -> None:
    server, url = await raw_server(raw, close=True)
    client = EngineClient()
    try:
        answer = await client.post(url + "/a", b"{}", {}, connect_timeout_s=1.0)
        with pytest.raises(EngineBrokeOff):
            await answer.head()
            await answer.read()
        answer.release()
        assert client.idle_connections() == 0
    finally:
        await client.close()
        server.close()


async def test_a_closed_port_is_a_connect_error() -> None:
    server, url = await raw_server(b"", close=True)
    server.close()
    await server.wait_closed()
    client = EngineClient()
    with pytest.raises(EngineConnectError, match="ConnectionRefusedError"):
        await client.post(url + "/a", b"{}", {}, connect_timeout_s=1.0)
    assert client.connects == 0


async def test_header_injection_is_refused(serve: Serve) -> None:
    url = await serve(echo)
    client = EngineClient()
    try:
        with pytest.raises(ValueError, match="line break"):
            await client.post(url + "/a", b"{}", {"X-Id": "a\r\nEvil: 1"}, connect_timeout_s=1.0)
        with pytest.raises(ValueError, match="only http"):
            await client.post("https://127.0.0.1:1/a", b"{}", {}, connect_timeout_s=1.0)
    finally:
        await client.close()


async def test_an_ipv6_engine_gets_a_bracketed_host() -> None:
    async def host(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text=request.headers["Host"])

    app = web.Application()
    app.router.add_post("/{tail:.*}", host)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    await web.TCPSite(runner, "::1", 0).start()
    port = runner.addresses[0][1]
    client = EngineClient()
    try:
        answer = await client.post(f"http://[::1]:{port}/a", b"{}", {}, connect_timeout_s=1.0)
        await answer.head()
        assert await answer.read() == b"[::1]:%d" % port
        answer.release()
    finally:
        await client.close()
        await runner.cleanup()


async def test_a_failing_sink_breaks_the_stream_and_is_logged(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = web.StreamResponse()
        await answer.prepare(request)
        for _ in range(3):
            await asyncio.sleep(0.05)  # after the head: the sink is called by the parser
            await answer.write(b"data: x\n\n")
        await answer.write_eof()
        return answer

    def sink(chunk: bytes) -> None:
        raise RuntimeError("a bug in the relay")

    url = await serve(stream)
    client = EngineClient()
    try:
        answer = await client.post(url + "/s", b"{}", {}, connect_timeout_s=1.0)
        await answer.head()
        answer.stream(sink)
        with pytest.raises(EngineBrokeOff, match="a bug in the relay"):
            await answer.wait()
        answer.release()
        assert client.idle_connections() == 0
    finally:
        await client.close()
    assert "relaying an engine's answer failed" in caplog.text
