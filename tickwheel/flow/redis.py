"""The Redis adapter (redis.asyncio): a client with a key prefix, mapping connection failures to Unavailable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tickwheel.errors import Unavailable
from tickwheel.settings import RedisSettings

REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


class RedisClient:
    """redis.asyncio with every key under `prefix` (a per-test namespace, or the platform's own)."""

    def __init__(self, settings: RedisSettings, *, prefix: str | None = None):
        # A pooled connection dies with a Redis restart; without retries every command on it fails until the
        # pool happens to replace it (seen: 503s for minutes). Retry once on a fresh connection instead.
        self.redis = aioredis.from_url(
            settings.url,
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
            health_check_interval=15,
        )
        self.prefix = settings.key_prefix if prefix is None else prefix
        self._scripts: dict[str, Any] = {}

    def key(self, *parts: str) -> str:
        """The key `parts` name, under this client's prefix."""
        return self.prefix + ":".join(parts)

    def pipeline(self) -> Pipeline:
        """Commands sent in one round trip, not a transaction: `async with client.pipeline() as pipe: ...`."""
        return self.redis.pipeline(transaction=False)

    async def set_if_absent(self, key: str, value: int | str) -> bool:
        """SET NX: whoever writes first wins; False when the key already had a value."""
        return bool(await self.redis.set(key, value, nx=True))

    async def decrement(self, key: str) -> int:
        """DECR, one less of a counter."""
        return int(await self.redis.decr(key))

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

    def script(self, source: str) -> Any:
        """Register a Lua script (once per source, no round trip: Redis learns it at its first call); the returned
        object is awaited with keys and args."""
        if source not in self._scripts:
            self._scripts[source] = self.redis.register_script(source)
        return self._scripts[source]

    async def close(self) -> None:
        """Close the connection pool."""
        await self.redis.aclose()
