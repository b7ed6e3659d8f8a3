"""The worker's HTTP/1.1 client against real servers on loopback: aiohttp's server for ordinary answers, raw
sockets for the framings and faults aiohttp would not produce, a TLS server with a certificate nobody trusts.
Each scenario runs on asyncio's loop and on uvloop's (the processes run on uvloop: its transports differ)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvloop
from aiohttp import web
from yarl import URL

from schemas.messages import HttpTarget
from tickwheel.egress import EgressPolicy
from worker import http1
from worker.http1 import HeaderRefused, Http1Client, ProtocolError, parse_head, request_bytes
from worker.targets import HttpCaller

LOOPBACK = EgressPolicy.from_cidrs(["127.0.0.0/8"])
LOOPS = pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
Peers = list[object]


def run_on(loop: str, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    if loop == "uvloop":
        uvloop.run(scenario())
    else:
        asyncio.run(scenario())


@asynccontextmanager
async def a_client() -> AsyncIterator[Http1Client]:
    client = Http1Client(LOOPBACK, user_agent="test-agent")
    try:
        yield client
    finally:
        await client.close()


@asynccontextmanager
async def app_server() -> AsyncIterator[tuple[str, Peers]]:
    """An aiohttp server; the list collects the peer port of each request (one per connection used)."""
    peers: Peers = []

    async def answer(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername")[1] if request.transport else None)
        body = await request.read()
        if request.path == "/chunked":
            response = web.StreamResponse(status=200)
            response.enable_chunked_encoding()
            await response.prepare(request)
            for part in (b"first-", b"second-", b"third"):
                await response.write(part)
            await response.write_eof()
            return response
        if request.path == "/big":
            return web.Response(body=b"x" * (3 * http1.DRAIN_BYTES))
        if request.path == "/close":
            return web.Response(text="bye", headers={"Connection": "close"})
        if request.path == "/busy":
            return web.Response(status=503, headers={"Retry-After": "7"})
        if request.path == "/empty":
            return web.Response(status=204)
        return web.Response(body=b"got:" + body)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", peers
    finally:
        await runner.cleanup()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_server(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """A server that runs `handler` on each connection (it reads the request itself)."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
    scheme = "https" if tls else "http"
    async with server:
        yield f"{scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    return head + await reader.readexactly(lengths[0] if lengths else 0)


@LOOPS
def test_a_post_carries_its_body_and_reads_the_answer_and_stops_at_the_excerpt(loop: str) -> None:
    async def scenario() -> None:
        async with app_server() as (base, _), a_client() as client:
            whole = await client.request("POST", URL(base + "/hook?x=1"), b"payload", {"webhook-id": "r1"}, 5, 100)
            cut = await client.request("POST", URL(base + "/hook"), b"a-long-payload", {}, 5, 6)
        assert (whole.status, whole.excerpt, whole.retry_after) == (200, b"got:payload", None)
        assert cut.excerpt == b"got:a-"

    run_on(loop, scenario)


@LOOPS
def test_connections_are_kept_alive_and_used_again(loop: str) -> None:
    async def scenario() -> None:
        async with app_server() as (base, peers), a_client() as client:
            statuses = [(await client.request("POST", URL(base + "/hook"), b"x", {}, 5, 10)).status for _ in range(5)]
        assert statuses == [200] * 5 and len(peers) == 5 and len(set(peers)) == 1

    run_on(loop, scenario)


@LOOPS
def test_a_server_asking_to_close_gets_a_new_connection_next_time(loop: str) -> None:
    async def scenario() -> None:
        async with app_server() as (base, peers), a_client() as client:
            first = await client.request("GET", URL(base + "/close"), b"", {}, 5, 10)
            await client.request("GET", URL(base + "/hook"), b"", {}, 5, 10)
        assert first.excerpt == b"bye" and len(set(peers)) == 2

    run_on(loop, scenario)


