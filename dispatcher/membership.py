"""The dispatcher in ZooKeeper: an ephemeral sequential member znode, the watched assignment, the session state
handed to the engine, and a liveness probe that lets the engine stop firing after a stall the session may not
have survived."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import msgspec

from dispatcher.engine import Dispatcher
from schemas.messages import decode_assignment
from tickwheel.coordination.zookeeper import SessionState, ZooKeeper

log = logging.getLogger(__name__)

MEMBERS = "/dispatchers/members"
ASSIGNMENT = "/dispatchers/assignment"


class Membership:
    def __init__(self, zk: ZooKeeper, engine: Dispatcher, *, liveness_interval_s: float = 1.0):
        self.zk = zk
        self.engine = engine
        self.member: str | None = None
        self._interval_s = liveness_interval_s
        self._lost = False
        self._tasks: list[asyncio.Task[None]] = []
        self._registering = asyncio.Lock()

    async def start(self) -> None:
        self.zk.on_state(self._on_state)
        await self.zk.ensure_path(MEMBERS)
        await self.register()
        self.zk.watch_data(ASSIGNMENT, self._on_assignment)
        self._tasks.append(asyncio.get_running_loop().create_task(self._liveness_loop()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def register(self) -> None:
        async with self._registering:
            data = f"{socket.gethostname()}:{self.engine.name}".encode()
            path = await self.zk.call("create", f"{MEMBERS}/m-", data, ephemeral=True, sequence=True)
            self.member = path.rsplit("/", 1)[1]
            self._lost = False
            log.info("registered as dispatcher member %s", self.member)
            self.engine.set_member(self.member)
            self.engine.confirm_alive()

    def _on_state(self, state: SessionState) -> None:
        self.engine.on_session(state)
        if state is SessionState.LOST:
            self.member = None
            self._lost = True

    def _on_assignment(self, data: bytes | None) -> None:
        if not data:
            return
        try:
            self.engine.offer(decode_assignment(data))
        except msgspec.DecodeError:
            log.warning("unreadable shard assignment in ZooKeeper: %r", data[:200])

    async def _liveness_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.probe()

    async def probe(self) -> None:
        """Confirm our member znode still exists (the session is alive); re-register after a loss."""
        if self.zk.state is not SessionState.CONNECTED:
            return
        if self.member is None or self._lost:
            try:
                await self.register()
            except Exception as exc:
                log.warning("re-registering failed: %s", exc)
            return
        try:
            stat = await self.zk.call("exists", f"{MEMBERS}/{self.member}")
        except Exception as exc:
            log.warning("liveness probe failed: %s", exc)
            return
        if stat is None:
            log.warning("member znode %s is gone: the session expired; dropping all shards", self.member)
            self.engine.drop_all()
            self.member = None
            self._lost = True
            return
        self.engine.confirm_alive()
