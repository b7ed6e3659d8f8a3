"""The Redis adapter (redis.asyncio): a client with a key prefix, mapping connection failures to Unavailable."""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import hiredis
import redis.asyncio as aioredis
from redis._parsers import BaseParser
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tickwheel.errors import Unavailable
from tickwheel.settings import RedisSettings

REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)
MAX_CONNECTIONS = 64  # per process; a command beyond them waits for one (up to the socket timeout)
PIPELINES_IN_FLIGHT = 32  # script pipelines at once, leaving connections for the other commands
# After Redis failed to answer, it is asked again only this much later: a Redis that refuses costs each call a
# failed round trip with its retries (0.3 s refused, ~1.3 s through a cut proxy, measured), so one call a second
# pays it, not every request or run while Redis is away.
ASK_AGAIN_AFTER_S = 1.0
# What PipelinedConnection reads of a parsed URL; a URL with anything more (an option) stays on redis-py.
_URL_PARTS = {"host", "port", "db", "username", "password"}


class RedisAway(ConnectionError):
    """Redis failed to answer less than ASK_AGAIN_AFTER_S ago, so it was not asked (one of REDIS_DOWN)."""


class AwayGate:
    """Remembers that Redis failed to answer, for ASK_AGAIN_AFTER_S: the checks that fail open skip it meanwhile."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._away_until = 0.0

    def ask(self) -> None:
        """Raise RedisAway while Redis failed to answer less than ASK_AGAIN_AFTER_S ago."""
        if self._clock() < self._away_until:
            raise RedisAway("Redis failed to answer a moment ago")

    def failed(self, exc: BaseException) -> None:
        """Redis did not answer (`exc`): skip it for ASK_AGAIN_AFTER_S (not again for a call that skipped it)."""
        if not isinstance(exc, RedisAway):
            self._away_until = self._clock() + ASK_AGAIN_AFTER_S


class RedisClient:
    """redis.asyncio with every key under `prefix` (a per-test namespace, or the platform's own)."""

    def __init__(self, settings: RedisSettings, *, prefix: str | None = None):
        # A pooled connection dies with a Redis restart; without retries every command on it fails until the
        # pool happens to replace it (seen: 503s for minutes). Retry once on a fresh connection instead.
        # A blocking pool: a burst of commands (a batch create's items, a worker's runs) waits for a connection
        # instead of failing with "Too many connections" (a 503) once the pool is full.
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.url,
            max_connections=MAX_CONNECTIONS,
            timeout=2.0,
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
            health_check_interval=15,
        )
        self.redis = aioredis.Redis(connection_pool=pool)
        self.prefix = settings.key_prefix if prefix is None else prefix
        self._scripts: dict[str, Any] = {}
        self._batcher = ScriptBatcher(self.redis, PipelinedConnection.for_url(settings.url))

    def key(self, *parts: str) -> str:
        """The key `parts` name, under this client's prefix."""
        return self.prefix + ":".join(parts)

    def pipeline(self) -> Pipeline:
        """Commands sent in one round trip, not a transaction: `async with client.pipeline() as pipe: ...`."""
        return self.redis.pipeline(transaction=False)

    async def set_if_absent(self, key: str, value: int | str) -> bool:
        """SET NX: whoever writes first wins; False when the key already had a value."""
        return bool(await self.redis.set(key, value, nx=True))

    async def decrement(self, key: str, amount: int = 1) -> int:
        """DECRBY: `amount` less of a counter."""
        return int(await self.redis.decrby(key, amount))

    async def hash_field(self, key: str, field: str) -> bytes | str | None:
        """HGET: one field of the hash at `key`, None where the hash or the field is absent."""
        value: bytes | str | None = await self.redis.hget(key, field)
        return value

    async def get_many(self, keys: Sequence[str]) -> list[bytes | str | None]:
        """MGET: the values of `keys` in one round trip, None where a key is absent."""
        return list(await self.redis.mget(keys))

    async def ping(self) -> bool:
        """One round trip to Redis (readiness); Unavailable when it does not answer."""
        try:
            return bool(await self.redis.ping())
        except REDIS_DOWN as exc:
            raise Unavailable(f"Redis is unavailable: {exc}") from exc

    async def run_script(self, source: str, keys: list[str], args: list[Any]) -> Any:
        """Run a Lua script (registered on first use) with `keys` and `args`; the scripts of every caller that
        runs one in the same loop round go to Redis as one pipeline (`ScriptBatcher`)."""
        return await self._batcher.call(source, keys, args)

    def script(self, source: str) -> Any:
        """Register a Lua script (once per source, no round trip: Redis learns it at its first call); the returned
        object is awaited with keys and args (one round trip per call: `run_script` batches them instead)."""
        if source not in self._scripts:
            self._scripts[source] = self.redis.register_script(source)
        return self._scripts[source]

    async def close(self) -> None:
        """Close the connection pool and the scripts' connection."""
        self._batcher.close()
        await self.redis.aclose(close_connection_pool=True)


