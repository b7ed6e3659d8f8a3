"""Noticing a dead dispatcher before ZooKeeper does. A killed process keeps its member znode until its session
times out (10 s, plus ZooKeeper's tick), and its shards fire nowhere meanwhile. The active coordinator therefore
connects to every member's health port (advertised in its znode) every `member_probe_interval_s`: a port that
refuses twice in a row has no process behind it, so the member znode is deleted and the shards reassigned at
once. Only a refusal counts; a timeout or an unreachable network proves nothing and waits for the session.
An evicted dispatcher that was in fact alive sees its znode gone, stops firing and registers again."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from schemas.messages import decode_member
from tickwheel import metrics
from tickwheel.coordination.zookeeper import NoNodeError, ZooKeeper

log = logging.getLogger(__name__)

MEMBERS = "/dispatchers/members"
REFUSALS_TO_EVICT = 2
CONNECT_TIMEOUT_S = 1.0


class Strikes:
    """Consecutive refusals per member; `observe` says when a member is to be evicted."""

    def __init__(self, needed: int = REFUSALS_TO_EVICT) -> None:
        self.needed = needed
        self._count: dict[str, int] = {}

    def observe(self, member: str, refused: bool | None) -> bool:
        """`refused`: True (nothing listens), False (it answered), None (unknown: timed out, unreachable)."""
        if refused is False:
            self._count.pop(member, None)
        elif refused:
            self._count[member] = self._count.get(member, 0) + 1
        return self._count.get(member, 0) >= self.needed

    def keep_only(self, members: set[str]) -> None:
        for gone in set(self._count) - members:
            del self._count[gone]


async def refuses(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> bool | None:
    """Whether a TCP connect to host:port is refused (None when it neither connects nor is refused in time)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except ConnectionRefusedError:
        return True
    except (TimeoutError, OSError):
        return None
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return False


class MemberProbe:
    """Probes the members' health ports and evicts the dead (deletes their member znodes)."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk
        self.strikes = Strikes()
        self._addresses: dict[str, tuple[str, int] | None] = {}

    async def sweep(self, members: list[str]) -> list[str]:
        """One probe of every member; returns the members evicted."""
        live = set(members)
        self.strikes.keep_only(live)
        for gone in set(self._addresses) - live:
            del self._addresses[gone]
        results = await asyncio.gather(*(self._probe(m) for m in members))
        evicted = [m for m, refused in zip(members, results, strict=True) if self.strikes.observe(m, refused)]
        for member in evicted:
            await self._evict(member)
        return evicted

    async def _probe(self, member: str) -> bool | None:
        address = await self._address(member)
        return None if address is None else await refuses(*address)

    async def _address(self, member: str) -> tuple[str, int] | None:
        if member not in self._addresses:
            try:
                data, _ = await self.zk.call("get", f"{MEMBERS}/{member}")
            except NoNodeError:
                return None
            info = decode_member(data) if data else None
            self._addresses[member] = (info.host, info.port) if info and info.host and info.port else None
        return self._addresses[member]

    async def _evict(self, member: str) -> None:
        log.warning("dispatcher member %s refuses connections: its process is gone; evicting it", member)
        metrics.members_evicted.inc()
        with contextlib.suppress(NoNodeError):
            await self.zk.call("delete", f"{MEMBERS}/{member}")
        self.strikes.keep_only(set())
