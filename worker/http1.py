"""HTTP/1.1 for the worker's calls: one request at a time per pooled connection, kept alive, nothing else.

The worker's calls are the simplest HTTP there is: one request with a body known in advance, redirects never
followed, no proxy, no cookies, no decompression, the status and the first bytes of the answer kept. aiohttp's
client did all of it through its general machinery (`ClientSession._request`: a ClientRequest, a multidict of
headers, a timer context, a connector key and its waiters, a ClientResponse and its stream): ~17 % of the worker's
event-loop samples at 300 runs/s, 139 us of the caller's CPU a call against 66 here (BENCHMARKS.md "The worker's
calls on an HTTP/1.1 client of its own"). Here a call writes one buffer on a pooled connection and one protocol
object reads the answer: the status line and headers, then the body framed as RFC 9112 section 6.3 says (no body
for HEAD, 1xx, 204, 304; chunked; Content-Length; else until the server closes).

A connection goes back to its pool only when its answer was read to the end and neither side asked to close it;
an answer whose body outgrows the excerpt by more than `DRAIN_BYTES`, or has not ended `BODY_WAIT_S` after its
head (a target that streams or stalls: its status decides the call), is answered at once and its connection
closed. A pooled connection the server closed while idle is never reused (its end of file marks it), and one idle
for `IDLE_S` is closed (aiohttp's keep-alive timeout, 15 s). Addresses come from the egress resolver, checked by the
policy, kept `DNS_TTL_S` (as aiohttp's `ttl_dns_cache`); the connection goes to one of exactly those addresses,
tried as aiohttp tries them (RFC 8305), with the URL's host as Host header and TLS server name.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import aiohappyeyeballs
from yarl import URL

from tickwheel.egress import EgressPolicy, EgressResolver

MAX_HEAD_BYTES = 64 * 1024
DRAIN_BYTES = 64 * 1024
BODY_WAIT_S = 1.0
HAPPY_EYEBALLS_DELAY_S = 0.25
IDLE_S = 15.0
DNS_TTL_S = 10.0
_NO_BODY_STATUS = frozenset({204, 304})
_BODILESS_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})


class ProtocolError(OSError):
    """The server's answer was not HTTP/1.x this client can read, or the connection ended before it did."""


class HeaderRefused(ValueError):
    """A header the request cannot carry (a line break would end it and start another)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a call's answer said: its status, its Retry-After, the first bytes of its body."""

    status: int
    retry_after: str | None
    excerpt: bytes


@dataclass(frozen=True, slots=True)
class _Head:
    """A parsed status line and the headers this client acts on."""

    status: int
    length: int | None
    chunked: bool
    close: bool
    retry_after: str | None


def parse_head(block: bytes) -> _Head:
    """The status line and headers of one answer (the bytes before its blank line)."""
    lines = block.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit() or rest[3:4] not in (b"", b" "):
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    length: int | None = None
    chunked = False
    close = version == b"HTTP/1.0"
    retry_after: str | None = None
    coded = False
    for line in lines[1:]:
        name, colon, raw = line.partition(b":")
        if not colon:
            raise ProtocolError(f"a header line without a colon: {line[:80]!r}")
        value = raw.strip()
        lowered = name.strip().lower()
        if lowered == b"content-length":
            length = _content_length(value, length)
        elif lowered == b"transfer-encoding":
            chunked = value.lower().rsplit(b",", 1)[-1].strip() == b"chunked"
            close = close or not chunked  # another coding last: the body ends where the server closes
            coded = True
        elif lowered == b"connection":
            tokens = {token.strip() for token in value.lower().split(b",")}
            close = b"close" in tokens or (close and b"keep-alive" not in tokens)
        elif lowered == b"retry-after":
            retry_after = value.decode("latin-1")
    return _Head(int(code), None if coded else length, chunked, close, retry_after)