@LOOPS
def test_a_chunked_answer_is_read_to_its_end_and_the_connection_kept(loop: str) -> None:
    async def scenario() -> None:
        async with app_server() as (base, peers), a_client() as client:
            answer = await client.request("POST", URL(base + "/chunked"), b"", {}, 5, 100)
            await client.request("POST", URL(base + "/hook"), b"", {}, 5, 100)
        assert answer.excerpt == b"first-second-third" and len(set(peers)) == 1

    run_on(loop, scenario)


@LOOPS
def test_a_long_body_is_cut_at_the_excerpt_and_its_connection_closed(loop: str) -> None:
    async def scenario() -> None:
        async with app_server() as (base, peers), a_client() as client:
            answer = await client.request("GET", URL(base + "/big"), b"", {}, 5, 16)
            await client.request("GET", URL(base + "/hook"), b"", {}, 5, 16)
        assert answer.excerpt == b"x" * 16 and len(set(peers)) == 2

    run_on(loop, scenario)


@LOOPS
def test_retry_after_and_bodiless_answers_keep_the_connection(loop: str) -> None:
    async def scenario() -> None:
        async with app_server() as (base, peers), a_client() as client:
            busy = await client.request("POST", URL(base + "/busy"), b"", {}, 5, 10)
            empty = await client.request("POST", URL(base + "/empty"), b"", {}, 5, 10)
            head = await client.request("HEAD", URL(base + "/hook"), b"", {}, 5, 10)
        assert (busy.status, busy.retry_after) == (503, "7")
        assert (empty.status, empty.excerpt, head.status, head.excerpt) == (204, b"", 200, b"")
        assert len(set(peers)) == 1

    run_on(loop, scenario)


@LOOPS
def test_a_body_delimited_by_the_close_after_an_interim_answer(loop: str) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nX: y\r\n\r\nuntil the end")
        await writer.drain()
        writer.close()

    async def scenario() -> None:
        async with raw_server(answer) as base, a_client() as client:
            got = await client.request("POST", URL(base + "/"), b"body", {}, 5, 100)
        assert (got.status, got.excerpt) == (200, b"until the end")

    run_on(loop, scenario)


@LOOPS
def test_a_pooled_connection_the_server_closed_is_not_used_again(loop: str) -> None:
    connections = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # while the client keeps the connection for its next call

    async def scenario() -> None:
        async with raw_server(answer) as base, a_client() as client:
            await client.request("POST", URL(base + "/"), b"", {}, 5, 10)
            await asyncio.sleep(0.1)
            second = await client.request("POST", URL(base + "/"), b"", {}, 5, 10)
        assert second.excerpt == b"ok" and len(connections) == 2

    run_on(loop, scenario)


@LOOPS
def test_an_answer_whose_body_is_cut_or_stalls_is_decided_by_its_status(
    loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http1, "BODY_WAIT_S", 0.2)

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
        await writer.drain()
        writer.close()

    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await asyncio.sleep(3)

    async def scenario() -> None:
        for handler, expected in ((cut, (200, b"short")), (stalls, (202, b"first"))):
            async with raw_server(handler) as base, a_client() as client:
                answer = await client.request("POST", URL(base + "/"), b"", {}, 2, 10)
            assert (answer.status, answer.excerpt) == expected

    run_on(loop, scenario)


@LOOPS
def test_garbage_a_silent_server_and_a_closed_connection_fail_the_call(loop: str) -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(2)

    async def closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.close()

    async def scenario() -> None:
        cases: list[tuple[Handler, type[BaseException]]] = [
            (garbage, ProtocolError), (silent, TimeoutError), (closes, ProtocolError)
        ]  # fmt: skip
        for handler, error in cases:
            async with raw_server(handler) as base, a_client() as client:
                with pytest.raises(error):
                    await client.request("POST", URL(base + "/"), b"", {}, 0.5, 10)

    run_on(loop, scenario)