class ScriptBatcher:
    """Lua script calls of many runs sent as one Redis pipeline: the calls made while the event loop runs one
    round go out together after it, so a worker with hundreds of runs in flight pays one round trip per round
    instead of one per call (on the `PipelinedConnection`, else on one of redis-py's pooled connections). Each call
    still gets its own answer or error."""

    def __init__(self, redis: aioredis.Redis, connection: PipelinedConnection | None = None):
        self.redis = redis
        self._connection = connection  # None: through redis-py's pipelines (a URL PipelinedConnection cannot open)
        self._sha: dict[str, str] = {}
        self._queued: list[tuple[str, list[str], list[Any], asyncio.Future[Any]]] = []
        self._gate = asyncio.Semaphore(PIPELINES_IN_FLIGHT)

    async def call(self, source: str, keys: list[str], args: list[Any]) -> Any:
        """Run one registered script with `keys` and `args` in the next pipeline; its answer, or its error."""
        if source not in self._sha:
            self._sha[source] = self.redis.register_script(source).sha
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self._queued:
            asyncio.get_running_loop().call_soon(self._flush_soon)
        self._queued.append((source, keys, args, answer))
        return await answer

    def _flush_soon(self) -> None:
        queued, self._queued = self._queued, []
        task = asyncio.ensure_future(self._send(queued))
        task.add_done_callback(_retrieve)

    async def _send(self, queued: list[tuple[str, list[str], list[Any], asyncio.Future[Any]]]) -> None:
        try:
            async with self._gate:
                answers = await self._pipeline(queued)
                if any(isinstance(a, NoScriptError) for a in answers):  # Redis restarted or flushed its scripts
                    for source in {source for source, *_ in queued}:
                        await self.redis.script_load(source)
                    answers = await self._pipeline(queued)
        except BaseException as exc:  # the connection failed: every call of the pipeline sees it
            for *_, answer in queued:
                if not answer.done():
                    answer.set_exception(exc)
            return
        for (*_, answer), value in zip(queued, answers, strict=True):
            if answer.done():
                continue
            if isinstance(value, Exception):
                answer.set_exception(value)
            else:
                answer.set_result(value)

    async def _pipeline(self, queued: list[tuple[str, list[str], list[Any], asyncio.Future[Any]]]) -> list[Any]:
        if self._connection is not None:
            sha = self._sha
            commands = [pack("EVALSHA", sha[s], len(k), *k, *a) for s, k, a, _ in queued]
            return await self._connection.execute(commands)
        pipe = self.redis.pipeline(transaction=False)
        for source, keys, args, _ in queued:
            pipe.evalsha(self._sha[source], len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))

    def close(self) -> None:
        """Close the scripts' connection (pipelines waiting on it fail)."""
        if self._connection is not None:
            self._connection.close()


