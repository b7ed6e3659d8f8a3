"""The Redis adapter (redis.asyncio): a client with a key prefix, mapping connection failures to Unavailable."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
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
        self._batcher = ScriptBatcher(self.redis)

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
        """Close the connection pool."""
        await self.redis.aclose(close_connection_pool=True)


class ScriptBatcher:
    """Lua script calls of many runs sent as one Redis pipeline: the calls made while the event loop runs one
    round go out together after it, so a worker with hundreds of runs in flight pays one round trip (and one
    pooled connection) per round instead of one per call. Each call still gets its own answer or error."""

    def __init__(self, redis: aioredis.Redis):
        self.redis = redis
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
        pipe = self.redis.pipeline(transaction=False)
        for source, keys, args, _ in queued:
            pipe.evalsha(self._sha[source], len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a pipeline task's failure as seen: its callers got it through their answers already."""
    if not task.cancelled():
        task.exception()