def _content_length(value: bytes, seen: int | None) -> int:
    if not value.isdigit() or (seen is not None and int(value) != seen):
        raise ProtocolError(f"an unusable Content-Length: {value[:40]!r}")
    return int(value)


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: sends a request, reads its answer, and says whether it may carry another."""

    def __init__(self, key: tuple[str, str, int]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self.reusable = False
        self._buffer = bytearray()
        self._answer: asyncio.Future[Answer] | None = None
        self._head: _Head | None = None
        self._head_only = False
        self._excerpt_bytes = 0
        self._excerpt = bytearray()
        self._left = 0  # body bytes still to come (Content-Length), or of the current chunk
        self._chunk_state = ""
        self._body_seen = 0
        self._body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes

    def exchange(self, request: bytes, head_only: bool, excerpt_bytes: int) -> asyncio.Future[Answer]:
        """Send `request`; the future is its answer (its body's first `excerpt_bytes`)."""
        assert self.transport is not None
        self.reusable = False
        self._answer = asyncio.get_running_loop().create_future()
        self._head, self._head_only, self._excerpt_bytes = None, head_only, excerpt_bytes
        self._excerpt.clear()
        self._buffer.clear()
        self._body_seen = 0
        self.transport.write(request)
        return self._answer

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self.close()  # bytes nobody asked for: the connection cannot be trusted to frame the next answer
            return
        self._buffer += data
        try:
            self._read()
        except ProtocolError as exc:
            self._fail(exc)

    def eof_received(self) -> bool | None:
        if self._head is not None:
            self._finish(reusable=False)  # a body delimited by the server's close, or one cut short
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.transport = None
        self._stop_body_timer()
        if self._answer is None or self._answer.done():
            return
        if self._head is not None:  # the status came: it decides the call, whatever became of the body
            self._finish(reusable=False)
        else:
            self._answer.set_exception(ProtocolError(f"the connection closed before an answer ({exc or 'EOF'})"))

    def close(self) -> None:
        """Close the connection (an answer still awaited fails, or, once its status came, is answered with it)."""
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def _read(self) -> None:
        while self._head is None:
            if not self._read_head():
                return
        if self._answer is None or self._answer.done():
            return
        if self._head.chunked:
            self._read_chunks()
        elif self._head.length is not None:
            self._take(min(self._left, len(self._buffer)))
            if self._left == 0:
                self._finish(reusable=not self._head.close)
        else:
            self._take(len(self._buffer))
        self._maybe_give_up()
        if self._body_timer is None and self._answer is not None and not self._answer.done():
            self._body_timer = asyncio.get_running_loop().call_later(BODY_WAIT_S, self._body_late)

    def _body_late(self) -> None:
        """The head came and the body has not ended BODY_WAIT_S later (a target that streams, or stalls): the
        status decides the call, so it is answered with the excerpt so far, and the connection closed."""
        self._body_timer = None
        if self._answer is not None and not self._answer.done():
            self._finish(reusable=False)

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _read_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise ProtocolError(f"an answer's head longer than {MAX_HEAD_BYTES} bytes")
            return False
        head = parse_head(bytes(self._buffer[:end]))
        del self._buffer[: end + 4]
        if 100 <= head.status < 200 and head.status != 101:
            return True  # an interim answer (100 Continue, 103 Early Hints): the final one follows
        self._head = head
        if self._head_only or head.status in _NO_BODY_STATUS or head.status == 101:
            self._finish(reusable=not head.close and head.status != 101)
        elif head.chunked:
            self._chunk_state = "size"
        elif head.length is not None:
            self._left = head.length
        return True

    def _read_chunks(self) -> None:
        while self._answer is not None and not self._answer.done():
            if self._chunk_state == "data":
                self._take(min(self._left, len(self._buffer)))
                if self._left:
                    return
                self._chunk_state = "end"
            line_end = self._buffer.find(b"\r\n")
            if line_end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    raise ProtocolError("a chunk's framing line is too long")
                return
            line = bytes(self._buffer[:line_end])
            del self._buffer[: line_end + 2]
            self._chunk_line(line)

    def _chunk_line(self, line: bytes) -> None:
        assert self._head is not None
        if self._chunk_state == "end":
            if line:
                raise ProtocolError("a chunk not followed by CRLF")
            self._chunk_state = "size"
        elif self._chunk_state == "size":
            size_text = line.split(b";", 1)[0].strip()
            try:
                self._left = int(size_text, 16)
            except ValueError:
                raise ProtocolError(f"a chunk size that is not hexadecimal: {size_text[:20]!r}") from None
            self._chunk_state = "data" if self._left else "trailers"
        elif not line:  # the blank line after the trailers: the body has ended
            self._finish(reusable=not self._head.close)

    def _take(self, count: int) -> None:
        """Move `count` body bytes from the buffer: into the excerpt while it has room, else dropped."""
        if not count:
            return
        room = self._excerpt_bytes - len(self._excerpt)
        if room > 0:
            self._excerpt += self._buffer[: min(room, count)]
        del self._buffer[:count]
        self._body_seen += count
        if self._left:
            self._left -= count

    def _maybe_give_up(self) -> None:
        """An answer whose excerpt is full and whose body runs past DRAIN_BYTES is answered now, its connection
        closed rather than read to the end."""
        pending = self._answer is not None and not self._answer.done()
        if pending and self._body_seen > DRAIN_BYTES and len(self._excerpt) >= self._excerpt_bytes:
            self._finish(reusable=False)

    def _finish(self, *, reusable: bool) -> None:
        assert self._head is not None
        self._stop_body_timer()
        if self._answer is not None and not self._answer.done():
            self.reusable = reusable and not self._buffer
            self._answer.set_result(Answer(self._head.status, self._head.retry_after, bytes(self._excerpt)))
        if not self.reusable:
            self.close()

    def _fail(self, exc: Exception) -> None:
        self._stop_body_timer()
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)
        self.close()