class PipelinedConnection:
    """One connection to Redis with any number of pipelines in flight on it (Redis answers a connection's commands
    in order), for the scripts' pipelines: a round trip costs a write and the answers' parsing (hiredis), ~80 us of
    CPU through `ScriptBatcher` against ~150 us through redis-py's pipeline (its pooled connection, retry wrapper and
    command objects; BENCHMARKS.md "The interpreter, and Redis round trips"). Connects on first use and again after
    a failure. A connection that fails, or leaves its oldest pipeline unanswered for `timeout_s`, fails every
    pipeline waiting on it (redis ConnectionError or TimeoutError: REDIS_DOWN), as redis-py's socket timeout did;
    nothing is sent twice."""

    def __init__(self, host: str, port: int, *, db: int = 0, username: str | None = None,
                 password: str | None = None, tls: bool = False, timeout_s: float = 2.0) -> None:  # fmt: skip
        self.host, self.port, self.db = host, port, db
        self.username, self.password = username, password
        self.tls, self.timeout_s = tls, timeout_s
        self._protocol: _PipelineProtocol | None = None
        self._connecting: asyncio.Future[_PipelineProtocol] | None = None

    @classmethod
    def for_url(cls, url: str) -> PipelinedConnection | None:
        """The connection `url` names (redis:// or rediss://, host, port, credentials and database); None for what
        it does not handle (a unix socket, query options), which then goes through redis-py."""
        parsed = parse_url(url)  # as the pool parsed it (redis-py's own reading of a URL)
        connection_class = parsed.pop("connection_class", None)
        tls = connection_class is SSLConnection
        if (connection_class is not None and not tls) or "host" not in parsed or set(parsed) - _URL_PARTS:
            return None
        return cls(
            parsed["host"],
            parsed.get("port", 6379),
            db=parsed.get("db", 0),
            username=parsed.get("username"),
            password=parsed.get("password"),
            tls=tls,
        )

    async def execute(self, commands: list[bytes]) -> list[Any]:
        """Send packed `commands` as one pipeline; their answers in order (an error answer as its exception)."""
        protocol = self._protocol
        if protocol is None or protocol.closed:
            protocol = await self._connect()
        return await protocol.send(commands)

    async def _connect(self) -> _PipelineProtocol:
        if self._connecting is None:  # callers arriving while one connects share its outcome
            self._connecting = asyncio.ensure_future(self._open())
            self._connecting.add_done_callback(self._connected)
        return await asyncio.shield(self._connecting)

    def _connected(self, opened: asyncio.Future[_PipelineProtocol]) -> None:
        self._connecting = None
        if not opened.cancelled() and opened.exception() is None:
            self._protocol = opened.result()

    async def _open(self) -> _PipelineProtocol:
        loop = asyncio.get_running_loop()
        context = ssl.create_default_context() if self.tls else None
        try:
            async with asyncio.timeout(self.timeout_s):
                _, protocol = await loop.create_connection(
                    lambda: _PipelineProtocol(self.timeout_s), self.host, self.port, ssl=context
                )
                hello = []
                if self.password is not None:
                    credentials = (self.password,) if self.username is None else (self.username, self.password)
                    hello.append(pack("AUTH", *credentials))
                if self.db:
                    hello.append(pack("SELECT", self.db))
                if hello:
                    for answer in await protocol.send(hello):
                        if isinstance(answer, Exception):
                            protocol.close()
                            said = " ".join(filter(None, (getattr(answer, "status_code", None), str(answer))))
                            raise RedisConnectionError(f"Redis refused the connection's set-up: {said}")
        except TimeoutError as exc:
            raise RedisTimeoutError(f"Redis at {self.host}:{self.port} did not accept in {self.timeout_s:g} s") from exc
        except OSError as exc:
            raise RedisConnectionError(f"Redis at {self.host}:{self.port} refused: {exc}") from exc
        return protocol

    def close(self) -> None:
        """Close the connection; a later `execute` opens a new one."""
        if self._protocol is not None:
            self._protocol.close()
            self._protocol = None


class _PipelineProtocol(asyncio.Protocol):
    """The answers of a connection's pipelines, in the order they were sent, each to its pipeline's future."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.closed = False
        self._transport: asyncio.Transport | None = None
        # an error answer becomes the exception redis-py's parsers make of it (NOSCRIPT, LOADING, ...), as redis-py's
        # own hiredis parser does it
        self._reader = hiredis.Reader(replyError=BaseParser.parse_error)
        # per pipeline in flight: its future, its answers so far, how many it expects, when it was sent
        self._waiting: collections.deque[tuple[asyncio.Future[list[Any]], list[Any], int, float]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes

    def send(self, commands: list[bytes]) -> asyncio.Future[list[Any]]:
        """Write `commands`; the future of their answers."""
        loop = asyncio.get_running_loop()
        answers: asyncio.Future[list[Any]] = loop.create_future()
        if self.closed or self._transport is None:
            answers.set_exception(RedisConnectionError("the Redis connection is closed"))
            return answers
        self._waiting.append((answers, [], len(commands), loop.time()))
        self._transport.write(b"".join(commands))
        if self._timer is None:
            self._timer = loop.call_later(self.timeout_s, self._check_answered)
        return answers

    def data_received(self, data: bytes) -> None:
        reader, waiting = self._reader, self._waiting
        try:
            reader.feed(data)
            while (answer := reader.gets()) is not False:
                answers, got, expected, _ = waiting[0]
                got.append(answer)
                if len(got) == expected:
                    waiting.popleft()
                    if not answers.done():  # its caller may have been cancelled
                        answers.set_result(got)
        except (hiredis.ProtocolError, IndexError) as exc:  # garbage, or an answer nobody asked for
            self._fail(RedisConnectionError(f"Redis answered out of protocol: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"the Redis connection was lost: {exc or 'closed by the server'}"))

    def _check_answered(self) -> None:
        self._timer = None
        if not self._waiting:
            return
        waited = asyncio.get_running_loop().time() - self._waiting[0][3]
        if waited >= self.timeout_s:
            self._fail(RedisTimeoutError(f"Redis did not answer in {self.timeout_s:g} s"))
        else:
            self._timer = asyncio.get_running_loop().call_later(self.timeout_s - waited, self._check_answered)

    def _fail(self, exc: Exception) -> None:
        self.close()
        while self._waiting:
            answers = self._waiting.popleft()[0]
            if not answers.done():
                answers.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.close()


def pack(*parts: str | int | float | bytes) -> bytes:
    """One command in Redis's protocol (hiredis's packer, as redis-py uses when hiredis is installed)."""
    packed: bytes = hiredis.pack_command(parts)  # type: ignore[arg-type]  # its stub says a 1-tuple; any length works
    return packed


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a pipeline task's failure as seen: its callers got it through their answers already."""
    if not task.cancelled():
        task.exception()
