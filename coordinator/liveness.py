"""Noticing a dead or stopped dispatcher before ZooKeeper does. A killed process keeps its member znode until its
session times out (10 s, plus ZooKeeper's tick), a stopped one (SIGSTOP, a frozen VM) keeps it for as long as the
stop plus the session; its shards fire nowhere meanwhile. The active coordinator therefore asks every member's
health port (advertised in its znode, served by a thread of the dispatcher's own) for /healthz every
`member_probe_interval_s`: a port that refuses twice in a row has no process behind it, one that accepts but does
not answer for `member_silent_evict_s` has a stopped process behind it; either way the member znode is deleted and
the shards reassigned at once. The decisions are `tickwheel.core.liveness`'s; an unreachable network proves nothing
and waits for the session. An evicted dispatcher that was in fact alive sees its znode gone, stops firing and
registers again; one that was stopped had stopped firing on its own (`alive_window_s`) before it was evicted."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from schemas.messages import decode_member
from tickwheel import metrics
from tickwheel.coordination.zookeeper import NoNodeError, ZooKeeper
from tickwheel.core.liveness import Answer, EvictionPolicy, MemberRecord, Probe, observe, reading

log = logging.getLogger(__name__)

MEMBERS = "/dispatchers/members"
REQUEST = b"GET /healthz HTTP/1.0\r\nHost: tickwheel\r\n\r\n"


class Strikes:
    """Each member's record of probes; `observe` says when a member is to be evicted."""

    def __init__(self, policy: EvictionPolicy | None = None) -> None:
        self.policy = policy or EvictionPolicy()
        self._records: dict[str, MemberRecord] = {}

    def observe(self, member: str, probe: Probe) -> bool:
        record, evict = observe(self._records.get(member, MemberRecord()), probe, self.policy)
        self._records[member] = record
        return evict

    def keep_only(self, members: set[str]) -> None:
        for gone in set(self._records) - members:
            del self._records[gone]


async def ask(host: str, port: int, timeout_s: float) -> Answer:
    """Connect to host:port and ask for /healthz; REFUSED, ANSWERED, SILENT (no answer within `timeout_s`, the
    connect included) or UNKNOWN (an unreachable network, a connection reset or closed without an answer)."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(REQUEST)
            line = await reader.readline()
        return Answer.ANSWERED if line.startswith(b"HTTP/") else Answer.UNKNOWN
    except ConnectionRefusedError:
        return Answer.REFUSED
    except TimeoutError:
        return Answer.SILENT
    except OSError:
        return Answer.UNKNOWN
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class MemberProbe:
    """Probes the members' health ports and evicts the dead and the stopped (deletes their member znodes)."""

    def __init__(self, zk: ZooKeeper, policy: EvictionPolicy | None = None) -> None:
        self.zk = zk
        self.strikes = Strikes(policy)
        self._addresses: dict[str, tuple[str, int] | None] = {}

    async def sweep(self, members: list[str]) -> list[str]:
        """One probe of every member; returns the members evicted."""
        live = set(members)
        self.strikes.keep_only(live)
        for gone in set(self._addresses) - live:
            del self._addresses[gone]
        probes = await asyncio.gather(*(self._probe(m) for m in members))
        evicted = [m for m, p in zip(members, probes, strict=True) if p is not None and self.strikes.observe(m, p)]
        for member, probe in zip(members, probes, strict=True):
            if member in evicted and probe is not None:
                await self._evict(member, reading(probe, self.strikes.policy))
        return evicted

    async def _probe(self, member: str) -> Probe | None:
        address = await self._address(member)
        if address is None:
            return None
        loop = asyncio.get_running_loop()
        sent = loop.time()
        answer = await ask(*address, self.strikes.policy.timeout_s)
        return Probe(answer, sent, loop.time())

    async def _address(self, member: str) -> tuple[str, int] | None:
        if member not in self._addresses:
            try:
                data, _ = await self.zk.call("get", f"{MEMBERS}/{member}")
            except NoNodeError:
                return None
            info = decode_member(data) if data else None
            self._addresses[member] = (info.host, info.port) if info and info.host and info.port else None
        return self._addresses[member]

    async def _evict(self, member: str, answer: Answer) -> None:
        if answer is Answer.REFUSED:
            log.warning("dispatcher member %s refuses connections: its process is gone; evicting it", member)
        else:
            log.warning(
                "dispatcher member %s has not answered for %.1f s: its process is stopped; evicting it",
                member,
                self.strikes.policy.silent_s,
            )
        metrics.members_evicted.labels(reason=answer.value).inc()
        with contextlib.suppress(NoNodeError):
            await self.zk.call("delete", f"{MEMBERS}/{member}")
        self._addresses.pop(member, None)
        self.strikes.keep_only(set(self._addresses))