class Http1Client:
    """Pooled HTTP/1.1 connections to the targets the egress policy admits; `limit` calls at once."""

    def __init__(self, policy: EgressPolicy, *, user_agent: str, limit: int = 512, tls: ssl.SSLContext | None = None):
        self._resolver = EgressResolver(policy)
        self._user_agent = user_agent
        self._limit = limit
        self._slots: asyncio.Semaphore | None = None
        # made here, not at the first https call: loading the system's CA certificates reads files (the event loop's
        # first TLS call would wait for them), as aiohttp made its default context at import
        self._tls = tls or ssl.create_default_context()
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._addresses: dict[tuple[str, int], tuple[float, list[dict[str, Any]]]] = {}
        self._sweeper: asyncio.TimerHandle | None = None

    async def request(
        self, method: str, url: URL, body: bytes, headers: Mapping[str, str], timeout_s: float, excerpt_bytes: int
    ) -> Answer:
        """Call `url` once and read its answer, all within `timeout_s` (raises TimeoutError past it)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._limit)
            self._sweep_later()
        request = request_bytes(method, url, body, headers, self._user_agent)
        key = (url.scheme, (url.host or "").lower(), url.port or 0)
        async with asyncio.timeout(timeout_s), self._slots:
            connection = self._pooled(key) or await self._connect(key, url)
            try:
                answer = await connection.exchange(request, method == "HEAD", excerpt_bytes)
            except BaseException:
                connection.close()
                raise
        self._release(connection)
        return answer

    async def close(self) -> None:
        """Close every idle connection (calls in flight close theirs when they end)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def _pooled(self, key: tuple[str, str, int]) -> _Connection | None:
        connections = self._idle.get(key)
        while connections:
            connection = connections.pop()
            if connection.transport is not None and not connection.transport.is_closing():
                return connection
        return None

    def _release(self, connection: _Connection) -> None:
        if connection.reusable and connection.transport is not None:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(connection.key, []).append(connection)
        else:
            connection.close()

    async def _connect(self, key: tuple[str, str, int], url: URL) -> _Connection:
        """A new connection to one of the checked addresses: tried as aiohttp's connector does (RFC 8305, the next
        address 250 ms after the last one was tried, families interleaved), the TLS handshake on the one that
        answered first."""
        host, port = url.host or "", url.port or 0
        tls = self._tls if url.scheme == "https" else None
        infos = [_addr_info(address, port) for address in await self._resolve(host, port)]
        sock = await aiohappyeyeballs.start_connection(infos, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY_S)
        try:
            _, connection = await asyncio.get_running_loop().create_connection(
                lambda: _Connection(key), sock=sock, ssl=tls,
                server_hostname=host.rstrip(".") if tls is not None else None,  # certificates name hosts without it
            )  # fmt: skip
        except BaseException:
            sock.close()
            raise
        return connection

    async def _resolve(self, host: str, port: int) -> list[dict[str, Any]]:
        now = time.monotonic()
        kept = self._addresses.get((host, port))
        if kept is not None and kept[0] > now:
            return kept[1]
        addresses = await self._resolver.resolve(host, port)
        self._addresses[(host, port)] = (now + DNS_TTL_S, addresses)
        return addresses

    def _sweep_later(self) -> None:
        self._sweeper = asyncio.get_running_loop().call_later(IDLE_S, self._sweep)

    def _sweep(self) -> None:
        """Close connections idle for IDLE_S, forget expired addresses."""
        now = time.monotonic()
        for key, connections in list(self._idle.items()):
            keep = []
            for connection in connections:
                if now - connection.idle_since < IDLE_S and connection.transport is not None:
                    keep.append(connection)
                else:
                    connection.close()
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]  # a host not called for IDLE_S keeps no entry
        self._addresses = {k: v for k, v in self._addresses.items() if v[0] > now}
        self._sweep_later()


def _addr_info(address: Mapping[str, Any], port: int) -> tuple[int, int, int, str, tuple[Any, ...]]:
    """A checked address as getaddrinfo would give it, for `aiohappyeyeballs`."""
    sockaddr: tuple[Any, ...] = (
        (address["host"], port) if address["family"] == socket.AF_INET else (address["host"], port, 0, 0)
    )
    return (address["family"], socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)


def request_bytes(method: str, url: URL, body: bytes, headers: Mapping[str, str], user_agent: str) -> bytes:
    """The request as written: request line, Host, the headers (a User-Agent unless they carry one), framing."""
    lines = [f"{method} {url.raw_path_qs or '/'} HTTP/1.1", f"Host: {url.host_port_subcomponent}"]
    has_agent = False
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise HeaderRefused(f"header {name!r} carries a line break")
        has_agent = has_agent or name.lower() == "user-agent"
        lines.append(f"{name}: {value}")
    if not has_agent:
        lines.append(f"User-Agent: {user_agent}")
    if body or method not in _BODILESS_METHODS:
        lines.append(f"Content-Length: {len(body)}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode() + body