def test_heads_are_read_as_rfc_9112_frames_them() -> None:
    chunked_and_length = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, chunked")
    assert (chunked_and_length.chunked, chunked_and_length.length) == (True, None)
    coded = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5")
    assert (coded.chunked, coded.length, coded.close) == (False, None, True)
    assert parse_head(b"HTTP/1.0 200 OK\r\nConnection: keep-alive").close is False
    assert parse_head(b"HTTP/1.1 200 OK\r\nConnection: Close").close is True
    bad_heads = (
        b"HTTP/2 200",
        b"HTTP/1.1 2x0 OK",
        b"HTTP/1.1 200 OK\r\nno colon",
        b"HTTP/1.1 200\r\nContent-Length: -1",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2",
    )
    for bad in bad_heads:
        with pytest.raises(ProtocolError):
            parse_head(bad)


def test_the_request_is_framed_with_its_host_and_length_and_refuses_line_breaks() -> None:
    sent = request_bytes("POST", URL("http://[::1]:8080/a%20b?q=1"), b"xyz", {"A": "b"}, "agent")
    assert sent == (
        b"POST /a%20b?q=1 HTTP/1.1\r\nHost: [::1]:8080\r\nA: b\r\nUser-Agent: agent\r\nContent-Length: 3\r\n\r\nxyz"
    )
    own_agent = request_bytes("GET", URL("https://example.com"), b"", {"user-agent": "mine"}, "agent")
    assert own_agent == b"GET / HTTP/1.1\r\nHost: example.com\r\nuser-agent: mine\r\n\r\n"
    with pytest.raises(HeaderRefused):
        request_bytes("POST", URL("http://example.com/"), b"", {"X": "a\r\nHost: evil"}, "agent")


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@LOOPS
def test_tls_is_verified_and_a_certificate_nobody_trusts_is_its_own_error(
    loop: str, self_signed: tuple[Path, Path]
) -> None:
    cert, key = self_signed
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await read_request(reader)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret")
        await writer.drain()

    async def scenario() -> None:
        async with raw_server(answer, server_tls) as base:
            caller = HttpCaller(LOOPBACK, 100)
            refused = await caller.call(HttpTarget(url=base + "/", timeout_s=5), b"", {})
            await caller.close()
            trusting = Http1Client(LOOPBACK, user_agent="t", tls=ssl.create_default_context(cafile=str(cert)))
            trusted = await trusting.request("POST", URL(base + "/"), b"", {}, 5, 100)
            await trusting.close()
        assert refused.error == "tls_certificate", refused
        assert (trusted.status, trusted.excerpt) == (200, b"secret")

    run_on(loop, scenario)


@LOOPS
def test_the_caller_names_each_way_a_call_fails(loop: str) -> None:
    async def nothing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        return None

    async def scenario() -> None:
        async with raw_server(nothing) as gone:
            pass  # closed: nothing listens there any more
        caller = HttpCaller(LOOPBACK, 100)
        cases = {
            "connection_error": HttpTarget(url=gone + "/", timeout_s=2),
            "egress_denied": HttpTarget(url="http://10.0.0.1/", timeout_s=2),
            "dns_failure": HttpTarget(url="http://name-that-does-not-resolve.invalid/", timeout_s=5),
        }
        try:
            results = {error: (await caller.call(target, b"", {})).error for error, target in cases.items()}
            async with app_server() as (base, _):
                delivered = await caller.call(HttpTarget(url=base + "/hook", timeout_s=2), b"p", {})
        finally:
            await caller.close()
        assert results == {error: error for error in cases}
        assert (delivered.status, delivered.excerpt, delivered.error) == (200, b"got:p", None)

    run_on(loop, scenario)


@LOOPS
def test_the_next_checked_address_is_tried_when_one_refuses(loop: str) -> None:
    async def scenario() -> None:
        async with app_server() as (base, _), a_client() as client:
            port = URL(base).port
            checked = [  # as the egress resolver answers: 127.0.0.2 has nothing on the port, 127.0.0.1 the server
                {"hostname": "service.test", "host": address, "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}
                for address in ("127.0.0.2", "127.0.0.1")
            ]  # fmt: skip

            async def resolve(host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict[str, Any]]:
                return checked

            client._resolver.resolve = resolve  # type: ignore[method-assign]
            answer = await client.request("POST", URL(f"http://service.test:{port}/hook"), b"x", {}, 5, 10)
        assert (answer.status, answer.excerpt) == (200, b"got:x")

    run_on(loop, scenario)
